"""Clear windows of alerts, cordons and their return (``medic.repair.rules.clearing``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from medic.domain.cluster import Node, NodeState
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
from medic.repair.rules.clearing import (
    ClearWindows,
    clear_window,
    cordon_alert_id,
    cordon_lifts,
    cordon_nodes,
    cordon_reason,
    expired,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTER = ClusterName("c1")
N1, N2 = NodeName("n1"), NodeName("n2")
WINDOWS = ClearWindows(default=600.0, critical=1800.0)


def _alert(
    *,
    node: NodeName = N1,
    key: str = "xid:79",
    source: AlertSource = AlertSource.SIGNATURE,
    severity: Severity = Severity.CRITICAL,
    last_seen: datetime = T0,
    id: int = 7,
) -> Alert:
    return Alert(
        cluster=CLUSTER,
        node=node,
        key=key,
        source=source,
        summary="Xid 79 GPU_HAS_FALLEN_OFF_THE_BUS",
        description="-",
        severity=severity,
        first_seen=last_seen,
        last_seen=last_seen,
        id=id,
    )


def _repair(state: RepairState, node: NodeName = N1, keys: tuple[str, ...] = ("xid:79",)) -> Repair:
    return Repair(
        id=1,
        cluster=CLUSTER,
        node=node,
        action=RepairAction.REBOOT,
        state=state,
        requested_by="medic",
        requester_kind=RequesterKind.MEDIC,
        reason="test",
        alert_keys=keys,
        created_at=T0,
        updated_at=T0,
    )


@pytest.mark.parametrize(
    ("source", "severity", "key", "window"),
    [
        (AlertSource.SIGNATURE, Severity.CRITICAL, "xid:79", 1800.0),
        (AlertSource.SIGNATURE, Severity.WARNING, "sig:ib.link_flap", 600.0),
        (AlertSource.SIGNATURE, Severity.ERROR, "sig:nccl.timeout", 600.0),
        (AlertSource.AGENT, Severity.CRITICAL, "agent:ecc_dbe", 1800.0),
        (AlertSource.SCHEDULER, Severity.ERROR, "slurm:down", None),  # a state: cleared by it
        (AlertSource.DETECTOR, Severity.CRITICAL, "detector:x:y", None),  # resolves its own
        (AlertSource.DETECTOR, Severity.CRITICAL, "validation:failed", None),  # a person's
    ],
)
def test_every_alert_from_a_log_line_has_a_clear_window(
    source: AlertSource, severity: Severity, key: str, window: float | None
) -> None:
    assert clear_window(_alert(source=source, severity=severity, key=key), WINDOWS) == window


def test_a_zero_window_means_only_a_repair_or_a_person_clears() -> None:
    assert clear_window(_alert(), ClearWindows(default=600.0, critical=0.0)) is None


def test_an_alert_expires_once_its_signal_is_absent_for_its_window_boundary_included() -> None:
    alert = _alert()
    assert expired([alert], WINDOWS, [], T0 + timedelta(seconds=1799)) == []
    assert expired([alert], WINDOWS, [], T0 + timedelta(seconds=1800)) == [(alert, 1800.0)]
    again = replace(alert, last_seen=T0 + timedelta(seconds=1000))  # seen again: window restarts
    assert expired([again], WINDOWS, [], T0 + timedelta(seconds=1800)) == []
    resolved = replace(alert, state=AlertState.RESOLVED)
    assert expired([resolved], WINDOWS, [], T0 + timedelta(hours=5)) == []


def test_no_alert_expires_while_an_active_repair_answers_it() -> None:
    alert, late = _alert(), T0 + timedelta(hours=5)
    assert expired([alert], WINDOWS, [_repair(RepairState.EXECUTING)], late) == []
    # a recommendation nobody approved does not hold it: auto-resolve then cancels it
    assert expired([alert], WINDOWS, [_repair(RepairState.PENDING_APPROVAL)], late) == [
        (alert, 1800.0)
    ]
    # another node's repair, or one for another key, does not either
    other = [_repair(RepairState.EXECUTING, node=N2), _repair(RepairState.EXECUTING, keys=("x",))]
    assert expired([alert], WINDOWS, other, late) == [(alert, 1800.0)]


def _node(name: NodeName, state: NodeState = NodeState.IDLE, reason: str | None = None) -> Node:
    return Node(name=name, state=state, reason=reason)


def test_direct_evidence_of_a_fault_cordons_its_node_in_act_mode_only() -> None:
    nodes = {N1: _node(N1, NodeState.ALLOCATED), N2: _node(N2)}
    firing = {N1: [_alert()], N2: [_alert(node=N2, severity=Severity.WARNING, id=8)]}
    assert cordon_nodes(nodes, firing, busy=(), acting=frozenset({N1, N2})) == {N1: firing[N1][0]}
    # an error a repair is mapped to (an HCA link down) is evidence; an unmapped one is not
    link = _alert(node=N2, key="sig:mlx5.link_down", severity=Severity.ERROR, id=9)
    mapped = replace(link, mapped_action=RepairAction.REBOOT)
    assert cordon_nodes(nodes, {N2: [mapped]}, busy=(), acting=frozenset({N2})) == {N2: mapped}
    assert cordon_nodes(nodes, {N2: [link]}, busy=(), acting=frozenset({N2})) == {}
    assert cordon_nodes(nodes, firing, busy=(), acting=frozenset({N2})) == {}
    # a repair past approval drains the node itself; an out-of-service node is out already
    assert cordon_nodes(nodes, firing, busy=(N1,), acting=frozenset({N1})) == {}
    drained = {N1: _node(N1, NodeState.DRAINED, "someone's")}
    assert cordon_nodes(drained, firing, busy=(), acting=frozenset({N1})) == {}
    # the scheduler's own word is no direct evidence: the node is down or drained already
    down = {N1: [_alert(source=AlertSource.SCHEDULER, key="slurm:down")]}
    assert cordon_nodes(nodes, down, busy=(), acting=frozenset({N1})) == {}


def test_a_cordon_returns_once_no_critical_alert_fires_on_its_node() -> None:
    alert = _alert()
    reason = cordon_reason(alert)
    assert reason.startswith("medic: cordon alert 7 xid:79") and cordon_alert_id(reason) == 7
    assert cordon_alert_id("medic: repair 3 reboot") is None and cordon_alert_id(None) is None
    nodes = {
        N1: _node(N1, NodeState.DRAINED, reason),
        N2: _node(N2, NodeState.DRAINED, "medic: repair 3 reboot"),  # a repair's: lifts its own
    }
    assert cordon_lifts(nodes, {N1: [alert]}, busy=()) == []
    assert cordon_lifts(nodes, {N1: [_alert(severity=Severity.WARNING)]}, busy=()) == [N1]
    assert cordon_lifts(nodes, {}, busy=()) == [N1]
    assert cordon_lifts(nodes, {}, busy=(N1,)) == []  # its repair replaced the cordon
    resumed = {N1: _node(N1, NodeState.IDLE, reason)}  # someone resumed it: nothing to lift
    assert cordon_lifts(resumed, {}, busy=()) == []
