"""medic's own repair recommendations, once per engine pass (steps 2 and 3 of
:mod:`medic.repair.engine`).

- **auto-resolve**: a recommendation nobody acted on (pending approval, or approved and not
  started) is cancelled once its alerts cleared;
- **recommend** (:func:`~medic.repair.rules.recommend.recommend`) for each node with a firing alert
  and no open repair, oldest alert first, at most ``repair.max_recommendations_per_pass`` (request
  id ``medic:<node>:<n>``, so two engines create one repair); a skip is audited when its rule
  changes. The breaker is evaluated before the first recommendation (the nodes that began
  alerting, whatever the budget lets start), after each automatic approval and at the end of the
  pass (detectors' requests), each time on what happened since its last reset
  (:func:`~medic.repair.rules.guards.breaker_should_trip`); tripped, automatic approval pauses and
  the approved automatic repairs that did not start are held until a person resets it
  (:func:`medic.repair.policy_changes.reset_breaker`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from medic.config.settings import RepairSettings
from medic.domain.audit import AuditKind
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import Alert, AlertState, Breaker, Repair, RepairAction, RepairState
from medic.errors import ConflictError
from medic.repair.alerts import AlertSources, RepairMetrics, repair_event
from medic.repair.intake_common import IntakeStore
from medic.repair.lifecycle import Lifecycle, PassView
from medic.repair.rules.guards import (
    AUTO_APPROVER,
    breaker_should_trip,
    has_evidence,
    in_cooldown,
    should_auto_resolve,
)
from medic.repair.rules.recommend import MEDIC_REQUESTER, Recommendation, Skip, recommend

__all__ = ["Recommender"]

_NOT_STARTED = frozenset({RepairState.PENDING_APPROVAL, RepairState.APPROVED})


class Recommender:
    """medic's recommendations for one cluster (see the module docstring); it remembers the
    last skip rule audited for each node, so a skip is audited once per rule."""

    def __init__(
        self,
        *,
        store: IntakeStore,
        cluster: ClusterName,
        settings: RepairSettings,
        metrics: RepairMetrics,
        lifecycle: Lifecycle,
        alerts: AlertSources,
        executable: frozenset[RepairAction],
    ) -> None:
        self._store = store
        self._cluster = cluster
        self._settings = settings
        self._metrics = metrics
        self._lifecycle = lifecycle
        self._alerts = alerts
        self._executable = executable
        """What this cluster can carry out: the lightest of those is recommended."""
        self._skips: dict[NodeName, str] = {}

    def _past(self, node: NodeName) -> list[Alert]:
        """The node's alerts that fired before and resolved (read only when needed)."""
        found = self._store.list_alerts(cluster=self._cluster, node=node)
        return [a for a in found if a.state is AlertState.RESOLVED]

    def auto_resolve(self, view: PassView) -> int:
        """Cancel the not-yet-started repairs whose alerts cleared; how many were cancelled."""
        cancelled = 0
        for repair in list(view.open_repairs):
            firing = view.firing.get(repair.node, [])
            if repair.state not in _NOT_STARTED or set(repair.alert_keys) & {a.key for a in firing}:
                continue  # started, or still firing: nothing to resolve
            check = should_auto_resolve(repair, [*firing, *self._past(repair.node)])
            if check and self._lifecycle.move(
                repair, RepairState.CANCELLED, view, RepairRule.ALERT_CLEARED, check.reason
            ):
                cancelled += 1
        return cancelled

    def recommend(self, view: PassView, repairs: dict[int, Repair]) -> int:
        """Create medic's recommendations for this pass (added to ``repairs`` and
        ``view.open_repairs``); how many were created."""
        history: dict[NodeName, list[Repair]] = defaultdict(list)
        for r in repairs.values():
            history[r.node].append(r)
        busy = {r.node for r in view.open_repairs}
        # before any recommendation: a storm trips it however few repairs the budget admits
        breaker = self._trip_if_due(self._store.get_breaker(self._cluster), repairs.values(), view)
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
        if any(not r.state.is_terminal for r in mine):
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
        firing = [a for alerts in view.firing.values() for a in alerts]
        check = breaker_should_trip(
            counted,
            view.cluster_nodes,
            view.policy,
            view.now,
            firing_alerts=firing,
            node_pools=view.pools,
            since=since,
        )
        if not check:
            return breaker
        tripped = replace(breaker, tripped=True, tripped_at=view.now, reason=check.reason)
        try:
            stored = self._store.set_breaker(tripped, expected_tripped=False)
        except ConflictError:
            return self._store.get_breaker(self._cluster)
        auto = sorted(r.id for r in counted if r.approved_by == AUTO_APPROVER)
        held = sorted(
            r.id
            for r in view.open_repairs
            if r.state is RepairState.APPROVED and r.approved_by == AUTO_APPROVER
        )
        payload = {"rule": check.rule, "reason": check.reason, "auto_repairs": auto}
        payload["held"] = held  # approved automatically, not started: they wait for the reset
        self._store.append_audit(
            repair_event(AuditKind.BREAKER_TRIPPED, view.now, self._cluster, None, payload)
        )
        return stored


def _gated(answer: Recommendation) -> bool:
    """The migration gate turned a migration into a reprovision."""
    gate = any(rule == RepairRule.MIGRATION_GATE for rule, _ in answer.trace)
    return gate and answer.request.action is not RepairAction.MIGRATE
