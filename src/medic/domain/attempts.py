"""Attempts: one run of a job between (re)queues, with the progress it made.

Progress is what separates a job worth restarting from one that crash-loops: the recovery policy
stops a job that made no new checkpoint in ``max_attempts_without_progress`` attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from medic.domain.cluster import JobState
from medic.domain.ids import ClusterName, JobId, NodeName

__all__ = ["Attempt", "Progress"]


@dataclass(frozen=True, slots=True)
class Progress:
    """Forward progress seen in one attempt's logs (None: not seen yet)."""

    first_step: int | None = None
    """First iteration seen in this attempt (resume point + 1 after a checkpoint load)."""
    last_step: int | None = None
    last_checkpoint_step: int | None = None
    """Step of the newest checkpoint this attempt saved."""
    loaded_checkpoint_step: int | None = None
    """Step of the checkpoint this attempt resumed from."""
    last_progress_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    cluster: ClusterName
    job_id: JobId
    number: int
    """0 for the first run, then the scheduler's restart count."""
    nodes: tuple[NodeName, ...]
    state: JobState
    started_at: datetime | None
    ended_at: datetime | None
    progress: Progress = Progress()
