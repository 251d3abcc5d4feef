"""Escalation ladder (7-day window, what counts) and the migration evidence gate (10 days)."""

from __future__ import annotations

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
    RepairState,
    RequesterKind,
)
from medic.repair.rules.ladder import LADDER, Escalation, escalate, gate_migration, heavier, weight

T0 = datetime(2026, 1, 8, tzinfo=UTC)
CLUSTER = ClusterName("c1")
N1 = NodeName("n1")
R, B, PC, P, M = (
    RepairAction.RESET_GPU,
    RepairAction.REBOOT,
    RepairAction.POWER_CYCLE,
    RepairAction.REPROVISION,
    RepairAction.MIGRATE,
)


def _done(
    action: RepairAction,
    *,
    ago: timedelta = timedelta(hours=1),
    state: RepairState = RepairState.DONE,
    key: str = "xid:79",
    xid: int | None = 79,
    node: NodeName = N1,
    cluster: ClusterName = CLUSTER,
    id: int = 1,
) -> Repair:
    return Repair(
        id=id,
        cluster=cluster,
        node=node,
        action=action,
        state=state,
        requested_by="medic",
        requester_kind=RequesterKind.MEDIC,
        reason="test",
        alert_keys=(key, "agent:other"),
        created_at=T0 - ago - timedelta(minutes=30),
        updated_at=T0 - ago,
        xid=xid,
    )


def _climb(
    action: RepairAction, history: list[Repair], key: str = "xid:79", xid: int | None = 79
) -> Escalation:
    return escalate(action, history, cluster=CLUSTER, node=N1, alert_key=key, xid=xid, now=T0)


@pytest.mark.parametrize(
    ("mapped", "ran", "expected", "escalated_from"),
    [
        (R, [], R, None),
        (R, [R], R, None),
        (R, [R, R], B, R),  # the third round climbs
        (R, [R, R, B], B, R),
        (R, [R, R, B, B], P, R),
        (R, [R, R, B, B, P, P], M, R),
        (B, [B, B], P, B),
        (B, [R, R], B, None),  # the ladder starts at the mapped action
        (P, [P, P], M, P),
        (M, [M, M], M, None),  # top of the ladder
        (PC, [PC, PC], P, PC),  # off the ladder: climbs to reprovision
        (RepairAction.REMOVE, [RepairAction.REMOVE] * 3, RepairAction.REMOVE, None),
    ],
)
def test_ladder(
    mapped: RepairAction,
    ran: list[RepairAction],
    expected: RepairAction,
    escalated_from: RepairAction | None,
) -> None:
    history = [_done(a, id=i) for i, a in enumerate(ran)]
    result = _climb(mapped, history)
    assert (result.action, result.escalated_from) == (expected, escalated_from)
    assert result.reason


@pytest.mark.parametrize(
    ("age", "counts"),
    [
        (timedelta(days=7), True),  # exactly one week: still counts
        (timedelta(days=7, seconds=1), False),
        (timedelta(days=6, hours=23), True),
        (-timedelta(seconds=1), False),  # from the future: ignored
    ],
)
def test_seven_day_window(age: timedelta, counts: bool) -> None:
    history = [_done(B, ago=timedelta(hours=1)), _done(B, ago=age, id=2)]
    assert _climb(B, history).action is (P if counts else B)


@pytest.mark.parametrize(
    "other",
    [
        _done(B, state=RepairState.CANCELLED),
        _done(B, state=RepairState.REJECTED),
        _done(B, state=RepairState.FAILED),
        _done(B, state=RepairState.EXECUTING),
        _done(B, key="xid:48", xid=48),
        _done(B, node=NodeName("n2")),
        _done(B, cluster=ClusterName("c2")),
    ],
    ids=[
        "cancelled",
        "rejected",
        "failed",
        "running",
        "other-fault",
        "other-node",
        "other-cluster",
    ],
)
def test_what_does_not_count(other: Repair) -> None:
    assert _climb(B, [_done(B), other]).action is B


def test_same_key_different_xid_does_not_count_unless_the_key_names_it() -> None:
    sig = [_done(B, key="sig:x", xid=48), _done(B, key="sig:x", xid=48, id=2)]
    assert _climb(B, sig, key="sig:x", xid=79).action is B
    assert _climb(B, sig, key="sig:x", xid=48).action is P
    # a repair answering several alerts records the chosen one's Xid; xid:79 still counts
    multi = [_done(B, key="xid:79", xid=48), _done(B, key="xid:79", xid=48, id=2)]
    assert _climb(B, multi).action is P


def test_weights_follow_the_ladder() -> None:
    assert [weight(a) for a in LADDER] == sorted(weight(a) for a in LADDER)
    assert weight(B) < weight(PC) < weight(P)
    assert heavier(R, B) is B and heavier(M, P) is M


def _alert(
    severity: Severity, state: AlertState, last_seen: datetime | None, first: datetime = T0
) -> Alert:
    return Alert(
        cluster=CLUSTER,
        node=N1,
        key="xid:79",
        source=AlertSource.SIGNATURE,
        summary="x",
        description="x",
        severity=severity,
        state=state,
        first_seen=first,
        last_seen=last_seen,
    )


C, W = Severity.CRITICAL, Severity.WARNING
FIRING, RESOLVED = AlertState.FIRING, AlertState.RESOLVED


@pytest.mark.parametrize(
    ("alerts", "allowed"),
    [
        ([], False),
        ([_alert(C, FIRING, T0)], True),
        ([_alert(W, FIRING, T0)], False),  # critical only
        ([_alert(C, RESOLVED, T0 - timedelta(days=10))], True),  # edge included
        ([_alert(C, RESOLVED, T0 - timedelta(days=10, seconds=1))], False),
        ([_alert(C, RESOLVED, None, first=T0 - timedelta(days=3))], True),
        ([_alert(C, RESOLVED, None, first=T0 - timedelta(days=11))], False),
        ([_alert(W, FIRING, T0), _alert(C, RESOLVED, T0 - timedelta(days=9))], True),
    ],
)
def test_migration_gate(alerts: list[Alert], allowed: bool) -> None:
    check = gate_migration(alerts, T0)
    assert bool(check) is allowed
    assert check.rule == "migration-gate" and check.reason
