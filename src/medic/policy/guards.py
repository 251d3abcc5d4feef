"""Guardrails for node auto-repair, layered and independent: each answers one question.

Every guard returns a :class:`Check`: the answer (``bool(check)``), a stable rule id and a
readable reason for the audit trail. The predicate's name says what True means
(``in_cooldown`` True: the node is still cooling down).

- **persistence** (:func:`is_persistent`): a signal must hold for its persistence duration
  (``policy.persistence_overrides[key]``, else ``"<family>:*"``, else
  ``policy.persistence_seconds``) before it becomes a recommendation. Boundary: exactly the
  duration is persistent.
- **cooldown** (:func:`in_cooldown`): no new recommendation for a node until
  ``policy.cooldown_seconds`` after a repair on it finished (DONE, FAILED, REJECTED, or
  CANCELLED by a person: its ``error`` says who; one the engine cancelled because its alert
  cleared or its evidence was gone does not count). Boundary: exactly the cooldown is over.
- **concurrency budget** (:func:`within_budget`): at most ``max(1, floor(fraction x nodes))``
  repairs in progress in the cluster and one per node pool (partition).
- **circuit breaker** (:func:`breaker_should_trip`): automatic repairs (approved by ``auto``) on
  at least ``breaker_fraction`` of the nodes (and never fewer than 2: one repair is not a batch)
  within ``breaker_window_seconds`` point to a cluster-level cause. A tripped breaker pauses
  automatic approval only, until an operator resets it.
- **detector cap** (:func:`detector_cap_reached`): detector-initiated requests per cluster per
  hour.
- **auto-resolve** (:func:`should_auto_resolve`): a recommendation nobody acted on disappears
  (CANCELLED, reason ``alert-cleared``) once every alert it answers has resolved.
- **evidence** (:func:`has_evidence`): no repair starts without a failed check: one of its alert
  keys firing on its node.

One target node per repair is structural: :class:`~medic.domain.repairs.RepairRequest` has one
``node``.

Pure: no I/O, no clock reads (``now`` is an argument).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from medic.domain.ids import NodeName
from medic.domain.repairs import (
    Alert,
    AlertState,
    Repair,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequesterKind,
)

__all__ = [
    "AUTO_APPROVER",
    "BREAKER_MIN_REPAIRS",
    "RULE_ALERT_CLEARED",
    "RULE_BREAKER",
    "RULE_BUDGET",
    "RULE_COOLDOWN",
    "RULE_DETECTOR_CAP",
    "RULE_EVIDENCE",
    "RULE_PERSISTENCE",
    "Check",
    "breaker_should_trip",
    "budget_limit",
    "detector_cap_reached",
    "has_evidence",
    "in_cooldown",
    "is_persistent",
    "persistence_seconds",
    "should_auto_resolve",
    "within_budget",
]

RULE_PERSISTENCE = "persistence"
RULE_COOLDOWN = "cooldown"
RULE_BUDGET = "budget"
RULE_BREAKER = "breaker"
RULE_DETECTOR_CAP = "detector-cap"
RULE_ALERT_CLEARED = "alert-cleared"
RULE_EVIDENCE = "evidence"

AUTO_APPROVER = "auto"
"""``approved_by`` of a repair the policy approved (not a person)."""
BREAKER_MIN_REPAIRS = 2
"""The breaker never trips on fewer automatic repairs than this, whatever the cluster size."""

_EPS = 1e-9  # fraction x nodes in binary floating point: 0.29 x 100 = 28.999999999999996
_COOLING = frozenset({RepairState.DONE, RepairState.FAILED, RepairState.REJECTED})
_STARTED = frozenset(
    {
        RepairState.CORDONED,
        RepairState.WAITING_FOR_IDLE,
        RepairState.DRAINING,
        RepairState.EXECUTING,
        RepairState.REJOINING,
        RepairState.VALIDATING,
    }
)
_NOT_STARTED = frozenset({RepairState.PENDING_APPROVAL, RepairState.APPROVED})


@dataclass(frozen=True, slots=True)
class Check:
    """One guard's answer with its rule id and a readable reason."""

    value: bool
    rule: str
    reason: str
    retry_at: datetime | None = None
    """When the answer may change by time alone (persistence reached, cooldown over)."""

    def __bool__(self) -> bool:
        return self.value


