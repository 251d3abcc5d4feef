"""How Slurm commands run: on this host (``LocalRunner``) or on a login node over SSH
(``SshRunner``).

A runner executes one argv (never through a shell on this side) and returns what the command
printed and its exit status; deciding what a non-zero status *means* is the adapter's job. Only
the failures a runner alone can recognise are raised here, as ``TransientError``: the binary is
missing, the command ran past its timeout, or ssh could not reach the login node.
``UnauthorizedError`` when ssh's key was refused.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from medic.config.settings import SlurmRunner, SlurmSettings
from medic.errors import ConfigError, TransientError, UnauthorizedError

__all__ = [
    "CommandResult",
    "CommandRunner",
    "LocalRunner",
    "SshRunner",
    "runner_from_settings",
]

SSH_FAILED = 255
"""ssh's own exit status when the connection (not the remote command) failed."""
CLIENT_ENV = {"SLURM_TIME_FORMAT": "standard"}
"""Set for every command: ``scontrol`` prints ISO times whatever the user's environment says."""
KEPT_SLURM_VARIABLES = {"SLURM_CONF"}


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one command printed (decoded as UTF-8, undecodable bytes replaced) and its status."""

    stdout: str
    stderr: str
    returncode: int


class CommandRunner(Protocol):
    """Runs one Slurm client command and waits for it."""

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run ``argv``; raise ``TransientError`` when it could not run or finish in time."""
        ...


def _describe(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def _execute(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> CommandResult:
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise TransientError(f"{argv[0]}: command not found (is Slurm installed?)") from exc
    except PermissionError as exc:
        raise TransientError(f"{argv[0]}: not executable: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise TransientError(
            f"`{_describe(argv)}` did not finish within {timeout:g} s", retry_after=timeout
        ) from exc
    return CommandResult(
        stdout=done.stdout.decode("utf-8", errors="replace"),
        stderr=done.stderr.decode("utf-8", errors="replace"),
        returncode=done.returncode,
    )


class LocalRunner:
    """Runs commands on this host with this process's environment plus ``env``.

    Inherited ``SLURM_*`` variables other than ``SLURM_CONF`` are dropped (a medic started
    inside a Slurm job must not act as part of that job); ``env`` (typically ``SLURM_CONF``)
    wins.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._extra = dict(env or {})

    def environ(self) -> dict[str, str]:
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SLURM_") or k in KEPT_SLURM_VARIABLES
        }
        return base | CLIENT_ENV | self._extra

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        return _execute(argv, self.environ(), timeout)


class SshRunner:
    """Runs commands on a login node through the ``ssh`` binary (key-based, non-interactive).

    The remote side gets one shell command line: ``env K=V ... argv``, every word quoted with
    ``shlex.quote``, so node names, reasons and comments cannot be interpreted by the remote
    shell. Unknown host keys are accepted on first use and checked afterwards.
    """

    def __init__(
        self,
        host: str,
        *,
        user: str = "",
        port: int = 22,
        key: str = "",
        env: Mapping[str, str] | None = None,
        ssh: str = "ssh",
    ) -> None:
        if not host:
            raise ValueError("SshRunner needs a host")
        self._host = host
        self._user = user
        self._port = port
        self._key = key
        self._env = CLIENT_ENV | dict(env or {})
        self._ssh = ssh

    def remote_command(self, argv: Sequence[str]) -> str:
        """The command line the login node's shell runs for ``argv``."""
        assignments = [f"{k}={v}" for k, v in sorted(self._env.items())]
        words = ["env", *assignments, *argv] if assignments else list(argv)
        return " ".join(shlex.quote(word) for word in words)

    def ssh_argv(self, argv: Sequence[str], timeout: float) -> list[str]:
        """The local ``ssh`` invocation for ``argv``."""
        connect = max(1, min(int(timeout), 10))
        cmd = [self._ssh, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]
        cmd += ["-o", f"ConnectTimeout={connect}", "-p", str(self._port)]
        if self._key:
            cmd += ["-i", self._key]
        if self._user:
            cmd += ["-l", self._user]
        return [*cmd, "--", self._host, self.remote_command(argv)]

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        result = _execute(self.ssh_argv(argv, timeout), os.environ, timeout)
        if result.returncode == SSH_FAILED:
            where = f"{self._user + '@' if self._user else ''}{self._host}:{self._port}"
            message = f"ssh {where} failed for `{_describe(argv)}`: {result.stderr.strip()}"
            if "permission denied" in result.stderr.lower():
                raise UnauthorizedError(message)
            raise TransientError(message)
        return result


def runner_from_settings(settings: SlurmSettings) -> CommandRunner:
    """The runner ``slurm.runner`` names, with ``SLURM_CONF`` when ``slurm.slurm_conf`` is set."""
    env = {"SLURM_CONF": settings.slurm_conf} if settings.slurm_conf else {}
    if settings.runner is SlurmRunner.SSH:
        if not settings.ssh_host:
            raise ConfigError("slurm.ssh_host", "runner: ssh needs the login node's host name")
        return SshRunner(
            settings.ssh_host,
            user=settings.ssh_user,
            port=settings.ssh_port,
            key=settings.ssh_key,
            env=env,
        )
    return LocalRunner(env)
