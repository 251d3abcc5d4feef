"""Advice: medic's recommendation for one job, versioned by a generation number.

A controller (in-process or remote) reconciles the scheduler towards the latest generation and
reports PENDING / CONVERGED / ABANDONED for the generation it observed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from medic.domain.cluster import Mode
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName

__all__ = ["Advice", "AdviceAction", "AdviceRequest", "Reconciliation"]


class AdviceAction(enum.StrEnum):
    """What medic recommends doing with a job."""

    REQUEUE = "requeue"
    """Requeue from the last checkpoint, excluding ``exclude_nodes``."""
    STOP = "stop"
    """Cancel the job; retrying is hopeless."""
    EXCLUDE_NEXT = "exclude_next"
    """Keep running, but exclude ``exclude_nodes`` at the next restart (stragglers)."""
    NONE = "none"


class Reconciliation(enum.StrEnum):
    """Controller's report on one generation of advice."""

    PENDING = "pending"
    CONVERGED = "converged"
    ABANDONED = "abandoned"

    @property
    def is_final(self) -> bool:
        return self is not Reconciliation.PENDING


@dataclass(frozen=True, slots=True)
class AdviceRequest:
    """What the policy decided; the store turns it into a (new generation of) :class:`Advice`."""

    cluster: ClusterName
    job_id: JobId
    attempt: int
    action: AdviceAction
    exclude_nodes: frozenset[NodeName]
    reason: str
    mode: Mode
    rule: str
    """The policy rule that decided (e.g. ``node-fault-requeue``, ``no-progress-stop``)."""
    repair_id: int | None = None
    """Who decided: None for job recovery's own diagnosis, a repair's id for the node repair
    that moves the job off its node (evacuation). A change of owner is a new decision."""


@dataclass(frozen=True, slots=True)
class Advice:
    """Stored advice: one row per job, whose generation grows with each new decision."""

    id: AdviceId
    cluster: ClusterName
    job_id: JobId
    generation: int
    attempt: int
    action: AdviceAction
    exclude_nodes: frozenset[NodeName]
    reason: str
    mode: Mode
    rule: str
    status: Reconciliation
    observed_generation: int
    created_at: datetime
    updated_at: datetime
    repair_id: int | None = None
    """The node repair whose evacuation this is (None: job recovery's own advice)."""

    @property
    def is_active(self) -> bool:
        """True while a controller still has to reconcile the current generation."""
        return self.action is not AdviceAction.NONE and not (
            self.observed_generation == self.generation and self.status.is_final
        )
