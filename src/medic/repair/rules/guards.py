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
- **concurrency budget** (:func:`within_budget`): at most :func:`budget_limit` repairs at work
  in the cluster, ``max(1, floor(fraction x nodes))``, and in each node pool its share,
  :func:`pool_limit` (rounded up: the pools together can always use the whole budget, whatever
  the partition layout). A repair waiting for a busy node holds no working slot: those are
  bounded apart, by the same numbers, so busy nodes never keep idle ones from being repaired.
- **circuit breaker** (:func:`breaker_should_trip`): nodes failing at once (an alert medic would
  repair began firing, or a repair was approved automatically, within ``breaker_window_seconds``)
  on ``breaker_fraction`` of the cluster or of one pool (2 at least) point to a cluster-level
  cause, however few repairs the budget let start. A tripped breaker pauses automatic approval,
  and holds approved automatic repairs that did not start, until an operator resets it.
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

import enum
import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from medic.domain.ids import NodeName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import (
    Alert,
    AlertState,
    Repair,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequesterKind,
)
from medic.repair.rules.lightest import effective_action

__all__ = [
    "AUTO_APPROVER",
    "BREAKER_MIN_REPAIRS",
    "Check",
    "Slot",
    "breaker_should_trip",
    "budget_limit",
    "detector_cap_reached",
    "has_evidence",
    "in_cooldown",
    "is_persistent",
    "persistence_seconds",
    "pool_limit",
    "should_auto_resolve",
    "within_budget",
]


AUTO_APPROVER = "auto"
"""``approved_by`` of a repair the policy approved (not a person)."""
BREAKER_MIN_REPAIRS = 2
"""The breaker never trips on fewer automatic repairs than this, whatever the cluster size."""

_EPS = 1e-9  # fraction x nodes in binary floating point: 0.29 x 100 = 28.999999999999996
_COOLING = frozenset({RepairState.DONE, RepairState.FAILED, RepairState.REJECTED})
_WORKING = frozenset(
    {
        RepairState.CORDONED,
        RepairState.DRAINING,
        RepairState.EXECUTING,
        RepairState.REJOINING,
        RepairState.VALIDATING,
    }
)
"""Repairs at work on their node (a cordoned one drains it in the same pass)."""
_NOT_STARTED = frozenset({RepairState.PENDING_APPROVAL, RepairState.APPROVED})


class Slot(enum.StrEnum):
    """What a repair asks of the concurrency budget."""

    START = "start"
    """Approved -> cordoned: a working slot, or a waiting slot when its node is busy."""
    WORK = "work"
    """Waiting for idle -> draining (its node is free): a working slot."""


