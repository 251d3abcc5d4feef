"""Revalidation of a repaired machine: the configured test suite and its verdict.

The suite is ``repair.validation_commands``: shell commands separated by `` ;; ``, each optionally
named by a ``[name]`` prefix (otherwise the command's first word names it), with ``{node}`` and
``{repair_id}`` placeholders; for example a DCGM diagnostic, a GPU burn, an NCCL all-reduce, an
InfiniBand and a storage test::

    [dcgm] dcgmi diag -r 2 --host {node} ;; [nccl] ssh {node} all_reduce_perf -b 1G -g 8

Every command runs (through an injected runner, so this module does no I/O of its own) with a
timeout, and the verdict has three outcomes:

- **pass**: every command exited 0;
- **fail**: at least one exited with another status: that is an explicit failure, so a ticket
  is opened with each test's result and log, and the machine stays out of service;
- **abort**: the suite could not run (no suite configured, no runner, a command missing or not
  executable (126/127), a command past its timeout) and nothing failed explicitly: the machine
  returns to its previous state and is not marked faulty.

The tests after an aborted one are not run (the suite cannot give a clean answer any more).

The verdict is handed on by :class:`medic.repair.return_to_service.ReturnToService`, which runs
the suite for a repaired machine and keeps it out of service after a failure.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    Repair,
    RepairState,
    ValidationOutcome,
    ValidationResult,
)

__all__ = [
    "SEPARATOR",
    "VALIDATION_ALERT",
    "CheckRunner",
    "ValidationCheck",
    "Validator",
    "failure_alert",
    "parse_validation_commands",
    "result_payload",
    "ticket_id",
    "validation_failed_nodes",
]

SEPARATOR = " ;; "
VALIDATION_ALERT = "validation:failed"
"""Alert key of a failed revalidation: critical, unmapped (a person decides), the evidence of the
next repair of the machine; resolved when a later revalidation passes."""
LOG_LIMIT = 2_000
"""Characters of each test's output kept in the result (its tail)."""
_NAMED = re.compile(r"^\[(?P<name>[^\]\s]{1,64})\]\s*(?P<command>.*)$", re.DOTALL)
_CANNOT_RUN = frozenset({126, 127})

CheckRunner = Callable[[str, Mapping[str, str], float], tuple[int | None, str]]
"""``(command, extra environment, timeout seconds) -> (exit status, output)``; the status is None
when the command could not start or ran past its timeout (``medic.schedulers.hooks.run_command``).
"""


@dataclass(frozen=True, slots=True)
class ValidationCheck:
    name: str
    command: str
    """With ``{node}`` / ``{repair_id}`` placeholders."""


def parse_validation_commands(text: str) -> tuple[ValidationCheck, ...]:
    """The suite in ``text`` (see the module docstring); blanks between separators are skipped."""
    checks = []
    for i, part in enumerate(p.strip() for p in text.split(SEPARATOR.strip())):
        if not part:
            continue
        match = _NAMED.match(part)
        if match and match["command"].strip():
            name, command = match["name"], match["command"].strip()
        else:
            words = part.split()
            name, command = f"{words[0].rsplit('/', 1)[-1]}#{i + 1}", part
        checks.append(ValidationCheck(name, command))
    return tuple(checks)


def ticket_id(cluster: ClusterName, repair_id: int, attempt: int) -> str:
    """The hardware ticket of a failed validation (stable: the same failure, the same ticket)."""
    return f"medic-{cluster}-r{repair_id}-v{attempt}"


def _render(template: str, node: NodeName, repair_id: int) -> str:
    return template.replace("{node}", shlex.quote(str(node))).replace(
        "{repair_id}", shlex.quote(str(repair_id))
    )


class Validator:
    """Runs the suite for one repaired node and gives its :class:`ValidationResult`."""

    def __init__(
        self,
        checks: tuple[ValidationCheck, ...],
        runner: CheckRunner | None,
        *,
        timeout: float,
    ) -> None:
        self.checks = checks
        self._run = runner
        self._timeout = timeout

    def validate(
        self,
        cluster: ClusterName,
        repair_id: int,
        node: NodeName,
        now: Callable[[], datetime],
        attempt: int = 1,
    ) -> tuple[ValidationResult, str]:
        """(result, one-line reason). ``attempt``: this repair's validation number (ticket id)."""
        tests: list[tuple[str, bool, str]] = []
        aborted = ""
        if not self.checks:
            aborted = "no validation commands are configured (repair.validation_commands)"
        elif self._run is None:
            aborted = "no command runner is available to run the validation suite"
        for check in self.checks if not aborted else ():
            command = _render(check.command, node, repair_id)
            env = {"MEDIC_NODE": str(node), "MEDIC_REPAIR_ID": str(repair_id)}
            assert self._run is not None
            status, output = self._run(command, {**env, "MEDIC_CHECK": check.name}, self._timeout)
            log = output[-LOG_LIMIT:]
            if status is None or status in _CANNOT_RUN:
                why = "timed out or could not start" if status is None else f"exit {status}"
                tests.append((check.name, False, f"[aborted: {why}] {log}"))
                aborted = f"{check.name} could not run ({why})"
                break
            tests.append(
                (check.name, status == 0, log if status == 0 else f"[exit {status}] {log}")
            )
        failed = [t[0] for t in tests if not t[1] and not t[2].startswith("[aborted")]
        if failed:
            outcome = ValidationOutcome.FAIL
            reason = f"failed: {', '.join(failed)}"
        elif aborted:
            outcome, reason = ValidationOutcome.ABORT, f"aborted: {aborted}"
        else:
            outcome = ValidationOutcome.PASS
            reason = f"passed: {', '.join(t[0] for t in tests)}"
        ticket = ticket_id(cluster, repair_id, attempt) if failed else None
        result = ValidationResult(repair_id, node, outcome, tuple(tests), now(), ticket)
        return result, reason


def result_payload(result: ValidationResult, reason: str) -> dict[str, object]:
    """The ``repair-validation`` audit payload of ``result``."""
    tests = [{"name": n, "passed": p, "log": log[-500:]} for n, p, log in result.tests]
    return {
        "repair_id": result.repair_id,
        "outcome": result.outcome.value,
        "reason": reason,
        "tests": tests,
        "ticket": result.ticket,
    }


def failure_alert(
    cluster: ClusterName, repair: Repair, ticket: str, reason: str, now: datetime
) -> Alert:
    """The critical ``validation:failed`` alert that keeps a machine out after a failed
    revalidation (until a later repair's revalidation passes)."""
    return Alert(
        cluster=cluster,
        node=repair.node,
        key=VALIDATION_ALERT,
        source=AlertSource.DETECTOR,
        summary=f"revalidation failed (ticket {ticket})",
        description=f"{repair.node} failed revalidation after repair {repair.id}: {reason}",
        severity=Severity.CRITICAL,
        evidence={"ticket": ticket, "repair_id": repair.id, "reason": reason},
        detector="medic-validation",
        first_seen=now,
        last_seen=now,
    )


def validation_failed_nodes(repairs: Iterable[Repair]) -> frozenset[NodeName]:
    """Nodes whose latest finished repair (cancelled ones aside) failed its revalidation."""
    latest: dict[NodeName, Repair] = {}
    for r in repairs:
        if r.state.is_terminal and r.state is not RepairState.CANCELLED:
            known = latest.get(r.node)
            if known is None or (r.updated_at, r.id) > (known.updated_at, known.id):
                latest[r.node] = r
    return frozenset(
        n
        for n, r in latest.items()
        if r.state is RepairState.FAILED and (r.error or "").startswith("validation failed")
    )
