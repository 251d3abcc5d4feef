"""The node auto-repair engine: failed checks -> alerts -> recommendations -> repairs.

The control loop calls :meth:`RepairEngine.run_pass` once per pass with what it read. Level-
triggered: any pass can be rerun, and several engines can share one store. Each pass:

1. **alerts**, each marking its node Degraded, none dropped: catalogue signatures on a node
   (kernel lines; a job-log line only when it implicates its node) through
   :func:`~medic.policy.lightest.alert_from_detection` with the signature's ``node_action``; the
   scheduler's word (DOWN, NOT_RESPONDING, drained by someone else) as ``slurm:*`` alerts,
   observed, never overridden, resolved when the state clears; the agent's and detectors'
   alerts, stored through the API. An alert seen firing anew is audited and counted (mapped or
   not). With a drain-request parser (Slurm), ``medic-request:`` drain reasons go to
   :func:`medic.control.intake.submit_repair`;
2. **auto-resolve**: a recommendation nobody acted on is cancelled once its alerts cleared;
3. **recommend** (:func:`~medic.policy.repair.recommend`) for each node with a firing alert and no
   open repair, oldest alert first, at most ``repair.max_recommendations_per_pass`` (request id
   ``medic:<node>:<n>``, so two engines create one repair); a skip is audited when its rule
   changes. After each automatic approval the breaker
   is evaluated (automatic repairs since its last reset) and tripped: automatic approval pauses
   until a person resets it (:func:`medic.control.repair_decisions.reset_breaker`);
4. **lifecycle** (:class:`~medic.control.lifecycle.Lifecycle`) of every approved repair;
5. **node health** and the nodes job recovery must avoid (:meth:`placement_exclusions`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from medic.config.settings import RepairSettings
from medic.control.lifecycle import Lifecycle, PassView
from medic.control.repair_alerts import (
    AlertSources,
    DrainRequests,
    NullRepairMetrics,
    RepairMetrics,
    RepairStores,
    repair_event,
    submit_drain_requests,
)
from medic.control.validation import (
    VALIDATION_ALERT,
    CheckRunner,
    Validator,
    parse_validation_commands,
    validation_failed_nodes,
)
from medic.detect.signatures import Signature
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, Node
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import NodeName
from medic.domain.repairs import (
    TERMINAL_STATES,
    Alert,
    AlertState,
    Breaker,
    NodeHealth,
    Repair,
    RepairAction,
    RepairState,
)
from medic.errors import ConflictError
from medic.policy.guards import (
    AUTO_APPROVER,
    RULE_ALERT_CLEARED,
    breaker_should_trip,
    has_evidence,
    in_cooldown,
    should_auto_resolve,
)
from medic.policy.ladder import RULE_MIGRATION_GATE
from medic.policy.repair import (
    MEDIC_REQUESTER,
    Recommendation,
    Skip,
    critical_alert_nodes,
    job_placement_exclusions,
    node_health,
    recommend,
)
from medic.ports import Clock, NodeProvider, Scheduler

__all__ = [
    "VALIDATION_ALERT",
    "NullRepairMetrics",
    "RepairEngine",
    "RepairMetrics",
    "RepairPassReport",
]

logger = logging.getLogger(__name__)

HISTORY = timedelta(days=10)
"""Repairs and alerts read each pass: escalation looks back 7 days, migration evidence 10."""
_OPEN = frozenset(RepairState) - TERMINAL_STATES
_BUSY = frozenset({RepairState.EXECUTING, RepairState.REJOINING, RepairState.VALIDATING})
_NOT_STARTED = frozenset({RepairState.PENDING_APPROVAL, RepairState.APPROVED})
_IGNORED_ROLES = frozenset({Role.PROGRESS, Role.NOISE})
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
        self._executable = frozenset(a for a in RepairAction if provider.can(a))
        """What this cluster can carry out: the lightest of those is recommended."""
        node_actions = {str(s.id): s.node_action.value for s in signatures if s.node_action}
        self._alerts = AlertSources(store, self._cluster, self._metrics, node_actions)
        self._skips: dict[NodeName, str] = {}
        self._finished: dict[int, Repair] = {}
        self._open_ids: set[int] = set()
        self._read_until: datetime | None = None
        self._exclusions: frozenset[NodeName] = frozenset()
        self._health: dict[NodeName, NodeHealth] = {}

    # ------------------------------------------------------------------ public
    def placement_exclusions(self) -> frozenset[NodeName]:
        """Nodes job recovery must never use (under repair, out of service, critical alert)."""
        return self._exclusions

    def health(self) -> dict[NodeName, NodeHealth]:
        """Health of every node that is not healthy, as of the last pass."""
        return dict(self._health)

    def run_pass(
        self, nodes: Sequence[Node], jobs: Sequence[Job], detections: Sequence[Detection]
    ) -> RepairPassReport:
        now = self._clock.now()
        firing_now = self._store.list_alerts(cluster=self._cluster, state=AlertState.FIRING)
        alerts = {(a.node, a.key): a for a in firing_now}
        fired = self._alerts.ingest(detections, alerts, now)
        repairs = {r.id: r for r in self._store.list_repairs(cluster=self._cluster, states=_OPEN)}
        observed, resolved = self._alerts.observe(nodes, alerts, repairs.values(), now)
        fired += observed + self._alerts.notice(alerts, now)
        repairs |= self._finished_repairs(repairs, now)
        firing: dict[NodeName, list[Alert]] = defaultdict(list)
        for a in alerts.values():
            if a.state is AlertState.FIRING:
                firing[a.node].append(a)
        open_repairs = [r for r in repairs.values() if r.state in _OPEN]
        view = PassView(
            now=now,
            policy=self._store.get_repair_policy(self._cluster),
            nodes={n.name: n for n in nodes},
            jobs=jobs,
            firing=firing,
            open_repairs=sorted(open_repairs, key=lambda r: r.id),
            cluster_nodes=len(nodes),
            pools={n.name: n.partitions[0] for n in nodes if n.partitions},
            exclusions=self._exclusions,
            validation_failed=validation_failed_nodes(repairs.values()),
        )
        if self._drain_requests is not None:
            submit_drain_requests(self._store, self._drain_requests, self._cluster, nodes, view)
            view.open_repairs = self._open()
        cancelled = self._auto_resolve(view)
        created = self._recommend(view, repairs)
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
        self._update_health(firing, repairs.values())
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
        found = self._store.list_repairs(cluster=self._cluster, states=_OPEN)
        return sorted(found, key=lambda r: r.id)

    # ------------------------------------------------------------------ recommendations
    def _past(self, node: NodeName) -> list[Alert]:
        """The node's alerts that fired before and resolved (read only when needed)."""
        found = self._store.list_alerts(cluster=self._cluster, node=node)
        return [a for a in found if a.state is AlertState.RESOLVED]

    def _auto_resolve(self, view: PassView) -> int:
        cancelled = 0
        for repair in list(view.open_repairs):
            firing = view.firing.get(repair.node, [])
            if repair.state not in _NOT_STARTED or set(repair.alert_keys) & {a.key for a in firing}:
                continue  # started, or still firing: nothing to resolve
            check = should_auto_resolve(repair, [*firing, *self._past(repair.node)])
            if check and self.lifecycle.move(
                repair, RepairState.CANCELLED, view, RULE_ALERT_CLEARED, check.reason
            ):
                cancelled += 1
        return cancelled

    def _recommend(self, view: PassView, repairs: dict[int, Repair]) -> int:
        history: dict[NodeName, list[Repair]] = defaultdict(list)
        for r in repairs.values():
            history[r.node].append(r)
        busy = {r.node for r in view.open_repairs}
        breaker = self._store.get_breaker(self._cluster)
        created = 0

        def oldest(node: NodeName) -> str:
            seen = [a.first_seen.isoformat() for a in view.firing[node] if a.first_seen]
            return min(seen, default="~") + node

        for node in sorted((n for n in view.firing if n not in busy), key=oldest):
            if created >= self._settings.max_recommendations_per_pass:
                break  # the rest next pass, oldest alert first: a storm never stalls the loop
            answer = self._answer(view, node, history[node], breaker, ())
            if isinstance(answer, Recommendation) and _gated(answer):
                # migration refused on the firing alerts alone: the last 10 days count too
                answer = self._answer(view, node, history[node], breaker, self._past(node))
            if isinstance(answer, Skip):
                self._skipped(node, answer, view.now)
                continue
            repair = self._create(answer, view)
            if repair is None:
                continue
            created += 1
            repairs[repair.id] = repair
            view.open_repairs.append(repair)
            if repair.approved_by == AUTO_APPROVER:
                breaker = self._trip_if_due(breaker, repairs.values(), view)
        # detectors' requests are automatic repairs too, and arrive through the intake
        self._trip_if_due(breaker, repairs.values(), view)
        return created

    def _answer(
        self,
        view: PassView,
        node: NodeName,
        history: Sequence[Repair],
        breaker: Breaker,
        past: Sequence[Alert],
    ) -> Recommendation | Skip:
        return recommend(
            view.firing[node],
            node,
            history,
            view.policy,
            breaker,
            view.cluster_nodes,
            view.open_repairs,
            view.pools,
            view.now,
            past_alerts=past,
            executable=self._executable,
        )

    def _skipped(self, node: NodeName, skip: Skip, now: datetime) -> None:
        if self._skips.get(node) == skip.rule:
            return
        self._skips[node] = skip.rule
        payload: dict[str, Any] = {"rule": skip.rule, "reason": skip.reason}
        payload |= {"alert_keys": list(skip.alert_keys), "unmapped": list(skip.unmapped)}
        payload["retry_at"] = skip.retry_at.isoformat() if skip.retry_at else None
        self._store.append_audit(
            repair_event(AuditKind.REPAIR_SKIPPED, now, self._cluster, node, payload)
        )

    def _create(self, answer: Recommendation, view: PassView) -> Repair | None:
        node = answer.request.node
        mine = self._store.list_repairs(cluster=self._cluster, node=node)
        if any(r.state in _OPEN for r in mine):
            return None  # another engine (or a person) got there first
        # Read after the repairs: a repair that finished resolved its alerts before it did.
        fresh = self._store.list_alerts(cluster=self._cluster, node=node, state=AlertState.FIRING)
        if not has_evidence(answer.request, fresh) or in_cooldown(
            node, mine, view.policy, view.now
        ):
            return None  # another engine finished a repair here meanwhile
        seq = 1 + sum(1 for r in mine if r.requested_by == MEDIC_REQUESTER)
        request = replace(answer.request, request_id=f"{MEDIC_REQUESTER}:{node}:{seq}")
        repair, created = self._store.create_repair(
            request,
            state=answer.state,
            now=view.now,
            approved_by=answer.approved_by,
            rule=answer.rule,
        )
        if not created:
            return None
        self._skips.pop(node, None)
        starts = [self._alerts.fired_at.get((node, k)) for k in repair.alert_keys]
        starts += [a.last_seen for a in view.firing[node] if a.key in repair.alert_keys]
        earliest = min((t for t in starts if t is not None), default=view.now)
        latency = max(0.0, (view.now - earliest).total_seconds())
        self._metrics.recommendation_latency(latency)
        self._metrics.repair_state(self._cluster, repair.action.value, repair.state.value)
        payload: dict[str, Any] = {"repair_id": repair.id, "state": repair.state.value}
        payload |= {"rule": answer.rule, "reason": answer.reason, "approved_by": repair.approved_by}
        payload |= {"alert_keys": list(repair.alert_keys), "request_id": repair.request_id}
        payload |= {"trace": [list(t) for t in answer.trace], "unmapped": list(answer.unmapped)}
        payload |= {"escalated_from": answer.escalated_from, "latency_seconds": latency}
        event = repair_event(
            AuditKind.REPAIR_RECOMMENDED,
            view.now,
            self._cluster,
            node,
            payload,
            repair.action.value,
        )
        self._store.append_audit(event)
        return repair

    def _trip_if_due(self, breaker: Breaker, repairs: Iterable[Repair], view: PassView) -> Breaker:
        if breaker.tripped:
            return breaker
        since = breaker.reset_at
        counted = [r for r in repairs if since is None or (r.approved_at or r.created_at) > since]
        check = breaker_should_trip(counted, view.cluster_nodes, view.policy, view.now)
        if not check:
            return breaker
        tripped = replace(breaker, tripped=True, tripped_at=view.now, reason=check.reason)
        try:
            stored = self._store.set_breaker(tripped, expected_tripped=False)
        except ConflictError:
            return self._store.get_breaker(self._cluster)
        auto = sorted(r.id for r in counted if r.approved_by == AUTO_APPROVER)
        payload = {"rule": check.rule, "reason": check.reason, "auto_repairs": auto}
        self._store.append_audit(
            repair_event(AuditKind.BREAKER_TRIPPED, view.now, self._cluster, None, payload)
        )
        return stored

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
        alerts = [a for alerts in firing.values() for a in alerts]
        self._exclusions = job_placement_exclusions(health, critical_alert_nodes(alerts))


def _gated(answer: Recommendation) -> bool:
    """The migration gate turned a migration into a reprovision."""
    gate = any(rule == RULE_MIGRATION_GATE for rule, _ in answer.trace)
    return gate and answer.request.action is not RepairAction.MIGRATE
