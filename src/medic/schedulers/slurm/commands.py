"""Running Slurm clients and turning their failures into ``medic.errors`` (P2: the boundary).

``SlurmCli`` wraps a ``CommandRunner`` with the configured timeout and reads a failed command's
stderr: an unreachable or busy controller is ``TransientError``, an unknown job or node is
``NotFoundError``, a refused credential is ``UnauthorizedError``, anything else
``PermanentError``. Every message names the command and quotes what Slurm printed. JSON commands
that exit 0 but report ``errors`` inside the payload (``squeue --json`` does when slurmctld is
down, with an empty job list) raise ``TransientError`` too, so a failed poll never reads as an
empty cluster.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from medic.errors import (
    AdapterError,
    NotFoundError,
    PermanentError,
    TransientError,
    UnauthorizedError,
)
from medic.schedulers.slurm.runner import CommandResult, CommandRunner
from medic.schedulers.slurm.versions import payload_errors

__all__ = ["SlurmCli", "classify_failure"]

_TRANSIENT = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connection timed out",
    "connection reset",
    "unexpected message received",
    "zero bytes were transmitted",
    "communication connection failure",
    "resource temporarily unavailable",
    "temporarily unavailable",
    "backup controller in standby",
    "slurmctld is busy",
    "munge encode failed",
    "transport endpoint",
    "try again",
    "problem talking to the database",
)
_NOT_FOUND = (
    "invalid job id",
    "invalid node name",
    "unknown job",
    "job not found",
    re.compile(r"node \S+ not found"),
)
_UNAUTHORIZED = (
    "access/permission denied",
    "permission denied",
    "user not authorized",
    "authentication error",
    "invalid authentication credential",
)


def _matches(text: str, patterns: Sequence[str | re.Pattern[str]]) -> bool:
    return any(p.search(text) if isinstance(p, re.Pattern) else p in text for p in patterns)


def classify_failure(argv: Sequence[str], result: CommandResult) -> AdapterError:
    """The error a failed Slurm command stands for (pure: unit-tested on recorded stderr)."""
    said = (result.stderr.strip() or result.stdout.strip())[:2000]
    message = f"`{shlex.join(argv)}` failed (exit {result.returncode}): {said or 'no output'}"
    lowered = said.lower()
    if result.returncode < 0 or _matches(lowered, _TRANSIENT):
        return TransientError(message)
    if _matches(lowered, _NOT_FOUND):
        return NotFoundError(message)
    if _matches(lowered, _UNAUTHORIZED):
        return UnauthorizedError(message)
    return PermanentError(message)


class SlurmCli:
    """The Slurm commands of one cluster, each bounded by ``timeout`` seconds."""

    def __init__(self, runner: CommandRunner, *, timeout: float) -> None:
        self._runner = runner
        self._timeout = timeout

    def run(self, argv: Sequence[str], *, tolerate: Sequence[str] = ()) -> CommandResult:
        """Run ``argv``; raise the classified error when it fails, unless its output contains one
        of ``tolerate`` (lower case), in which case the failed result is returned."""
        result = self._runner.run(argv, timeout=self._timeout)
        if result.returncode == 0:
            return result
        said = f"{result.stderr}\n{result.stdout}".lower()
        if any(pattern in said for pattern in tolerate):
            return result
        raise classify_failure(argv, result)

    def json(self, argv: Sequence[str]) -> dict[str, Any]:
        """Run a ``--json`` command and return its payload (errors inside it raised)."""
        result = self.run(argv)
        try:
            payload = json.loads(result.stdout)
        except ValueError as exc:
            head = result.stdout.strip()[:200]
            raise TransientError(f"`{shlex.join(argv)}` printed no JSON: {head!r}") from exc
        if not isinstance(payload, dict):
            raise TransientError(f"`{shlex.join(argv)}` printed JSON that is not an object")
        errors = payload_errors(payload)
        if errors:
            raise TransientError(f"`{shlex.join(argv)}` reported errors: {'; '.join(errors)}")
        return payload
