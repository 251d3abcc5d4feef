"""API models of the cluster overview and of goodput (``medic.api.clusters``).

Separate from the domain types: :class:`~medic.measure.Goodput` keeps node-seconds by
:class:`~medic.measure.Cause`; the wire names them ``*_node_seconds`` and the causes by value.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from medic.api.schemas_auth import ModesOut
from medic.api.schemas_repairs import BreakerOut
from medic.measure import Goodput

__all__ = [
    "ClusterOut",
    "GoodputOut",
    "GoodputSummaryOut",
    "JobCountsOut",
    "NodeCountsOut",
    "RepairCountsOut",
]


def _r(value: float) -> float:
    # Millisecond precision is plenty for node-seconds and keeps the JSON readable.
    return round(value, 3)


class GoodputSummaryOut(BaseModel):
    """Goodput over ``[start, end)``; times in node-seconds (seconds × nodes) unless named
    ``*_seconds`` only. ``ratio`` is null when no job with progress ran in the window."""

    start: datetime
    end: datetime
    ratio: float | None
    """Productive node-seconds over productive + badput node-seconds (0..1)."""
    productive_node_seconds: float
    badput_node_seconds: float
    badput: dict[str, float]
    """Badput node-seconds by cause: wasted_progress, stalled, downtime, no_progress."""
    unmeasured_node_seconds: float
    """Time of jobs that never reported progress: not in the ratio."""
    productive_seconds: float
    """Productive job-seconds, not weighted by nodes."""
    badput_seconds: float
    jobs: int
    """Jobs with measured time in the window."""
    unmeasured_jobs: int
    """Jobs with time in the window that never reported progress."""

    @classmethod
    def of(cls, g: Goodput) -> GoodputSummaryOut:
        ratio = g.ratio
        return cls(
            start=g.start,
            end=g.end,
            ratio=None if ratio is None else round(ratio, 6),
            productive_node_seconds=_r(g.productive),
            badput_node_seconds=_r(g.badput_total),
            badput={cause.value: _r(v) for cause, v in g.badput.items()},
            unmeasured_node_seconds=_r(g.unmeasured),
            productive_seconds=_r(g.productive_seconds),
            badput_seconds=_r(g.badput_seconds),
            jobs=g.jobs,
            unmeasured_jobs=g.unmeasured_jobs,
        )


class GoodputOut(BaseModel):
    """``GET /api/v1/goodput``: the window's summary and the same figures per bucket."""

    cluster: str | None
    """The cluster measured; null: every cluster medic knows."""
    window_seconds: int
    bucket_seconds: float
    summary: GoodputSummaryOut
    series: list[GoodputSummaryOut]
    """One entry per bucket, oldest first; together they cover the window."""


class NodeCountsOut(BaseModel):
    total: int
    by_state: dict[str, int]
    """By the scheduler's node state."""
    by_health: dict[str, int]
    """By medic's node health: healthy, degraded, under_repair, out_of_service."""


class JobCountsOut(BaseModel):
    total: int
    by_state: dict[str, int]


class RepairCountsOut(BaseModel):
    open: int
    """Repairs not finished (pending approval included)."""
    by_state: dict[str, int]


class ClusterOut(BaseModel):
    name: str
    scheduler: str | None
    """The scheduler kind (``sim``, ``slurm``) as recorded by the medic watching the cluster;
    null for a cluster known only from stored jobs or nodes."""
    watched: bool
    """True for the cluster this medic process watches."""
    nodes: NodeCountsOut
    jobs: JobCountsOut
    modes: ModesOut | None
    """Run-time observe/act modes (null when the store keeps none)."""
    breaker: BreakerOut | None
    """The repair circuit breaker (null when the store keeps no repairs)."""
    repairs: RepairCountsOut | None
    goodput: GoodputSummaryOut
    """Over the last 24 hours."""