def persistence_seconds(key: str, policy: RepairPolicy) -> float:
    """How long the signal ``key`` must hold: exact key, else ``"<family>:*"``, else default."""
    overrides = policy.persistence_overrides
    if key in overrides:
        return overrides[key]
    family = f"{key.partition(':')[0]}:*"
    return overrides.get(family, policy.persistence_seconds)


def is_persistent(alert: Alert, policy: RepairPolicy, now: datetime) -> Check:
    """True when the alert is firing and has been for at least its persistence duration, counted
    from the start of its current firing episode (an alert that cleared and came back holds
    again)."""
    need = max(0.0, persistence_seconds(alert.key, policy))
    if alert.state is not AlertState.FIRING:
        return Check(False, RULE_PERSISTENCE, f"{alert.key} is not firing")
    since = alert.firing_since or alert.first_seen
    if since is None:
        if need == 0:
            return Check(True, RULE_PERSISTENCE, f"{alert.key} firing (no persistence required)")
        return Check(False, RULE_PERSISTENCE, f"{alert.key} has no first-seen time")
    held = (now - since).total_seconds()
    ready_at = since + timedelta(seconds=need)
    if held >= need:
        return Check(True, RULE_PERSISTENCE, f"{alert.key} firing for {held:.0f}s >= {need:.0f}s")
    return Check(
        False,
        RULE_PERSISTENCE,
        f"{alert.key} firing for {held:.0f}s, needs {need:.0f}s",
        retry_at=ready_at,
    )


def _cooling(repair: Repair) -> bool:
    by_person = repair.state is RepairState.CANCELLED and repair.error is not None
    return repair.state in _COOLING or by_person


def in_cooldown(
    node: NodeName, repairs: Iterable[Repair], policy: RepairPolicy, now: datetime
) -> Check:
    """True when a repair on ``node`` finished (DONE/FAILED/REJECTED, or CANCELLED by a person,
    at ``updated_at``) less than ``policy.cooldown_seconds`` ago: a person who stopped a repair
    is not overruled by the next pass recommending it again."""
    cooldown = timedelta(seconds=max(0.0, policy.cooldown_seconds))
    finished = [r for r in repairs if r.node == node and _cooling(r)]
    recent = [r for r in finished if now - r.updated_at < cooldown]
    if not recent:
        return Check(False, RULE_COOLDOWN, f"no repair on {node} finished in the last {cooldown}")
    last = max(recent, key=lambda r: r.updated_at)
    until = last.updated_at + cooldown
    return Check(
        True,
        RULE_COOLDOWN,
        f"repair {last.id} ({last.action}, {last.state}) on {node} finished at "
        f"{last.updated_at.isoformat()}; cooling down until {until.isoformat()}",
        retry_at=until,
    )


def budget_limit(cluster_nodes: int, policy: RepairPolicy) -> int:
    """Repairs the cluster may have in progress at once: ``max(1, floor(fraction x nodes))``."""
    return max(1, math.floor(policy.max_concurrent_fraction * max(0, cluster_nodes) + _EPS))


def _occupies(repair: Repair, candidate_id: int | None) -> bool:
    """Started repairs hold budget; an approved one waiting to start holds it only when it is
    ahead of the candidate in the queue (lower id), so waiting repairs never block each other."""
    if repair.id == candidate_id:
        return False
    if repair.state in _STARTED:
        return True
    if repair.state is RepairState.APPROVED:
        return candidate_id is None or repair.id < candidate_id
    return False


def within_budget(
    cluster_nodes: int,
    active_repairs: Iterable[Repair],
    node_pools: Mapping[NodeName, str],
    candidate_node: NodeName,
    policy: RepairPolicy,
    *,
    candidate_id: int | None = None,
) -> Check:
    """True when one more repair (on ``candidate_node``) fits the concurrency budget.

    ``active_repairs``: the cluster's unfinished repairs (others are ignored). ``candidate_id``:
    the candidate's own id once it exists (when it is about to start); None for a repair not
    created yet, which queues behind every approved one. A node missing from ``node_pools`` has no
    pool limit.
    """
    limit = budget_limit(cluster_nodes, policy)
    holding = [r for r in active_repairs if _occupies(r, candidate_id)]
    if len(holding) >= limit:
        return Check(
            False,
            RULE_BUDGET,
            f"{len(holding)} repair(s) in progress, budget {limit} "
            f"(max(1, floor({policy.max_concurrent_fraction} x {cluster_nodes} nodes)))",
        )
    pool = node_pools.get(candidate_node)
    if pool is not None:
        same = [r for r in holding if node_pools.get(r.node) == pool]
        if same:
            return Check(
                False,
                RULE_BUDGET,
                f"node pool {pool} already has repair {same[0].id} on {same[0].node} in "
                "progress (one per pool at a time)",
            )
    return Check(True, RULE_BUDGET, f"{len(holding)} of {limit} repair(s) in progress")