@dataclass(frozen=True, slots=True)
class Check:
    """One guard's answer with its rule id and a readable reason."""

    value: bool
    rule: RepairRule
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
        return Check(False, RepairRule.PERSISTENCE, f"{alert.key} is not firing")
    since = alert.firing_since or alert.first_seen
    if since is None:
        if need == 0:
            return Check(
                True, RepairRule.PERSISTENCE, f"{alert.key} firing (no persistence required)"
            )
        return Check(False, RepairRule.PERSISTENCE, f"{alert.key} has no first-seen time")
    held = (now - since).total_seconds()
    ready_at = since + timedelta(seconds=need)
    if held >= need:
        return Check(
            True, RepairRule.PERSISTENCE, f"{alert.key} firing for {held:.0f}s >= {need:.0f}s"
        )
    return Check(
        False,
        RepairRule.PERSISTENCE,
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
        return Check(
            False, RepairRule.COOLDOWN, f"no repair on {node} finished in the last {cooldown}"
        )
    last = max(recent, key=lambda r: r.updated_at)
    until = last.updated_at + cooldown
    return Check(
        True,
        RepairRule.COOLDOWN,
        f"repair {last.id} ({last.action}, {last.state}) on {node} finished at "
        f"{last.updated_at.isoformat()}; cooling down until {until.isoformat()}",
        retry_at=until,
    )


def budget_limit(cluster_nodes: int, policy: RepairPolicy) -> int:
    """Repairs the cluster may have at work at once: ``max(1, floor(fraction x nodes))``."""
    return max(1, math.floor(policy.max_concurrent_fraction * max(0, cluster_nodes) + _EPS))


def pool_limit(pool_nodes: int, policy: RepairPolicy) -> int:
    """Repairs one node pool may have at work at once: ``max(1, ceil(fraction x pool nodes))``;
    rounded up, so that the pools' limits add up to at least the cluster's."""
    return max(1, math.ceil(policy.max_concurrent_fraction * max(0, pool_nodes) - _EPS))


def _holds(
    repair: Repair, candidate_id: int | None, slot: Slot, busy: Collection[NodeName] | None
) -> Slot | None:
    """The budget ``repair`` holds as the candidate sees it: a working slot (``WORK``), a
    waiting slot (``START``: it waits for a busy node), or none.

    A repair waiting for an idle node is at work (it drains next), unless the candidate is also
    waiting to drain and comes first (lower id): waiting repairs never block each other. An
    approved one not started yet is counted where it will go (busy node: waiting) when it is
    ahead of a candidate that starts (lower id, or any for a repair not created yet)."""
    ahead = candidate_id is None or repair.id < candidate_id
    if repair.id == candidate_id:
        return None
    if repair.state in _WORKING:
        return Slot.WORK
    waits = busy is None or repair.node in busy
    if repair.state is RepairState.WAITING_FOR_IDLE:
        if waits:
            return Slot.START
        return Slot.WORK if slot is Slot.START or ahead else None
    if repair.state is RepairState.APPROVED and slot is Slot.START and ahead:
        return Slot.START if busy is not None and repair.node in busy else Slot.WORK
    return None


def within_budget(
    cluster_nodes: int,
    active_repairs: Iterable[Repair],
    node_pools: Mapping[NodeName, str],
    candidate_node: NodeName,
    policy: RepairPolicy,
    *,
    candidate_id: int | None = None,
    slot: Slot = Slot.START,
    busy: Collection[NodeName] | None = None,
) -> Check:
    """True when the candidate on ``candidate_node`` fits the concurrency budget now.

    ``active_repairs``: the cluster's unfinished repairs (others are ignored). ``candidate_id``:
    the candidate's own id once it exists; None for a repair not created yet, which queues behind
    every approved one. ``node_pools``: every node's pool (a node missing there has no pool
    limit; a pool's size is its nodes there). ``slot``: what the candidate asks for. ``busy``:
    the nodes that run jobs; None when not known: a waiting repair then counts as waiting for a
    busy node, and a candidate that starts asks for a working slot.
    """
    wanted = Slot.WORK
    if slot is Slot.START and busy is not None and candidate_node in busy:
        wanted = Slot.START  # it will wait for its jobs: a waiting slot
    holding = [r for r in active_repairs if _holds(r, candidate_id, slot, busy) is wanted]
    limit = budget_limit(cluster_nodes, policy)
    what = "in progress" if wanted is Slot.WORK else "waiting for busy nodes"
    if len(holding) >= limit:
        return Check(
            False,
            RepairRule.BUDGET,
            f"{len(holding)} repair(s) {what}, budget {limit} "
            f"(max(1, floor({policy.max_concurrent_fraction} x {cluster_nodes} nodes)))",
        )
    pool = node_pools.get(candidate_node)
    if pool is not None:
        size = Counter(node_pools.values())[pool]
        cap = pool_limit(size, policy)
        same = [r for r in holding if node_pools.get(r.node) == pool]
        if len(same) >= cap:
            ids = ", ".join(f"{r.id} on {r.node}" for r in same)
            return Check(
                False,
                RepairRule.BUDGET,
                f"node pool {pool} already has repair(s) {ids} {what}, its budget {cap} "
                f"(max(1, ceil({policy.max_concurrent_fraction} x {size} nodes)))",
            )
    return Check(True, RepairRule.BUDGET, f"{len(holding)} of {limit} repair(s) {what}")


def _breaker_need(nodes: int, policy: RepairPolicy) -> int:
    return max(BREAKER_MIN_REPAIRS, math.ceil(policy.breaker_fraction * max(0, nodes) - _EPS))


def breaker_should_trip(
    recent_auto_repairs: Iterable[Repair],
    cluster_nodes: int,
    policy: RepairPolicy,
    now: datetime,
    *,
    firing_alerts: Iterable[Alert] = (),
    node_pools: Mapping[NodeName, str] | None = None,
    since: datetime | None = None,
) -> Check:
    """True when the nodes hit within the window (inclusive) reach ``breaker_fraction`` of the
    cluster, or of one pool: distinct nodes >= ``max(2, ceil(fraction x nodes))``.

    A node is hit by an automatic repair (``approved_by == "auto"``, at ``approved_at`` else
    ``created_at``) or by a firing alert that an action maps to, from the start of its firing
    episode (``firing_since``, else ``first_seen``; none: now). ``since`` (the breaker's last
    reset): only what came after it counts. ``node_pools``: every node's pool (None: no pools).
    """
    window = timedelta(seconds=max(0.0, policy.breaker_window_seconds))

    def recent(when: datetime | None) -> bool:
        when = when or now
        return timedelta(0) <= now - when <= window and (since is None or when > since)

    hit = {
        r.node
        for r in recent_auto_repairs
        if r.approved_by == AUTO_APPROVER and recent(r.approved_at or r.created_at)
    }
    alerting = {
        a.node
        for a in firing_alerts
        if a.state is AlertState.FIRING
        and effective_action(a) is not None
        and recent(a.firing_since or a.first_seen)
    }
    hit |= alerting
    need = _breaker_need(cluster_nodes, policy)
    scope = f"{policy.breaker_fraction:.0%} of {cluster_nodes} nodes"
    count = len(hit)
    pools = node_pools or {}
    sizes = Counter(pools.values())
    for pool, pool_hit in sorted(Counter(pools[n] for n in hit if n in pools).items()):
        pool_need = _breaker_need(sizes[pool], policy)
        if count < need and pool_hit >= pool_need:
            need, count = pool_need, pool_hit
            scope = f"{policy.breaker_fraction:.0%} of node pool {pool}'s {sizes[pool]} nodes"
    detail = (
        f"{count} node(s) failing in the last {window} ({len(alerting)} alerting, "
        f"{len(hit - alerting)} more repaired automatically), threshold {need} ({scope})"
    )
    if count >= need:
        return Check(True, RepairRule.BREAKER, f"trip: {detail}: a cluster-level cause is likely")
    return Check(False, RepairRule.BREAKER, detail)


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
            RepairRule.DETECTOR_CAP,
            f"{count} detector request(s) in the last hour, cap {cap} per cluster",
        )
    return Check(False, RepairRule.DETECTOR_CAP, f"{count} of {cap} detector request(s) this hour")


