"""Scheduler actions: the single steps a controller takes to carry out advice.

Every step has an idempotency key derived from the advice and its generation, so a controller that
restarts mid-recovery finds the steps it already took and never repeats them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName

__all__ = ["ActionKind", "ActionRecord", "ActionStatus", "idempotency_key"]


class ActionKind(enum.StrEnum):
    REQUEUE_HOLD = "requeue_hold"
    EXCLUDE_NODES = "exclude_nodes"
    INCLUDE_NODES = "include_nodes"
    """An exclusion medic added to a job taken off again: its node is back in service."""
    RELEASE = "release"
    CANCEL = "cancel"
    DRAIN_NODE = "drain_node"
    RESUME_NODE = "resume_node"
    REBOOT_NODE = "reboot_node"


class ActionStatus(enum.StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    """The scheduler already was in the desired state; nothing was issued."""


def idempotency_key(
    advice_id: AdviceId, generation: int, kind: ActionKind, target: str | None = None
) -> str:
    """The key that makes a step happen at most once for one generation of advice."""
    return f"advice/{advice_id}/g{generation}/{kind.value}" + (f"/{target}" if target else "")


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One scheduler step as stored."""

    key: str
    cluster: ClusterName
    kind: ActionKind
    status: ActionStatus
    job_id: JobId | None
    node: NodeName | None
    advice_id: AdviceId | None
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = None
    holder: str | None = None
    """The process that began the step's latest try (a lease holder; None: recorded unfenced)."""
    token: int | None = None
    """The fencing token it began that try under."""