def breaker_should_trip(
    recent_auto_repairs: Iterable[Repair],
    cluster_nodes: int,
    policy: RepairPolicy,
    now: datetime,
) -> Check:
    """True when automatic repairs (``approved_by == "auto"``, at ``approved_at`` else
    ``created_at``, within the window inclusive) reached ``breaker_fraction`` of the nodes:
    distinct nodes >= ``max(2, ceil(fraction x nodes))``."""
    window = timedelta(seconds=max(0.0, policy.breaker_window_seconds))
    nodes = {
        r.node
        for r in recent_auto_repairs
        if r.approved_by == AUTO_APPROVER
        and timedelta(0) <= now - (r.approved_at or r.created_at) <= window
    }
    need = max(
        BREAKER_MIN_REPAIRS, math.ceil(policy.breaker_fraction * max(0, cluster_nodes) - _EPS)
    )
    detail = (
        f"{len(nodes)} node(s) repaired automatically in the last {window}, threshold {need} "
        f"({policy.breaker_fraction:.0%} of {cluster_nodes} nodes)"
    )
    if len(nodes) >= need:
        return Check(True, RULE_BREAKER, f"trip: {detail}: a cluster-level cause is likely")
    return Check(False, RULE_BREAKER, detail)


def detector_cap_reached(
    recent_detector_repairs: Iterable[Repair], policy: RepairPolicy, now: datetime
) -> Check:
    """True when the cluster's detectors created ``detector_cap_per_hour`` repairs (or more) in
    the last hour (created within 3600 s, inclusive)."""
    hour = timedelta(hours=1)
    count = sum(
        1
        for r in recent_detector_repairs
        if r.requester_kind is RequesterKind.DETECTOR and timedelta(0) <= now - r.created_at <= hour
    )
    cap = policy.detector_cap_per_hour
    if count >= cap:
        return Check(
            True,
            RULE_DETECTOR_CAP,
            f"{count} detector request(s) in the last hour, cap {cap} per cluster",
        )
    return Check(False, RULE_DETECTOR_CAP, f"{count} of {cap} detector request(s) this hour")


def should_auto_resolve(repair: Repair, alerts: Sequence[Alert]) -> Check:
    """True when nobody acted on the repair yet (PENDING_APPROVAL, or APPROVED and not started),
    it answers alerts (medic or detector, not a person's request), and every one of them is known
    and resolved: cancel it with reason ``alert-cleared``."""
    if repair.state not in _NOT_STARTED:
        return Check(False, RULE_ALERT_CLEARED, f"repair {repair.id} is {repair.state}")
    if repair.requester_kind is RequesterKind.USER:
        return Check(False, RULE_ALERT_CLEARED, "a person asked for it: only they cancel it")
    if not repair.alert_keys:
        return Check(False, RULE_ALERT_CLEARED, "the repair names no alert")
    on_node = {a.key: a for a in alerts if a.node == repair.node and a.cluster == repair.cluster}
    missing = [k for k in repair.alert_keys if k not in on_node]
    firing = [
        k for k in repair.alert_keys if k in on_node and on_node[k].state is AlertState.FIRING
    ]
    if missing or firing:
        return Check(
            False,
            RULE_ALERT_CLEARED,
            f"still firing: {', '.join(firing) or '-'}; unknown: {', '.join(missing) or '-'}",
        )
    return Check(True, RULE_ALERT_CLEARED, f"every alert resolved ({', '.join(repair.alert_keys)})")


def has_evidence(request: RepairRequest, firing_alerts: Iterable[Alert]) -> Check:
    """True when at least one of ``request.alert_keys`` is firing on the request's node."""
    firing = {
        a.key
        for a in firing_alerts
        if a.state is AlertState.FIRING and a.node == request.node and a.cluster == request.cluster
    }
    found = [k for k in request.alert_keys if k in firing]
    if found:
        return Check(True, RULE_EVIDENCE, f"firing on {request.node}: {', '.join(found)}")
    if not request.alert_keys:
        return Check(False, RULE_EVIDENCE, "no alert named as evidence (a failed check)")
    return Check(
        False,
        RULE_EVIDENCE,
        f"none of {', '.join(request.alert_keys)} is firing on {request.node}",
    )
