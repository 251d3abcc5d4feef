"""Guardrails, one table per guard, with their boundaries."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    AlertState,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequesterKind,
)
from medic.repair.rules.guards import (
    Slot,
    breaker_should_trip,
    budget_limit,
    detector_cap_reached,
    has_evidence,
    in_cooldown,
    is_persistent,
    persistence_seconds,
    pool_limit,
    should_auto_resolve,
    within_budget,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTER = ClusterName("c1")
N1 = NodeName("n1")
S = RepairState


def _alert(
    key: str = "xid:79",
    *,
    node: NodeName = N1,
    state: AlertState = AlertState.FIRING,
    first_seen: datetime | None = T0,
) -> Alert:
    return Alert(
        cluster=CLUSTER,
        node=node,
        key=key,
        source=AlertSource.SIGNATURE,
        summary=key,
        description=key,
        severity=Severity.CRITICAL,
        state=state,
        first_seen=first_seen,
    )


def _repair(
    id: int,
    state: RepairState,
    *,
    node: NodeName = N1,
    updated: datetime = T0,
    created: datetime | None = None,
    approved_by: str | None = None,
    approved_at: datetime | None = None,
    kind: RequesterKind = RequesterKind.MEDIC,
    keys: tuple[str, ...] = ("xid:79",),
) -> Repair:
    return Repair(
        id=id,
        cluster=CLUSTER,
        node=node,
        action=RepairAction.REBOOT,
        state=state,
        requested_by="medic",
        requester_kind=kind,
        reason="test",
        alert_keys=keys,
        created_at=created or updated,
        updated_at=updated,
        approved_by=approved_by,
        approved_at=approved_at,
    )


# --- persistence ------------------------------------------------------------------------------

POLICY = RepairPolicy(
    persistence_seconds=300.0,
    persistence_overrides={"xid:79": 0.0, "agent:*": 60.0, "agent:thermal": 900.0},
)


@pytest.mark.parametrize(
    ("key", "held", "expected"),
    [
        ("xid:48", 299, False),
        ("xid:48", 300, True),  # exactly the duration: persistent
        ("xid:48", 301, True),
        ("xid:79", 0, True),  # per-key override
        ("agent:ecc_dbe", 59, False),  # family override
        ("agent:ecc_dbe", 60, True),
        ("agent:thermal", 899, False),  # the exact key beats the family
        ("agent:thermal", 900, True),
    ],
)
def test_persistence(key: str, held: int, expected: bool) -> None:
    check = is_persistent(_alert(key), POLICY, T0 + timedelta(seconds=held))
    assert bool(check) is expected
    assert check.rule == "persistence" and check.reason
    if not expected:
        assert check.retry_at == T0 + timedelta(seconds=persistence_seconds(key, POLICY))


def test_persistence_needs_a_firing_alert_with_a_start() -> None:
    resolved = _alert("xid:48", state=AlertState.RESOLVED)
    assert not is_persistent(resolved, POLICY, T0 + timedelta(days=1))
    assert not is_persistent(_alert("xid:48", first_seen=None), POLICY, T0)
    assert is_persistent(_alert("xid:79", first_seen=None), POLICY, T0)  # nothing to wait for


def test_persistence_counts_from_the_current_firing_episode() -> None:
    # first seen a day ago, cleared, and firing again for 10 s: it has to hold again
    back = replace(_alert("xid:48"), firing_since=T0 + timedelta(days=1))
    later = T0 + timedelta(days=1, seconds=10)
    check = is_persistent(back, POLICY, later)
    assert not check and check.retry_at == T0 + timedelta(days=1, seconds=300)
    assert is_persistent(back, POLICY, T0 + timedelta(days=1, seconds=300))


# --- cooldown ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "ago", "expected"),
    [
        (S.DONE, 0, True),
        (S.DONE, 1799, True),
        (S.DONE, 1800, False),  # exactly the cooldown: over
        (S.DONE, 1801, False),
        (S.FAILED, 60, True),
        (S.REJECTED, 60, True),  # a person said no: do not ask again at once
        (S.CANCELLED, 60, False),  # withdrawn before it touched the node
        (S.PENDING_APPROVAL, 60, False),
        (S.EXECUTING, 60, False),
    ],
)
def test_cooldown(state: RepairState, ago: int, expected: bool) -> None:
    now = T0 + timedelta(seconds=ago)
    check = in_cooldown(N1, [_repair(1, state)], RepairPolicy(), now)
    assert bool(check) is expected
    if expected:
        assert check.retry_at == T0 + timedelta(seconds=1800)


def test_cooldown_is_per_node_and_uses_the_latest_finish() -> None:
    repairs = [
        _repair(1, S.DONE, node=NodeName("n2")),
        _repair(2, S.DONE, updated=T0 - timedelta(hours=1)),
        _repair(3, S.DONE, updated=T0 - timedelta(minutes=10)),
    ]
    check = in_cooldown(N1, repairs, RepairPolicy(), T0)
    assert check and "repair 3" in check.reason
    assert check.retry_at == T0 + timedelta(minutes=20)
    assert not in_cooldown(NodeName("n3"), repairs, RepairPolicy(), T0)


# --- concurrency budget -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "fraction", "limit"),
    [
        (0, 0.05, 1),
        (10, 0.05, 1),
        (39, 0.05, 1),
        (40, 0.05, 2),
        (100, 0.05, 5),
        (100, 0.29, 29),  # 0.29 x 100 is 28.999999999999996 in floating point
        (1000, 0.10, 100),
    ],
)
def test_budget_limit(nodes: int, fraction: float, limit: int) -> None:
    assert budget_limit(nodes, RepairPolicy(max_concurrent_fraction=fraction)) == limit


POOLS = {NodeName(f"n{i}"): f"p{i % 2}" for i in range(1, 101)}


def test_budget_counts_started_repairs_only() -> None:
    policy = RepairPolicy(max_concurrent_fraction=0.02)  # 100 nodes -> 2
    pending = [_repair(i, S.PENDING_APPROVAL, node=NodeName(f"n{i}")) for i in range(10, 20)]
    one = [_repair(1, S.EXECUTING, node=NodeName("n1"))]
    assert within_budget(100, pending + one, {}, NodeName("n3"), policy)
    two = [*one, _repair(2, S.DRAINING, node=NodeName("n2"))]
    check = within_budget(100, two, {}, NodeName("n3"), policy)
    assert not check and check.rule == "budget" and "budget 2" in check.reason


def test_budget_a_pool_has_its_share_of_the_cluster() -> None:
    policy = RepairPolicy(max_concurrent_fraction=0.04)  # 100 nodes -> 4, 50 per pool -> 2
    busy = [_repair(i, S.CORDONED, node=NodeName(f"n{i}")) for i in (1, 3)]  # pool p1
    check = within_budget(100, busy, POOLS, NodeName("n5"), policy)  # p1 too
    assert not check and "node pool p1 already has repair(s) 1 on n1, 3 on n3" in check.reason
    assert "its budget 2 (max(1, ceil(0.04 x 50 nodes)))" in check.reason
    assert within_budget(100, busy, POOLS, NodeName("n2"), policy)  # p0
    assert within_budget(100, busy, POOLS, NodeName("x9"), policy)  # no pool: no pool limit
    assert within_budget(100, busy[:1], POOLS, NodeName("n5"), policy)


@pytest.mark.parametrize(
    ("nodes", "fraction", "limit"),
    [(32, 0.05, 2), (6, 0.05, 1), (0, 0.05, 1), (50, 0.10, 5), (20, 0.05, 1), (21, 0.05, 2)],
)
def test_pool_limit(nodes: int, fraction: float, limit: int) -> None:
    assert pool_limit(nodes, RepairPolicy(max_concurrent_fraction=fraction)) == limit


TWO_POOLS = {NodeName(f"n{i}"): f"p{i % 2}" for i in range(1, 65)}
"""64 nodes in 2 pools of 32: with the default 5 %, 3 at work at once, 2 per pool."""


def test_two_pools_share_the_default_budget_not_one_repair_each() -> None:
    policy = RepairPolicy()
    assert (budget_limit(64, policy), pool_limit(32, policy)) == (3, 2)
    one = [_repair(1, S.EXECUTING, node=NodeName("n1"))]  # p1
    assert within_budget(64, one, TWO_POOLS, NodeName("n3"), policy), "a second one in p1"
    two = [*one, _repair(3, S.DRAINING, node=NodeName("n3"))]
    assert not within_budget(64, two, TWO_POOLS, NodeName("n5"), policy)
    assert within_budget(64, two, TWO_POOLS, NodeName("n2"), policy), "the third, in p0"
    three = [*two, _repair(2, S.REJOINING, node=NodeName("n2"))]
    check = within_budget(64, three, TWO_POOLS, NodeName("n4"), policy)
    assert not check and "3 repair(s) in progress, budget 3" in check.reason


def test_a_repair_waiting_for_a_busy_node_holds_no_working_slot() -> None:
    policy = RepairPolicy()  # 64 nodes -> 3
    waiting = [_repair(i, S.WAITING_FOR_IDLE, node=NodeName(f"n{i}")) for i in (1, 2, 3)]
    busy = {NodeName("n1"), NodeName("n2"), NodeName("n3"), NodeName("n8")}
    idle = within_budget(64, waiting, TWO_POOLS, NodeName("n4"), policy, candidate_id=9, busy=busy)
    assert idle and "0 of 3 repair(s) in progress" in idle.reason
    # ... but the waiting are bounded too: a fourth busy node waits for one of them
    more = within_budget(64, waiting, {}, NodeName("n8"), policy, candidate_id=9, busy=busy)
    assert not more and "3 repair(s) waiting for busy nodes, budget 3" in more.reason
    # a waiting repair whose node is idle drains next: it is at work
    free = busy - {NodeName("n1")}
    check = within_budget(64, waiting, {}, NodeName("n4"), policy, candidate_id=9, busy=free)
    assert check and "1 of 3 repair(s) in progress" in check.reason
    # not knowing which nodes are busy: waiting ones wait, the candidate asks for a working slot
    assert within_budget(64, waiting, {}, NodeName("n4"), policy)


def test_waiting_repairs_take_working_slots_in_order_and_never_block_each_other() -> None:
    policy = RepairPolicy(max_concurrent_fraction=0.01)  # 100 nodes -> 1
    a = _repair(1, S.WAITING_FOR_IDLE, node=NodeName("n1"))
    b = _repair(2, S.WAITING_FOR_IDLE, node=NodeName("n2"))

    def drains(active: list[Repair], candidate: Repair) -> bool:  # both nodes free now
        check = within_budget(
            100,
            active,
            {},
            candidate.node,
            policy,
            candidate_id=candidate.id,
            slot=Slot.WORK,
            busy=frozenset(),
        )
        return bool(check)

    assert drains([a, b], a) and not drains([a, b], b), "the first one first"
    assert not drains([replace(a, state=S.DRAINING), b], b)
    assert drains([b], b)


def test_budget_queue_never_deadlocks() -> None:
    policy = RepairPolicy(max_concurrent_fraction=0.01)  # 100 nodes -> 1
    a = _repair(1, S.APPROVED, node=NodeName("n1"))
    b = _repair(2, S.APPROVED, node=NodeName("n2"))
    assert within_budget(100, [a, b], {}, a.node, policy, candidate_id=a.id)
    assert not within_budget(100, [a, b], {}, b.node, policy, candidate_id=b.id)
    # a repair not created yet queues behind every approved one
    assert not within_budget(100, [a], {}, NodeName("n3"), policy)


# --- circuit breaker --------------------------------------------------------------------------


def _autos(count: int, *, ago: int = 0, approved_by: str = "auto") -> list[Repair]:
    when = T0 - timedelta(seconds=ago)
    return [
        _repair(i, S.EXECUTING, node=NodeName(f"n{i}"), approved_by=approved_by, approved_at=when)
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("count", "nodes", "expected"),
    [
        (9, 100, False),
        (10, 100, True),  # exactly 10 %
        (3, 30, True),  # 0.1 x 30 is 3.0000000000000004 in floating point
        (2, 30, False),
        (1, 10, False),  # one repair is not a batch
        (2, 10, True),
        (1, 1, False),
    ],
)
def test_breaker_threshold(count: int, nodes: int, expected: bool) -> None:
    check = breaker_should_trip(_autos(count), nodes, RepairPolicy(), T0)
    assert bool(check) is expected
    assert check.rule == "breaker" and check.reason


def test_breaker_window_and_what_counts() -> None:
    policy = RepairPolicy()  # 10 % in 600 s
    assert breaker_should_trip(_autos(10, ago=600), 100, policy, T0)  # window edge included
    assert not breaker_should_trip(_autos(10, ago=601), 100, policy, T0)
    assert not breaker_should_trip(_autos(10, approved_by="alice"), 100, policy, T0)
    same_node = [dataclasses.replace(r, node=N1) for r in _autos(10)]
    assert not breaker_should_trip(same_node, 100, policy, T0)  # distinct nodes


def _alerting(nodes: range, *, ago: float = 0, key: str = "xid:79") -> list[Alert]:
    since = T0 - timedelta(seconds=ago)
    return [
        replace(_alert(key, node=NodeName(f"n{i}"), first_seen=since), firing_since=since)
        for i in nodes
    ]


def test_a_storm_trips_the_breaker_on_the_nodes_alerting_whatever_the_budget_started() -> None:
    policy = RepairPolicy()  # 10 % in 600 s: 7 of 64 nodes
    storm = _alerting(range(48))  # 75 % of the cluster, on both pools
    two = _autos(2)  # all the budget let start (on n0 and n1, alerting too)
    check = breaker_should_trip(two, 64, policy, T0, firing_alerts=storm, node_pools=TWO_POOLS)
    assert check and check.rule == "breaker"
    assert check.reason.startswith("trip: 48 node(s) failing in the last 0:10:00 (48 alerting")
    assert "threshold 7 (10% of 64 nodes)" in check.reason
    assert not breaker_should_trip(two, 64, policy, T0, node_pools=TWO_POOLS), "repairs alone"


def test_what_alerting_counts_for_the_breaker() -> None:
    policy = RepairPolicy()  # 7 of 64 nodes

    def check(alerts: list[Alert], since: datetime | None = None) -> bool:
        found = breaker_should_trip(
            [], 64, policy, T0, firing_alerts=alerts, node_pools=TWO_POOLS, since=since
        )
        return bool(found)

    assert check(_alerting(range(1, 8), ago=600)), "window edge included"
    assert not check(_alerting(range(1, 8), ago=601)), "an old episode is no storm"
    assert not check(_alerting(range(1, 8), key="sig:unmapped.thing")), "nothing to repair"
    resolved = [replace(a, state=AlertState.RESOLVED) for a in _alerting(range(1, 8))]
    assert not check(resolved)
    assert not check(_alerting(range(1, 8), ago=60), since=T0 - timedelta(seconds=30)), "reset"
    assert check(_alerting(range(1, 8), ago=20), since=T0 - timedelta(seconds=30))
    # repairs approved automatically and alerting nodes are one set of failing nodes
    both = breaker_should_trip(_autos(4), 64, policy, T0, firing_alerts=_alerting(range(2, 6)))
    assert (
        not both
        and both.reason.startswith("6 node(s) failing")
        and "2 more repaired" in both.reason
    )


def test_the_breaker_trips_on_one_pools_share() -> None:
    policy = RepairPolicy()  # 7 of 64 nodes, 4 of a pool's 32
    p1 = _alerting(range(1, 9, 2))  # n1, n3, n5, n7: 4 in p1
    check = breaker_should_trip([], 64, policy, T0, firing_alerts=p1, node_pools=TWO_POOLS)
    assert check and "threshold 4 (10% of node pool p1's 32 nodes)" in check.reason
    spread = _alerting(range(1, 7))  # 3 in each pool
    assert not breaker_should_trip([], 64, policy, T0, firing_alerts=spread, node_pools=TWO_POOLS)
    assert not breaker_should_trip([], 64, policy, T0, firing_alerts=p1), "no pools known"


# --- detector cap -----------------------------------------------------------------------------


def _detector_requests(count: int, ago: int = 0) -> list[Repair]:
    when = T0 - timedelta(seconds=ago)
    return [
        _repair(i, S.APPROVED, created=when, updated=when, kind=RequesterKind.DETECTOR)
        for i in range(count)
    ]


def test_detector_cap() -> None:
    policy = RepairPolicy(detector_cap_per_hour=50)
    assert not detector_cap_reached(_detector_requests(49), policy, T0)
    assert detector_cap_reached(_detector_requests(50), policy, T0)
    assert detector_cap_reached(_detector_requests(50, ago=3600), policy, T0)
    assert not detector_cap_reached(_detector_requests(50, ago=3601), policy, T0)
    medic_ones = [
        dataclasses.replace(r, requester_kind=RequesterKind.MEDIC) for r in _detector_requests(60)
    ]
    assert not detector_cap_reached(medic_ones, policy, T0)


# --- auto-resolve -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (S.PENDING_APPROVAL, True),
        (S.APPROVED, True),
        (S.CORDONED, False),  # started: someone acted
        (S.EXECUTING, False),
        (S.DONE, False),
    ],
)
def test_auto_resolve_by_state(state: RepairState, expected: bool) -> None:
    resolved = [_alert("xid:79", state=AlertState.RESOLVED)]
    check = should_auto_resolve(_repair(1, state), resolved)
    assert bool(check) is expected
    assert check.rule == "alert-cleared"


def test_auto_resolve_needs_every_alert_resolved_and_known() -> None:
    repair = _repair(1, S.PENDING_APPROVAL, keys=("xid:79", "xid:48"))
    one_left = [_alert("xid:79", state=AlertState.RESOLVED), _alert("xid:48")]
    assert not should_auto_resolve(repair, one_left)
    both = [
        _alert("xid:79", state=AlertState.RESOLVED),
        _alert("xid:48", state=AlertState.RESOLVED),
    ]
    assert should_auto_resolve(repair, both)
    assert not should_auto_resolve(repair, both[:1])  # xid:48 unknown: cannot say it cleared
    elsewhere = [
        _alert(k, node=NodeName("n2"), state=AlertState.RESOLVED) for k in ("xid:79", "xid:48")
    ]
    assert not should_auto_resolve(repair, elsewhere)


def test_auto_resolve_leaves_a_persons_request_and_alertless_repairs() -> None:
    resolved = [_alert("xid:79", state=AlertState.RESOLVED)]
    user = _repair(1, S.APPROVED, kind=RequesterKind.USER)
    assert not should_auto_resolve(user, resolved)
    detector = _repair(2, S.APPROVED, kind=RequesterKind.DETECTOR)
    assert should_auto_resolve(detector, resolved)
    assert not should_auto_resolve(_repair(3, S.PENDING_APPROVAL, keys=()), resolved)


# --- evidence gate and one target -------------------------------------------------------------


def _request(keys: tuple[str, ...], node: NodeName = N1) -> RepairRequest:
    return RepairRequest(
        CLUSTER, node, RepairAction.REBOOT, "dcgm-scan", RequesterKind.DETECTOR, "x", keys
    )


@pytest.mark.parametrize(
    ("keys", "alerts", "expected"),
    [
        (("xid:79",), [_alert("xid:79")], True),
        (("xid:79", "xid:48"), [_alert("xid:48")], True),
        (("xid:79",), [_alert("xid:79", state=AlertState.RESOLVED)], False),
        (("xid:79",), [_alert("xid:79", node=NodeName("n2"))], False),
        (("xid:79",), [], False),
        ((), [_alert("xid:79")], False),
    ],
)
def test_evidence_gate(keys: tuple[str, ...], alerts: list[Alert], expected: bool) -> None:
    check = has_evidence(_request(keys), alerts)
    assert bool(check) is expected
    assert check.rule == "evidence" and check.reason


def test_a_repair_request_has_exactly_one_target_node() -> None:
    names = [f.name for f in dataclasses.fields(RepairRequest)]
    assert [n for n in names if "node" in n] == ["node"]
    assert RepairRequest.__annotations__["node"] == "NodeName"