def should_auto_resolve(repair: Repair, alerts: Sequence[Alert]) -> Check:
    """True when nobody acted on the repair yet (PENDING_APPROVAL, or APPROVED and not started),
    it answers alerts (medic or detector, not a person's request), and every one of them is known
    and resolved: cancel it with reason ``alert-cleared``."""
    if repair.state not in _NOT_STARTED:
        return Check(False, RepairRule.ALERT_CLEARED, f"repair {repair.id} is {repair.state}")
    if repair.requester_kind is RequesterKind.USER:
        return Check(False, RepairRule.ALERT_CLEARED, "a person asked for it: only they cancel it")
    if not repair.alert_keys:
        return Check(False, RepairRule.ALERT_CLEARED, "the repair names no alert")
    on_node = {a.key: a for a in alerts if a.node == repair.node and a.cluster == repair.cluster}
    missing = [k for k in repair.alert_keys if k not in on_node]
    firing = [
        k for k in repair.alert_keys if k in on_node and on_node[k].state is AlertState.FIRING
    ]
    if missing or firing:
        return Check(
            False,
            RepairRule.ALERT_CLEARED,
            f"still firing: {', '.join(firing) or '-'}; unknown: {', '.join(missing) or '-'}",
        )
    return Check(
        True, RepairRule.ALERT_CLEARED, f"every alert resolved ({', '.join(repair.alert_keys)})"
    )


def has_evidence(request: RepairRequest, firing_alerts: Iterable[Alert]) -> Check:
    """True when at least one of ``request.alert_keys`` is firing on the request's node."""
    firing = {
        a.key
        for a in firing_alerts
        if a.state is AlertState.FIRING and a.node == request.node and a.cluster == request.cluster
    }
    found = [k for k in request.alert_keys if k in firing]
    if found:
        return Check(True, RepairRule.EVIDENCE, f"firing on {request.node}: {', '.join(found)}")
    if not request.alert_keys:
        return Check(False, RepairRule.EVIDENCE, "no alert named as evidence (a failed check)")
    return Check(
        False,
        RepairRule.EVIDENCE,
        f"none of {', '.join(request.alert_keys)} is firing on {request.node}",
    )
