"""Findings and the check protocol.

Every check returns one :class:`CheckResult` per key it owns, each run, whatever it finds: ``ok``,
``failing``, ``not_supported`` (the metric does not exist on this hardware: not a failure),
``not_present`` (no such device on this node) or ``error`` (the check itself could not run; the
text says why). :func:`run_check` turns a check that raises into ``error`` results, so no check
can stop the agent.

The checks themselves live in :mod:`medic.agent.nvml` (GPUs) and :mod:`medic.agent.host`
(filesystems, InfiniBand).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from medic.domain.diagnosis import Severity

__all__ = [
    "Check",
    "CheckResult",
    "CheckStatus",
    "error_result",
    "names",
    "run_check",
    "worst",
]

logger = logging.getLogger(__name__)


class CheckStatus(enum.StrEnum):
    OK = "ok"
    FAILING = "failing"
    NOT_SUPPORTED = "not_supported"
    """The metric does not exist on this device or driver: recorded, never a failure."""
    NOT_PRESENT = "not_present"
    """The device class is absent here (no GPU or driver, no InfiniBand)."""
    ERROR = "error"
    """The check could not run; neither a failure nor a recovery."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One finding: what a check says about one key on this node, now."""

    key: str
    """Alert key: ``agent:<check>``, ``xid:<code>``, ``sig:<signature id>``."""
    status: CheckStatus
    summary: str
    """Short and stable while the condition lasts (no counters in it)."""
    description: str = ""
    """Plain language: what it means and what usually fixes it."""
    severity: Severity = Severity.WARNING
    evidence: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """Machine-readable values behind the finding."""
    xid: int | None = None
    event: bool = False
    """A one-off occurrence (a kernel line): sent each time it happens, never resolved here."""

    @property
    def failing(self) -> bool:
        return self.status is CheckStatus.FAILING

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "status": self.status.value,
            "summary": self.summary,
            "description": self.description,
            "severity": self.severity.value,
            "evidence": self.evidence,
            "xid": self.xid,
            "event": self.event,
        }


class Check(Protocol):
    """A periodic check. ``keys``: every key its results use (for ``error`` results)."""

    @property
    def name(self) -> str: ...

    @property
    def keys(self) -> tuple[str, ...]: ...

    def run(self) -> list[CheckResult]: ...


def error_result(key: str, message: str) -> CheckResult:
    return CheckResult(
        key=key,
        status=CheckStatus.ERROR,
        summary=f"{key}: check could not run",
        description=message[:1000],
        severity=Severity.WARNING,
        evidence={"error": message[:1000]},
    )


def run_check(check: Check) -> list[CheckResult]:
    """The check's results; ``error`` for each of its keys when it raises."""
    try:
        return check.run()
    except Exception as exc:
        logger.warning("check %s failed: %r", check.name, exc)
        message = f"{type(exc).__name__}: {exc}"
        return [error_result(key, message) for key in check.keys]


def names(items: Sequence[str]) -> str:
    """``a, b, c``: the items that a summary names."""
    return ", ".join(items)


def worst(statuses: Mapping[str, CheckStatus]) -> CheckStatus:
    """Aggregate per-device statuses: failing > error > ok > not_supported > not_present."""
    order = (
        CheckStatus.FAILING,
        CheckStatus.ERROR,
        CheckStatus.OK,
        CheckStatus.NOT_SUPPORTED,
        CheckStatus.NOT_PRESENT,
    )
    values = set(statuses.values())
    for status in order:
        if status in values:
            return status
    return CheckStatus.NOT_PRESENT
