"""Properties of the repair decision core that must hold for any input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    TERMINAL_STATES,
    Alert,
    AlertSource,
    AlertState,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequestChannel,
    RequesterKind,
)
from medic.repair.rules.approval import approve, trusted_as
from medic.repair.rules.guards import budget_limit, has_evidence, within_budget
from medic.repair.rules.ladder import escalate, weight
from medic.repair.rules.recommend import Recommendation, recommend

T0 = datetime(2026, 1, 8, tzinfo=UTC)
CLUSTER = ClusterName("c1")
NODES = [NodeName(f"n{i}") for i in range(4)]
KEYS = ["xid:79", "xid:48", "xid:13", "agent:thermal", "agent:row_remap_failure", "sig:s"]

actions = st.sampled_from(list(RepairAction))
kinds = st.sampled_from(list(RequesterKind))
states = st.one_of(
    st.sampled_from(sorted(TERMINAL_STATES)), st.sampled_from(list(RepairState))
)  # mostly finished: an open repair on the node ends every recommendation early
offsets = st.integers(min_value=-3600, max_value=14 * 86400)

policies = st.builds(
    RepairPolicy,
    auto_actions=st.frozensets(actions),
    auto_xids=st.frozensets(st.sampled_from([13, 48, 79, 95])),
    persistence_seconds=st.sampled_from([0.0, 60.0, 600.0]),
    cooldown_seconds=st.sampled_from([0.0, 1800.0]),
    max_concurrent_fraction=st.sampled_from([0.01, 0.05, 0.5]),
    trusted_detectors=st.frozensets(st.sampled_from(["nvsentinel", "agent", "someone"])),
    trust_scheduler_requests=st.booleans(),
)


def _decided(*args: Any, **kwargs: Any) -> tuple[RepairState, str | None, str]:
    """``approve``'s answer as (state, approved_by, rule id), as the trail records it."""
    approval = approve(*args, **kwargs)
    return approval.state, approval.approved_by, approval.id


breakers = st.builds(Breaker, cluster=st.just(CLUSTER), tripped=st.booleans())


@st.composite
def repairs(draw: st.DrawFn, id: int = 0) -> Repair:
    when = T0 - timedelta(seconds=draw(offsets))
    return Repair(
        id=draw(st.integers(1, 50)) if id == 0 else id,
        cluster=CLUSTER,
        node=draw(st.sampled_from(NODES)),
        action=draw(actions),
        state=draw(states),
        requested_by="medic",
        requester_kind=draw(kinds),
        reason="r",
        alert_keys=tuple(draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2))),
        created_at=when,
        updated_at=when,
        xid=draw(st.sampled_from([None, 48, 79])),
    )


@st.composite
def alerts(draw: st.DrawFn) -> Alert:
    return Alert(
        cluster=CLUSTER,
        node=draw(st.sampled_from([NODES[0], NODES[0], NODES[1]])),
        key=draw(st.sampled_from(KEYS)),
        source=AlertSource.SIGNATURE,
        summary="s",
        description="d",
        severity=draw(st.sampled_from(list(Severity))),
        evidence={"node_action": draw(st.sampled_from(["reboot", "migrate", "remove", "none"]))},
        state=draw(st.sampled_from([AlertState.FIRING, AlertState.FIRING, AlertState.RESOLVED])),
        first_seen=T0 - timedelta(seconds=draw(offsets)),
        last_seen=T0,
    )


@settings(max_examples=60, deadline=None)
@given(actions, kinds, policies, st.sampled_from([None, 48, 79]), breakers, actions)
def test_remove_is_never_automatic(
    action: RepairAction,
    kind: RequesterKind,
    policy: RepairPolicy,
    xid: int | None,
    breaker: Breaker,
    escalated: RepairAction,
) -> None:
    request = RepairRequest(CLUSTER, NODES[0], action, "someone", kind, "r", ("xid:79",), xid=xid)
    state, approved_by, rule = _decided(request, policy, escalated_from=escalated, breaker=breaker)
    if action is RepairAction.REMOVE:
        assert approved_by != "auto"
        assert kind is RequesterKind.USER or state is RepairState.PENDING_APPROVAL
    if kind is RequesterKind.DETECTOR:
        assert approved_by in (None, "auto")  # never as a person
    if breaker.tripped and kind is not RequesterKind.USER:
        assert approved_by is None and state is RepairState.PENDING_APPROVAL
    assert (state is RepairState.APPROVED) == (approved_by is not None)
    assert rule


