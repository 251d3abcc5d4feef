"""What detection and attribution produce: detections (one matched line or derived finding) and
the verdict for one failed or stalled attempt."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from medic.domain.ids import JobId, NodeName, SignatureId

__all__ = [
    "Detection",
    "FaultDomain",
    "JobAction",
    "Role",
    "Severity",
    "Verdict",
]


class FaultDomain(enum.StrEnum):
    """Which layer a fault belongs to; decides who fixes it and whether a retry can help."""

    HARDWARE = "hardware"
    NETWORK = "network"
    SYSTEM_SOFTWARE = "system_software"
    APPLICATION = "application"
    SCHEDULER = "scheduler"
    NONE = "none"


class Role(enum.StrEnum):
    """How a signature relates to the failure it appears in."""

    ROOT = "root"
    """Can be the first cause (Xid 79, CUDA OOM, a Python traceback)."""
    CASCADE = "cascade"
    """A symptom of a failure elsewhere (NCCL watchdog timeout, remote peer exited)."""
    CONFIRMATION = "confirmation"
    """Supports a root found elsewhere, never a verdict on its own."""
    PROGRESS = "progress"
    """Evidence of forward progress (iteration or checkpoint lines)."""
    NOISE = "noise"


class Severity(enum.StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class JobAction(enum.StrEnum):
    """What a signature or verdict calls for, for the job."""

    RESTART = "restart"
    STOP = "stop"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Detection:
    """One signature hit (or derived finding such as a hang) in one job's attempt.

    ``node`` is the node that emitted the line; it is evidence against that node only when
    ``implicates_node`` is True (the signature's ``implicates: emitter``). The store keeps one
    row for identical detections (same job, attempt, signature, node, rank and fields): the
    first line as evidence, ``count`` lines in all, the last seen at ``last_seen``.
    """

    job_id: JobId | None
    attempt: int
    signature_id: SignatureId
    domain: FaultDomain
    role: Role
    severity: Severity
    action: JobAction
    time: datetime
    node: NodeName | None = None
    rank: int | None = None
    implicates_node: bool = False
    text: str = ""
    fields: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    seq: int = 0
    count: int = field(default=1, compare=False)
    """How many identical lines this detection stands for (1: only itself)."""
    last_seen: datetime | None = field(default=None, compare=False)
    """When the last of them was seen (None: when this one was, ``time``)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Root-cause attribution for one attempt.

    ``implicated_nodes`` holds only nodes with direct evidence against them (their kernel lines,
    their GPU's errors, the scheduler's node failure), never victims of a cascade.
    """

    job_id: JobId
    attempt: int
    domain: FaultDomain
    action: JobAction
    implicated_nodes: frozenset[NodeName]
    confidence: float
    root_signature: SignatureId | None
    summary: str
    evidence: tuple[Detection, ...] = ()
    time: datetime | None = None
