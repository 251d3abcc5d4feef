"""Clusters and goodput: what a person looks at first.

=======  ==================================  =====================================================
GET      /api/v1/clusters                    every cluster medic knows: nodes by state and
                                             health, jobs by state, modes, breaker, open repairs,
                                             goodput over the last 24 hours
GET      /api/v1/clusters/{name}             one of them (404 for a cluster medic does not know)
GET      /api/v1/goodput                     ``?cluster=&window=SECONDS&buckets=N``: goodput over
                                             the last ``window`` seconds (60 s to 30 days, default
                                             24 h), its badput by cause, and the same figures in
                                             ``buckets`` equal slices (1 to 500, default 24)
=======  ==================================  =====================================================

Readers (viewer, operator, admin) may call them. The clusters medic knows are the one this process
watches and those of the jobs in its store. Goodput is computed on each request from the stored
attempts by :mod:`medic.measure.goodput` (the definition is there), with ``now`` from the API's
clock: nothing is precomputed, so a change of definition applies to the past too.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from medic.api.auth import READERS, require
from medic.api.openapi import problems
from medic.api.schemas_auth import ModesOut
from medic.api.schemas_clusters import (
    ClusterOut,
    GoodputOut,
    GoodputSummaryOut,
    JobCountsOut,
    NodeCountsOut,
    RepairCountsOut,
)
from medic.api.schemas_repairs import BreakerOut
from medic.domain.cluster import Job, Node
from medic.domain.ids import ClusterName
from medic.domain.repairs import NodeHealth, NodeHealthEntry
from medic.errors import NotFoundError
from medic.measure import Goodput, goodput, goodput_series
from medic.measure.history import window_goodput, window_intervals
from medic.services import Services

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["clusters"], responses=problems(401, 403, 503))

DAY = 86_400
MIN_WINDOW = 60
MAX_WINDOW = 30 * DAY
MAX_BUCKETS = 500
OVERVIEW_WINDOW = timedelta(days=1)
"""The goodput window of ``/clusters``."""

_Readers = Depends(require(*READERS))
ClusterName_ = Annotated[
    str, Path(min_length=1, max_length=128, description="Cluster name, as in /api/v1/clusters")
]
ClusterQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][\w.:@+-]*$",
        description="Measure one cluster (default: every cluster medic knows)",
    ),
]
Window = Annotated[
    int,
    Query(
        ge=MIN_WINDOW,
        le=MAX_WINDOW,
        description="Seconds back from now: 60 (one minute) to 2592000 (30 days)",
    ),
]
Buckets = Annotated[
    int, Query(ge=1, le=MAX_BUCKETS, description="Equal slices of the window in the series")
]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _known(services: Services) -> dict[ClusterName, str | None]:
    """Every cluster in the store (nodes, jobs or a medic watching it) and its scheduler kind."""
    known = services.store.list_clusters()
    known.setdefault(services.cluster, services.settings.scheduler.kind)
    return dict(sorted(known.items()))


# --- goodput -------------------------------------------------------------------------------------
def _overview_goodput(services: Services, cluster: ClusterName, jobs: Sequence[Job]) -> Goodput:
    now = services.clock.now()
    start = now - OVERVIEW_WINDOW
    return window_goodput(services.store, cluster, jobs, start, now)


@router.get(
    "/goodput", response_model=GoodputOut, dependencies=[_Readers], responses=problems(404, 422)
)
def get_goodput(
    request: Request,
    cluster: ClusterQuery = None,
    window: Window = DAY,
    buckets: Buckets = 24,
) -> GoodputOut:
    """Goodput over the last ``window`` seconds: the share of node time that went into training
    progress that was kept, the rest (badput) by cause, and a series for charts."""
    services = _services(request)
    name = ClusterName(cluster) if cluster else None
    jobs = services.store.list_jobs(name)
    if name is not None and name not in _known(services):
        raise NotFoundError(f"cluster {name!r} is not known to medic; see /api/v1/clusters")
    now = services.clock.now()
    start = now - timedelta(seconds=window)
    found = window_intervals(services.store, name, jobs, start, now)
    return GoodputOut(
        cluster=name,
        window_seconds=window,
        bucket_seconds=window / buckets,
        summary=GoodputSummaryOut.of(goodput(found, start, now)),
        series=[GoodputSummaryOut.of(g) for g in goodput_series(found, start, now, buckets)],
    )


# --- clusters ------------------------------------------------------------------------------------
def _health(nodes: Sequence[Node], stored: Sequence[NodeHealthEntry]) -> Counter[str]:
    """Nodes by health, from the read model the repair engine keeps (no entry: healthy)."""
    health = {e.node: e.health for e in stored}
    return Counter(health.get(n.name, NodeHealth.HEALTHY).value for n in nodes)


def _cluster(
    services: Services, name: ClusterName, scheduler: str | None, all_jobs: Sequence[Job]
) -> ClusterOut:
    nodes = services.store.list_nodes(name)
    jobs = [j for j in all_jobs if j.cluster == name]
    repair_store = services.repair_store
    health = repair_store.list_node_health(name)
    open_repairs = [r for r in repair_store.list_repairs(cluster=name) if not r.state.is_terminal]
    counts = RepairCountsOut(
        open=len(open_repairs), by_state=_counts(r.state for r in open_repairs)
    )
    modes = ModesOut.of(services.modes.get_modes(name), services.settings.scheduler.mode)
    watched = name == services.cluster
    return ClusterOut(
        name=name,
        scheduler=scheduler,
        watched=watched,
        nodes=NodeCountsOut(
            total=len(nodes),
            by_state=_counts(n.state for n in nodes),
            by_health=dict(sorted(_health(nodes, health).items())),
        ),
        jobs=JobCountsOut(total=len(jobs), by_state=_counts(j.state for j in jobs)),
        modes=modes,
        breaker=BreakerOut.of(repair_store.get_breaker(name)),
        repairs=counts,
        goodput=GoodputSummaryOut.of(_overview_goodput(services, name, jobs)),
    )


def _counts(values: Iterable[enum.Enum]) -> dict[str, int]:
    found = Counter(str(v.value) for v in values)
    return dict(sorted(found.items()))


@router.get("/clusters", response_model=list[ClusterOut], dependencies=[_Readers])
def list_clusters(request: Request) -> list[ClusterOut]:
    """Every cluster medic knows, by name."""
    services = _services(request)
    jobs = services.store.list_jobs()
    return [_cluster(services, name, kind, jobs) for name, kind in _known(services).items()]


@router.get(
    "/clusters/{name}",
    response_model=ClusterOut,
    dependencies=[_Readers],
    responses=problems(404, 422),
)
def get_cluster(request: Request, name: ClusterName_) -> ClusterOut:
    """One cluster's overview."""
    services = _services(request)
    cluster = ClusterName(name)
    jobs = services.store.list_jobs(cluster)
    known = _known(services)
    if cluster not in known:
        raise NotFoundError(f"cluster {name!r} is not known to medic; see /api/v1/clusters")
    return _cluster(services, cluster, known[cluster], jobs)
