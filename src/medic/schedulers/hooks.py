"""Operator command hooks for node repair: a :class:`~medic.ports.NodeProvider` decorator.

Sites repair machines with their own tools (a BMC client for a power cycle, a provisioning
system for a reprovision or a migration). :class:`HookNodeProvider` runs the command configured
for an action (``repair.<action>_command``) and delegates every other action, and every other
call, to the scheduler's own provider (Slurm: ``scontrol reboot``; the simulator: everything)::

    provider = HookNodeProvider.from_settings(SlurmNodeProvider(runner, settings.slurm),
                                              settings.repair)

A command is a string run by ``/bin/sh -c`` on the medic host, with ``{node}`` and
``{repair_id}`` replaced by their shell-quoted values; the environment also carries
``MEDIC_NODE``, ``MEDIC_REPAIR_ID`` and ``MEDIC_ACTION``. It must return when the action is done
(exit 0) or has failed (any other status): medic then waits for the node to answer again, without
asking for a new boot (a rebuilt machine may keep its boot id as far as medic can tell). A
command that fails, cannot start or outlives ``repair.hook_timeout_seconds`` fails the repair
(``PermanentError``): a half-done reprovision is never retried blindly.

:func:`run_command` is also the runner of the validation suite (``medic.repair.validation``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping

from medic.config.settings import RepairSettings
from medic.domain.ids import NodeName
from medic.domain.repairs import RepairAction
from medic.errors import PermanentError
from medic.ports import NodeProvider

__all__ = ["OUTPUT_LIMIT", "HookNodeProvider", "hook_commands", "render", "run_command"]

logger = logging.getLogger(__name__)

OUTPUT_LIMIT = 4_000
"""Characters of a command's combined output kept (its tail)."""

Runner = Callable[[str, Mapping[str, str], float], tuple[int | None, str]]
"""``(command, extra environment, timeout) -> (exit status or None, output tail)``."""


def run_command(command: str, env: Mapping[str, str], timeout: float) -> tuple[int | None, str]:
    """Run ``command`` with ``/bin/sh -c`` and ``env`` added to this process's environment.

    Returns (exit status, the tail of stdout and stderr together); the status is None when the
    command could not start or ran past ``timeout`` seconds (its whole process group is killed).
    """
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        return None, f"cannot start /bin/sh: {exc}"
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, f"{_tail(out or '')}\n[timed out after {timeout:g} s]".lstrip()
    return proc.returncode, _tail(out or "")


def _tail(text: str) -> str:
    return text[-OUTPUT_LIMIT:]


def render(template: str, node: NodeName, repair_id: int) -> str:
    """``template`` with ``{node}`` and ``{repair_id}`` replaced by their shell-quoted values
    (other braces are left alone, so shell ``${VAR}`` still works)."""
    return template.replace("{node}", shlex.quote(str(node))).replace(
        "{repair_id}", shlex.quote(str(repair_id))
    )


def hook_commands(settings: RepairSettings) -> dict[RepairAction, str]:
    """The configured (non-empty) hook command of each action."""
    configured = {
        RepairAction.RESET_GPU: settings.reset_gpu_command,
        RepairAction.POWER_CYCLE: settings.power_cycle_command,
        RepairAction.REPROVISION: settings.reprovision_command,
        RepairAction.MIGRATE: settings.migrate_command,
        RepairAction.REMOVE: settings.remove_command,
    }
    return {action: cmd for action, cmd in configured.items() if cmd.strip()}


class HookNodeProvider:
    """``NodeProvider`` that runs the operator's command for the actions in ``commands`` and
    delegates the rest to ``inner`` (see the module docstring)."""

    def __init__(
        self,
        inner: NodeProvider,
        commands: Mapping[RepairAction, str],
        *,
        timeout: float = 3600.0,
        runner: Runner = run_command,
    ) -> None:
        self.inner = inner
        self.commands = dict(commands)
        self._timeout = timeout
        self._run = runner

    @classmethod
    def from_settings(cls, inner: NodeProvider, settings: RepairSettings) -> HookNodeProvider:
        return cls(inner, hook_commands(settings), timeout=settings.hook_timeout_seconds)

    def reboot(self, node: NodeName, reason: str) -> None:
        self.inner.reboot(node, reason)

    def can(self, action: RepairAction) -> bool:
        return action in self.commands or self.inner.can(action)

    def boot_id(self, node: NodeName) -> str:
        return self.inner.boot_id(node)

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        template = self.commands.get(action)
        if template is None:
            self.inner.execute(node, action, repair_id)
            return
        command = render(template, node, repair_id)
        env = {"MEDIC_NODE": str(node), "MEDIC_REPAIR_ID": str(repair_id), "MEDIC_ACTION": action}
        logger.info("repair %s: %s hook for %s: %s", repair_id, action, node, command)
        status, output = self._run(command, env, self._timeout)
        if status != 0:
            what = "could not run or timed out" if status is None else f"exited {status}"
            raise PermanentError(
                f"{action} hook for {node} (repair {repair_id}) {what}: {output.strip()[-500:]}"
            )

    def in_flight(self, node: NodeName, action: RepairAction) -> bool | None:
        if action in self.commands:
            # A hook runs in its own session and outlives the medic that started it: a medic
            # that took over cannot see it from here.
            return None
        return self.inner.in_flight(node, action)

    def rejoined(self, node: NodeName, action: RepairAction, boot_id_before: str | None) -> bool:
        # A hook returns when its action is done: the node only has to answer again.
        before = None if action in self.commands else boot_id_before
        return self.inner.rejoined(node, action, before)
