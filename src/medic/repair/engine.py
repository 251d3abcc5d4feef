"""The node auto-repair engine: failed checks -> alerts -> recommendations -> repairs.

The control loop calls :meth:`RepairEngine.run_pass` once per pass with what it read. Level-
triggered: any pass can be rerun, and several engines can share one store. Each pass:

1. **alerts**, each marking its node Degraded, none dropped: catalogue signatures on a node
   (kernel lines; a job-log line only when it implicates its node) through
   :func:`~medic.repair.rules.lightest.alert_from_detection` with the signature's ``node_action``;
   the scheduler's word (DOWN, NOT_RESPONDING, drained by someone else) as ``slurm:*`` alerts,
   observed, never overridden, resolved when the state clears; the agent's and detectors'
   alerts, stored through the API. An alert seen firing anew is audited and counted (mapped or
   not). With a drain-request parser (Slurm), ``medic-request:`` drain reasons go to
   :func:`medic.repair.intake.submit_repair`;
2. **auto-resolve**: a recommendation nobody acted on is cancelled once its alerts cleared;
3. **recommend** (:func:`~medic.repair.rules.recommend.recommend`) for each node with a firing alert
   and no open repair, oldest alert first, then trip the breaker when due. Steps 2 and 3 are the
   :class:`~medic.repair.recommend.Recommender`'s (its docstring has the details);
4. **lifecycle** (:class:`~medic.repair.lifecycle.Lifecycle`) of every approved repair;
5. **cordons** (:mod:`medic.repair.cordon`): in act mode a node with a critical alert is drained
   at once, whatever its repair's approval, and returned when no such alert fires;
6. **node health**, written to the store's read model when it changes (the one the API, CLI and
   console show), and the nodes job recovery must avoid (:meth:`placement_exclusions`); the
   exclusions medic added to jobs for a node that came back are taken off
   (:mod:`medic.repair.exclusions`).

Alerts raised from log lines clear after their clear window without a new sighting
(:mod:`medic.repair.rules.clearing`), so a healed node does not stay degraded.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from medic.config.settings import RepairSettings
from medic.detect.signatures import Signature
from medic.domain.cluster import OUT_OF_SERVICE, Job, Node
from medic.domain.diagnosis import Detection
from medic.domain.ids import NodeName
from medic.domain.repairs import (
    OPEN_STATES,
    TERMINAL_STATES,
    Alert,
    AlertState,
    NodeHealth,
    Repair,
    RepairAction,
    RepairState,
)
from medic.ports import Clock, NodeProvider, Scheduler
from medic.repair.alerts import (
    AlertSources,
    DrainRequests,
    NullRepairMetrics,
    RepairMetrics,
    RepairStores,
    submit_drain_requests,
)
from medic.repair.cordon import Cordons
from medic.repair.exclusions import ExclusionReturns
from medic.repair.intake_common import node_pools
from medic.repair.lifecycle import Lifecycle, PassView
from medic.repair.recommend import Recommender
from medic.repair.rules.clearing import ClearWindows
from medic.repair.rules.waiting import critical_alert_nodes, job_placement_exclusions, node_health
from medic.repair.validation import (
    CheckRunner,
    Validator,
    parse_validation_commands,
    validation_failed_nodes,
)

__all__ = ["RepairEngine", "RepairPassReport"]

logger = logging.getLogger(__name__)

HISTORY = timedelta(days=10)
"""Repairs and alerts read each pass: escalation looks back 7 days, migration evidence 10."""
_CLOCK_SKEW = timedelta(minutes=1)
"""Margin for repairs another replica (with its own clock) created around our last read."""


@dataclass(frozen=True, slots=True)
class RepairPassReport:
    alerts_fired: int
    alerts_resolved: int
    recommended: int
    cancelled: int
    transitions: int
    open_repairs: int


class RepairEngine:
    """Node auto-repair for one cluster (see the module docstring)."""

    def __init__(
        self,
        *,
        store: RepairStores,
        scheduler: Scheduler,
        provider: NodeProvider,
        clock: Clock,
        settings: RepairSettings,
        metrics: RepairMetrics | None = None,
        validation_runner: CheckRunner | None = None,
        signatures: Iterable[Signature] = (),
        drain_requests: DrainRequests | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._scheduler = scheduler
        self._clock = clock
        self._metrics = metrics or NullRepairMetrics()
        self._cluster = scheduler.cluster
        self._drain_requests = drain_requests
        checks = parse_validation_commands(settings.validation_commands)
        validator = Validator(
            checks, validation_runner, timeout=settings.validation_timeout_seconds
        )
        self.lifecycle = Lifecycle(
            store=store,
            scheduler=scheduler,
            provider=provider,
            clock=clock.now,
            settings=settings,
            validator=validator,
            metrics=self._metrics,
        )
        node_actions = {str(s.id): s.node_action.value for s in signatures if s.node_action}
        windows = ClearWindows(settings.alert_clear_seconds, settings.critical_alert_clear_seconds)
        self._alerts = AlertSources(store, self._cluster, self._metrics, node_actions, windows)
        self._cordons = Cordons(store=store, scheduler=scheduler) if settings.cordon else None
        self._returns = ExclusionReturns(store=store, scheduler=scheduler)
        self._recommender = Recommender(
            store=store,
            cluster=self._cluster,
            settings=settings,
            metrics=self._metrics,
            lifecycle=self.lifecycle,
            alerts=self._alerts,
            executable=frozenset(a for a in RepairAction if provider.can(a)),
        )
        self._finished: dict[int, Repair] = {}
        self._open_ids: set[int] = set()
        self._read_until: datetime | None = None
        self._exclusions: frozenset[NodeName] = frozenset()
        self._health: dict[NodeName, NodeHealth] = {}
        self._written: dict[NodeName, NodeHealth] | None = None
        """The node health last written to the store's read model (None: not yet)."""

    # ------------------------------------------------------------------ public
    def placement_exclusions(self) -> frozenset[NodeName]:
        """Nodes job recovery must never use (under repair, out of service, critical alert)."""
        return self._exclusions

    def before_release(self, job: Job) -> None:
        """Right before job recovery releases ``job`` (held, pending): take off the exclusions
        medic added for nodes that are back in service."""
        self._returns.carry_out(job, self._clock.now())

    def health(self) -> dict[NodeName, NodeHealth]:
        """Health of every node that is not healthy, as of the last pass."""
        return dict(self._health)

    def run_pass(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[Job],
        detections: Sequence[Detection],
        acting: frozenset[NodeName] = frozenset(),
        changed: frozenset[NodeName] | None = None,
    ) -> RepairPassReport:
        """One pass; ``acting``: the nodes in act mode (cordoned when a critical alert fires);
        ``changed``: the nodes whose scheduler state changed since the previous pass (None: any
        may have), so that a pass over an unchanged cluster costs little."""
        now = self._clock.now()
        firing_now = self._store.list_alerts(cluster=self._cluster, state=AlertState.FIRING)
        alerts = {(a.node, a.key): a for a in firing_now}
        fired = self._alerts.ingest(detections, alerts, now)
        repairs = {
            r.id: r for r in self._store.list_repairs(cluster=self._cluster, states=OPEN_STATES)
        }
        observed, resolved = self._alerts.observe(nodes, alerts, repairs.values(), now, changed)
        resolved += self._alerts.expire(alerts, repairs.values(), now)
        fired += observed + self._alerts.notice(alerts, now)
        repairs |= self._finished_repairs(repairs, now)
        firing: dict[NodeName, list[Alert]] = defaultdict(list)
        for a in alerts.values():
            if a.state is AlertState.FIRING:
                firing[a.node].append(a)
        open_repairs = [r for r in repairs.values() if r.state in OPEN_STATES]
        view = PassView(
            now=now,
            policy=self._store.get_repair_policy(self._cluster),
            nodes={n.name: n for n in nodes},
            jobs=jobs,
            firing=firing,
            open_repairs=sorted(open_repairs, key=lambda r: r.id),
            cluster_nodes=len(nodes),
            pools=node_pools(nodes),
            exclusions=self._exclusions,
            validation_failed=validation_failed_nodes(repairs.values()),
        )
        if self._drain_requests is not None:
            submit_drain_requests(self._store, self._drain_requests, self._cluster, nodes, view)
            view.open_repairs = self._open()
        cancelled = self._recommender.auto_resolve(view)
        created = self._recommender.recommend(view, repairs)
        self.lifecycle.begin_pass(view)
        for repair in list(view.open_repairs):
            if repair.state is not RepairState.PENDING_APPROVAL:
                try:
                    self.lifecycle.advance(repair, view)
                except Exception:  # one repair must not stop the others
                    logger.exception("repair %s: lifecycle step failed", repair.id)
        self.lifecycle.sweep(view)
        for moved in view.moved:
            repairs[moved.id] = moved
            if moved.state.is_terminal:
                self._finished[moved.id] = moved
        if any(m.state.is_terminal for m in view.moved):  # a finished repair resolves alerts
            firing = defaultdict(list)
            for a in self._store.list_alerts(cluster=self._cluster, state=AlertState.FIRING):
                firing[a.node].append(a)
        if self._cordons is not None:
            view.firing = firing
            self._cordons.run(view, acting)
        self._update_health(firing, repairs.values())
        out = self._exclusions | {n.name for n in nodes if n.state in OUT_OF_SERVICE}
        self._returns.run(jobs, frozenset(out), now)
        return RepairPassReport(
            fired, resolved, created, cancelled, len(view.moved), len(view.open_repairs)
        )

    def _finished_repairs(self, open_now: dict[int, Repair], now: datetime) -> dict[int, Repair]:
        """The cluster's repairs finished in the last :data:`HISTORY`. They never change again,
        so after a first full read only what finished since is read: the repairs that left the
        open set, and those created (and finished) since the last pass."""
        since = now - HISTORY if self._read_until is None else self._read_until - _CLOCK_SKEW
        found = self._store.list_repairs(cluster=self._cluster, states=TERMINAL_STATES, since=since)
        if self._read_until is not None:
            left = self._open_ids - open_now.keys() - self._finished.keys()
            found += [r for i in sorted(left) if (r := self._store.get_repair(i)) is not None]
        self._finished |= {r.id: r for r in found if r.state.is_terminal}
        self._finished = {i: r for i, r in self._finished.items() if now - r.updated_at <= HISTORY}
        self._open_ids, self._read_until = set(open_now), now
        return dict(self._finished)

    def _open(self) -> list[Repair]:
        found = self._store.list_repairs(cluster=self._cluster, states=OPEN_STATES)
        return sorted(found, key=lambda r: r.id)

    # ------------------------------------------------------------------ health
    def _update_health(
        self, firing: dict[NodeName, list[Alert]], repairs: Iterable[Repair]
    ) -> None:
        by_node: dict[NodeName, list[Repair]] = defaultdict(list)
        for r in repairs:
            by_node[r.node].append(r)
        failed = validation_failed_nodes([r for rs in by_node.values() for r in rs])
        health: dict[NodeName, NodeHealth] = {}
        for node in set(firing) | set(by_node) | failed:
            state = node_health(firing.get(node, []), by_node.get(node, []), node in failed)
            if state is not NodeHealth.HEALTHY:
                health[node] = state
        self._health = health
        if health != self._written:  # the read model the API, CLI and console show
            self._store.put_node_health(self._cluster, health, self._clock.now())
            self._written = dict(health)
        alerts = [a for alerts in firing.values() for a in alerts]
        self._exclusions = job_placement_exclusions(health, critical_alert_nodes(alerts))
