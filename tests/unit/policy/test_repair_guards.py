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
from medic.policy.guards import (
    breaker_should_trip,
    budget_limit,
    detector_cap_reached,
    has_evidence,
    in_cooldown,
    is_persistent,
    persistence_seconds,
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


def test_budget_one_repair_per_pool() -> None:
    policy = RepairPolicy(max_concurrent_fraction=0.10)  # 100 nodes -> 10
    busy = [_repair(1, S.CORDONED, node=NodeName("n1"))]  # pool p1
    check = within_budget(100, busy, POOLS, NodeName("n3"), policy)  # p1 too
    assert not check and "node pool p1" in check.reason
    assert within_budget(100, busy, POOLS, NodeName("n2"), policy)  # p0
    assert within_budget(100, busy, POOLS, NodeName("x9"), policy)  # no pool: no pool limit


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
