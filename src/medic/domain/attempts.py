"""Attempts: one run of a job between (re)queues, with the progress it made.

Progress is what separates a job worth restarting from one that crash-loops: the recovery policy
stops a job that made no new checkpoint in ``max_attempts_without_progress`` attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

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

    def merged(self, newer: Progress) -> Progress:
        """This (stored) progress updated with what was seen since, never losing a milestone.

        A medic that restarted mid-attempt sees only the lines written after its restart, so the
        attempt's first step and resumed-from checkpoint stay as stored, and steps only grow.
        """
        return Progress(
            first_step=_first(self.first_step, newer.first_step),
            last_step=_max(self.last_step, newer.last_step),
            last_checkpoint_step=_max(self.last_checkpoint_step, newer.last_checkpoint_step),
            loaded_checkpoint_step=_first(
                self.loaded_checkpoint_step, newer.loaded_checkpoint_step
            ),
            last_progress_at=_max(self.last_progress_at, newer.last_progress_at),
        )


_T = TypeVar("_T")
_Ordered = TypeVar("_Ordered", int, datetime)


def _first(a: _T | None, b: _T | None) -> _T | None:
    return a if a is not None else b


def _max(a: _Ordered | None, b: _Ordered | None) -> _Ordered | None:
    if a is None or b is None:
        return a if b is None else b
    return max(a, b)


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
