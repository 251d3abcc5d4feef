"""State gauges for ``/metrics``: what the store holds now, read at scrape time.

The counters and histograms of :mod:`medic.telemetry.metrics` say what happened; alert rules
(``deploy/prometheus/medic-rules.yaml``) also need what *is*: jobs by state, nodes by health,
repairs by state, how long the oldest repair has waited for a person's approval, whether the
circuit breaker is tripped, how many held jobs the fail-open watchdog released in the last hour
(from the audit trail: the watchdog runs beside the controller and reports only there), and
goodput over the last hour (:data:`GOODPUT_WINDOW`; :mod:`medic.measure.goodput`'s definition,
the figure ``/api/v1/goodput?window=3600`` gives). :class:`StateCollector` answers them from the
store when Prometheus scrapes, so they are true in every replica and after a restart, and cost
nothing between scrapes. Only open repairs are read (finished ones are counted by
``medic_repairs_total``), so a scrape does not grow with the repair history.

A store that does not answer makes ``medic_state_up`` 0 and leaves the other gauges out of that
scrape (Prometheus marks them stale): never an error on ``/metrics``, whose counters stay
scrapeable.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from medic.domain.actions import ActionKind
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.cluster import Job, JobState, Node
from medic.domain.ids import ClusterName
from medic.domain.repairs import (
    TERMINAL_STATES,
    Breaker,
    NodeHealth,
    NodeHealthEntry,
    Repair,
    RepairState,
)
from medic.measure.history import AttemptHistory, window_goodput
from medic.ports.cluster import Clock

__all__ = ["GOODPUT_WINDOW", "StateCollector", "StateStore"]

logger = logging.getLogger(__name__)

_OPEN = frozenset(s for s in RepairState if s not in TERMINAL_STATES)
GOODPUT_WINDOW = timedelta(hours=1)
"""The window of ``medic_goodput_ratio`` and ``medic_watchdog_releases``: short enough that an
alert sees a change within it."""
_AUDIT_LIMIT = 100_000
"""Action-succeeded events of the last hour read at most per scrape."""


class StateStore(AttemptHistory, Protocol):
    """What the gauges read (the SQL store has it all)."""

    def list_jobs(self, cluster: ClusterName | None = None) -> list[Job]: ...

    def list_nodes(self, cluster: ClusterName | None = None) -> list[Node]: ...

    def list_node_health(self, cluster: ClusterName | None = None) -> list[NodeHealthEntry]: ...

    def list_repairs(
        self,
        *,
        cluster: ClusterName | None = None,
        states: frozenset[RepairState] | None = None,
    ) -> list[Repair]: ...

    def get_breaker(self, cluster: ClusterName) -> Breaker: ...

    def query_audit(
        self,
        *,
        cluster: ClusterName | None = None,
        kind: AuditKind | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[AuditEvent]: ...


class StateCollector(Collector):
    """The state gauges of one cluster, read from ``store`` at each scrape."""

    def __init__(self, store: StateStore, cluster: ClusterName, clock: Clock) -> None:
        self._store = store
        self._cluster = cluster
        self._clock = clock

    def describe(self) -> Iterable[Metric]:
        """The families without samples (registering reads nothing from the store)."""
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "medic_state_up", "1 when the store answered the state gauges' queries this scrape."
        )
        try:
            families = list(self._families(read=True))
        except Exception as exc:  # a scrape must answer; the log says why the store did not
            logger.warning("metrics: the state gauges could not read the store: %s", exc)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from families

    def _families(self, *, read: bool = False) -> Iterator[GaugeMetricFamily]:
        cluster = self._cluster
        jobs = GaugeMetricFamily(
            "medic_jobs",
            "Jobs medic watches, by their last known state.",
            labels=["cluster", "state"],
        )
        nodes = GaugeMetricFamily(
            "medic_nodes", "Nodes by health (repair's read model).", labels=["cluster", "health"]
        )
        repairs = GaugeMetricFamily(
            "medic_repairs_open", "Repairs not finished yet, by state.", labels=["cluster", "state"]
        )
        waiting = GaugeMetricFamily(
            "medic_repair_approval_wait_seconds",
            "Seconds the oldest repair awaiting a person's approval has waited (0: none waits).",
            labels=["cluster"],
        )
        ratio = GaugeMetricFamily(
            "medic_goodput_ratio",
            "Productive share of the node time of the last hour's measured jobs (absent: no job"
            " reported progress in it).",
            labels=["cluster"],
        )
        released = GaugeMetricFamily(
            "medic_watchdog_releases",
            "Held jobs the fail-open watchdog released (recovery did not converge) in the last"
            " hour, as its audit events arrived.",
            labels=["cluster"],
        )
        breaker = GaugeMetricFamily(
            "medic_breaker_tripped",
            "1 while the repair circuit breaker is tripped (nothing is approved automatically).",
            labels=["cluster"],
        )
        if read:
            store = self._store
            known = store.list_jobs(cluster)
            by_state = Counter(j.state for j in known)
            for state in JobState:
                jobs.add_metric([cluster, state.value], by_state[state])
            unhealthy = {e.node: e.health for e in store.list_node_health(cluster)}
            health = Counter(
                unhealthy.get(n.name, NodeHealth.HEALTHY) for n in store.list_nodes(cluster)
            )
            for value in NodeHealth:
                nodes.add_metric([cluster, value.value], health[value])
            open_repairs = store.list_repairs(cluster=cluster, states=_OPEN)
            open_states = Counter(r.state for r in open_repairs)
            for repair_state in sorted(_OPEN):
                repairs.add_metric([cluster, repair_state.value], open_states[repair_state])
            now = self._clock.now()
            pending = [
                r.created_at for r in open_repairs if r.state is RepairState.PENDING_APPROVAL
            ]
            oldest = min(pending, default=None)
            waiting.add_metric(
                [cluster], max((now - oldest).total_seconds(), 0.0) if oldest else 0.0
            )
            breaker.add_metric([cluster], 1.0 if store.get_breaker(cluster).tripped else 0.0)
            succeeded = store.query_audit(
                cluster=cluster,
                kind=AuditKind.ACTION_SUCCEEDED,
                since=now - GOODPUT_WINDOW,
                limit=_AUDIT_LIMIT,
            )
            released.add_metric([cluster], sum(1 for e in succeeded if _watchdog_release(e)))
            measured = window_goodput(store, cluster, known, now - GOODPUT_WINDOW, now).ratio
            if measured is not None:
                ratio.add_metric([cluster], measured)
        yield from (jobs, nodes, repairs, waiting, breaker, released, ratio)


def _watchdog_release(event: AuditEvent) -> bool:
    """The watchdog's own release (docs/audit-events.md): its key says so, whatever the actor."""
    key = event.payload.get("key")
    return event.action == ActionKind.RELEASE.value and str(key).startswith("watchdog/")
