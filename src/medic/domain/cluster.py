"""Scheduler-neutral snapshot of a cluster: nodes, jobs and their states.

Adapters (sim, Slurm, later Kubernetes) translate their own vocabulary into these types, so the
decision core never sees a scheduler-specific string.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from medic.domain.ids import ClusterName, JobId, NodeName

__all__ = ["Job", "JobSpec", "JobState", "Mode", "Node", "NodeState", "is_medic_reason"]

MEDIC_REASON_PREFIX = "medic:"


class NodeState(enum.StrEnum):
    """Base state of a node as the scheduler reports it."""

    IDLE = "idle"
    ALLOCATED = "allocated"
    MIXED = "mixed"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"
    UNKNOWN = "unknown"

    @property
    def is_usable(self) -> bool:
        """True when new work may be placed on the node."""
        return self in (NodeState.IDLE, NodeState.ALLOCATED, NodeState.MIXED)


class JobState(enum.StrEnum):
    """Life-cycle state of a job as the scheduler reports it."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETING = "completing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    """Of an attempt: ended because the job was requeued while it still ran."""
    UNKNOWN = "unknown"

    @property
    def is_terminal(self) -> bool:
        """True when the job will not run again unless someone requeues it."""
        return self in (
            JobState.COMPLETED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.TIMEOUT,
            JobState.NODE_FAIL,
            JobState.PREEMPTED,
            JobState.REQUEUED,
        )


class Mode(enum.StrEnum):
    """Whether medic only recommends (observe) or also issues scheduler commands (act)."""

    OBSERVE = "observe"
    ACT = "act"


REQUEST_PREFIX = "medic-request:"
"""A drain reason or node comment asking medic for a repair (``medic.schedulers.slurm.requests``);
a drain with it was handed to medic by whoever wrote it."""
OUT_OF_SERVICE = frozenset({NodeState.DRAINED, NodeState.DRAINING, NodeState.DOWN})
"""Node states in which no new work is placed."""


def is_medic_reason(reason: str | None) -> bool:
    """True when a drain/down reason was set by medic (``medic:`` prefix), i.e. ours to undo."""
    return bool(reason) and reason is not None and reason.startswith(MEDIC_REASON_PREFIX)


@dataclass(frozen=True, slots=True)
class Node:
    """One machine as the scheduler sees it."""

    name: NodeName
    state: NodeState
    partitions: tuple[str, ...] = ()
    gpus: int = 0
    reason: str | None = None
    """Drain/down reason as set by whoever drained it (``medic:`` prefix when medic did)."""
    comment: str | None = field(default=None, compare=False)
    """Free text on the node (Slurm's node ``Comment``): where a detector without API access
    writes a ``medic-request:``. Read each pass, not stored (not part of ``==``)."""
    not_responding: bool = field(default=False, compare=False)
    """The scheduler lost contact with the node but has not declared it down yet (Slurm's
    ``NOT_RESPONDING`` flag on a state other than DOWN: it will be DOWN after ``SlurmdTimeout``,
    and its jobs end then). ``state`` is DOWN meanwhile: nothing new may be placed there. Read
    each pass, not stored."""


@dataclass(frozen=True, slots=True)
class Job:
    """One batch job; an *attempt* is one run of it between (re)queues.

    ``restart_count`` is the scheduler's count of requeues (Slurm's ``SLURM_RESTART_COUNT``), so the
    current attempt number is ``restart_count``.
    """

    id: JobId
    cluster: ClusterName
    name: str
    state: JobState
    partition: str
    nodes: tuple[NodeName, ...] = ()
    excluded_nodes: frozenset[NodeName] = frozenset()
    restart_count: int = 0
    held: bool = False
    num_nodes: int = 1
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    exit_code: int | None = None
    comment: str | None = None
    """Raw job comment; medic's per-job options live under its ``"medic"`` key (JSON)."""
    admin_comment: str | None = None
    """The job's admin comment (Slurm's ``AdminComment``): where medic marks a job it holds
    (:mod:`medic.domain.holds`)."""
    log_paths: tuple[str, ...] = ()
    options: dict[str, object] = field(default_factory=dict, hash=False, compare=False)
    """Parsed medic options from the comment (empty when none or invalid)."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What to submit: a distributed training job (used by the demo, benchmarks and tests)."""

    name: str
    num_nodes: int
    partition: str | None = None
    comment: str | None = None
    train_iters: int = 100_000
    """Iterations until the job completes."""

    @classmethod
    def numbered(cls, index: int, *, num_nodes: int, partitions: int) -> JobSpec:
        """The ``index``-th demo training job, spread round-robin over partitions ``p0..``."""
        return cls(
            name=f"train-{index:03d}", num_nodes=num_nodes, partition=f"p{index % partitions}"
        )