@given(
    actions,
    policies,
    breakers,
    st.sampled_from(["nvsentinel", "nvsentinel:gpu", "agent:n1", "someone", "dcgm"]),
    st.sampled_from(list(RequestChannel)),
)
def test_a_detector_is_approved_only_when_the_policy_trusts_its_name_and_channel(
    action: RepairAction,
    policy: RepairPolicy,
    breaker: Breaker,
    name: str,
    channel: RequestChannel,
) -> None:
    request = RepairRequest(
        CLUSTER, NODES[0], action, name, RequesterKind.DETECTOR, "r", channel=channel
    )
    state, approved_by, _ = _decided(request, policy, breaker=breaker)
    if state is RepairState.APPROVED:
        assert approved_by == "auto" and trusted_as(name, policy) is not None
        assert channel is RequestChannel.API or policy.trust_scheduler_requests
    if not policy.trusted_detectors:
        assert state is RepairState.PENDING_APPROVAL  # the default: a person approves


@settings(max_examples=60, deadline=None)
@given(
    actions, st.lists(repairs(), max_size=12), st.sampled_from(KEYS), st.sampled_from([None, 79])
)
def test_escalation_never_goes_down(
    action: RepairAction, history: list[Repair], key: str, xid: int | None
) -> None:
    result = escalate(
        action, history, cluster=CLUSTER, node=NODES[0], alert_key=key, xid=xid, now=T0
    )
    assert weight(result.action) >= weight(action)
    assert (result.escalated_from is None) == (result.action is action)
    assert result.reason


@settings(max_examples=60, deadline=None)
@given(
    st.lists(alerts(), min_size=1, max_size=6),
    st.lists(repairs(), max_size=6),
    policies,
    breakers,
    st.lists(repairs(), max_size=6),
    st.integers(0, 200),
)
def test_a_recommendation_never_lacks_evidence_or_breaks_a_guard(
    firing: list[Alert],
    history: list[Repair],
    policy: RepairPolicy,
    breaker: Breaker,
    active: list[Repair],
    nodes: int,
) -> None:
    node = NODES[0]
    pools = dict.fromkeys(NODES, "p0")
    result = recommend(firing, node, history, policy, breaker, nodes, active, pools, T0)
    assert result.rule and result.reason
    if not isinstance(result, Recommendation):
        return
    request = result.request
    assert request.node == node and request.cluster == CLUSTER
    assert has_evidence(request, firing)
    on_node = {a.key for a in firing if a.node == node and a.state is AlertState.FIRING}
    assert set(request.alert_keys) <= on_node
    assert request.action is not RepairAction.REMOVE
    assert request.requester_kind is RequesterKind.MEDIC
    assert not any(r.node == node and not r.state.is_terminal for r in [*history, *active])
    if breaker.tripped:
        assert result.state is RepairState.PENDING_APPROVAL
    if result.state is RepairState.APPROVED:
        assert result.approved_by == "auto"
        assert within_budget(nodes, active, pools, node, policy)


@settings(max_examples=60, deadline=None)
@given(st.lists(repairs(), max_size=20), st.integers(0, 500), policies)
def test_budget_never_admits_past_the_limit(
    active: list[Repair], nodes: int, policy: RepairPolicy
) -> None:
    check = within_budget(nodes, active, {}, NODES[0], policy)
    at_work = [
        r
        for r in active
        # started ones and every approved one (a new candidate is behind); not knowing which
        # nodes are busy, one waiting for idle waits for a busy node: it holds no working slot
        if r.state.is_active and r.state is not RepairState.WAITING_FOR_IDLE
    ]
    assert bool(check) == (len(at_work) < budget_limit(nodes, policy))
