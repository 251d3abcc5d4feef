"""Approval rules, the recommend() chain step by step, and admit() for outside requests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
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
from medic.repair.rules.admission import admit
from medic.repair.rules.approval import approve
from medic.repair.rules.guards import has_evidence
from medic.repair.rules.recommend import Recommendation, Skip, recommend

T0 = datetime(2026, 1, 8, tzinfo=UTC)
CLUSTER = ClusterName("c1")
N1 = NodeName("n1")
BREAKER = Breaker(CLUSTER)
TRIPPED = Breaker(CLUSTER, tripped=True, tripped_at=T0, reason="storm")
R, B, P, M, X = (
    RepairAction.RESET_GPU,
    RepairAction.REBOOT,
    RepairAction.REPROVISION,
    RepairAction.MIGRATE,
    RepairAction.REMOVE,
)
MEDIC, DETECTOR, USER = RequesterKind.MEDIC, RequesterKind.DETECTOR, RequesterKind.USER
API = RequestChannel.API
PENDING, APPROVED = RepairState.PENDING_APPROVAL, RepairState.APPROVED
TRUSTING = RepairPolicy(trusted_detectors=frozenset({"nvsentinel"}))
"""The policy trusts the detector ``nvsentinel`` (by default it trusts none)."""


def _decided(*args: Any, **kwargs: Any) -> tuple[RepairState, str | None, str]:
    """``approve``'s answer as (state, approved_by, rule id), as the trail records it."""
    approval = approve(*args, **kwargs)
    return approval.state, approval.approved_by, approval.id


def _request(
    action: RepairAction = B,
    kind: RequesterKind = MEDIC,
    xid: int | None = 79,
    keys: tuple[str, ...] = ("xid:79",),
    by: str | None = None,
) -> RepairRequest:

    requested_by = by or {MEDIC: "medic", DETECTOR: "nvsentinel", USER: "alice"}[kind]
    return RepairRequest(
        CLUSTER, N1, action, requested_by, kind, "because", keys, xid=xid, channel=API
    )


# --- approval ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "policy", "escalated_from", "breaker", "expected"),
    [
        (_request(), RepairPolicy(), None, None, (PENDING, None, "approval-required")),
        (
            _request(),
            RepairPolicy(auto_actions=frozenset({B})),
            None,
            None,
            (APPROVED, "auto", "auto:action:reboot"),
        ),
        (
            _request(),
            RepairPolicy(auto_xids=frozenset({79})),
            None,
            None,
            (APPROVED, "auto", "auto:xid:79"),
        ),
        (  # the action class rule is checked first
            _request(),
            RepairPolicy(auto_actions=frozenset({B}), auto_xids=frozenset({79})),
            None,
            None,
            (APPROVED, "auto", "auto:action:reboot"),
        ),
        (  # an Xid approves its mapped action only, not an escalated one
            _request(P),
            RepairPolicy(auto_xids=frozenset({79})),
            B,
            None,
            (PENDING, None, "approval-required"),
        ),
        (
            _request(xid=None),
            RepairPolicy(auto_xids=frozenset({79})),
            None,
            None,
            (PENDING, None, "approval-required"),
        ),
        (
            _request(X),
            RepairPolicy(auto_actions=frozenset({X}), auto_xids=frozenset({79})),
            None,
            None,
            (PENDING, None, "remove-human-only"),
        ),
        (
            _request(kind=DETECTOR),
            RepairPolicy(),
            None,
            None,
            (PENDING, None, "detector-untrusted"),
        ),
        (
            _request(kind=DETECTOR),
            TRUSTING,
            None,
            None,
            (APPROVED, "auto", "auto:detector:nvsentinel"),
        ),
        (_request(X, DETECTOR), RepairPolicy(), None, None, (PENDING, None, "remove-human-only")),
        (_request(X, USER), RepairPolicy(), None, None, (APPROVED, "alice", "user-request")),
        (
            _request(),
            RepairPolicy(auto_actions=frozenset({B})),
            None,
            TRIPPED,
            (PENDING, None, "breaker-tripped"),
        ),
        (_request(kind=DETECTOR), TRUSTING, None, TRIPPED, (PENDING, None, "breaker-tripped")),
        (  # an untrusted detector's request waits for a person anyway
            _request(kind=DETECTOR),
            RepairPolicy(),
            None,
            TRIPPED,
            (PENDING, None, "detector-untrusted"),
        ),
        (_request(), RepairPolicy(), None, TRIPPED, (PENDING, None, "approval-required")),
        (_request(kind=USER), RepairPolicy(), None, TRIPPED, (APPROVED, "alice", "user-request")),
    ],
)
def test_approve(
    request_: RepairRequest,
    policy: RepairPolicy,
    escalated_from: RepairAction | None,
    breaker: Breaker | None,
    expected: tuple[RepairState, str | None, str],
) -> None:
    assert _decided(request_, policy, escalated_from=escalated_from, breaker=breaker) == expected


def test_a_detector_never_acts_as_a_user() -> None:
    posing = _request(kind=DETECTOR, by="alice")
    assert _decided(posing, RepairPolicy()) == (PENDING, None, "detector-untrusted")
    trusted = RepairPolicy(trusted_detectors=frozenset({"alice"}))
    assert _decided(posing, trusted) == (APPROVED, "auto", "auto:detector:alice")


# --- recommend --------------------------------------------------------------------------------


def _alert(
    key: str = "xid:79",
    *,
    severity: Severity = Severity.CRITICAL,
    first_seen: datetime = T0 - timedelta(minutes=10),
    node: NodeName = N1,
    state: AlertState = AlertState.FIRING,
    evidence: dict[str, Any] | None = None,
) -> Alert:
    return Alert(
        cluster=CLUSTER,
        node=node,
        key=key,
        source=AlertSource.SIGNATURE,
        summary=f"summary of {key}",
        description=key,
        severity=severity,
        evidence=evidence or {},
        state=state,
        first_seen=first_seen,
        last_seen=T0,
    )


def _repair(
    action: RepairAction,
    state: RepairState = RepairState.DONE,
    *,
    id: int = 1,
    node: NodeName = N1,
    keys: tuple[str, ...] = ("xid:79",),
    xid: int | None = 79,
    ago: timedelta = timedelta(days=1),
) -> Repair:
    return Repair(
        id=id,
        cluster=CLUSTER,
        node=node,
        action=action,
        state=state,
        requested_by="medic",
        requester_kind=MEDIC,
        reason="earlier",
        alert_keys=keys,
        created_at=T0 - ago,
        updated_at=T0 - ago,
        xid=xid,
    )


def _recommend(
    alerts: list[Alert],
    *,
    history: list[Repair] | None = None,
    policy: RepairPolicy | None = None,
    breaker: Breaker = BREAKER,
    nodes: int = 100,
    active: list[Repair] | None = None,
    pools: dict[NodeName, str] | None = None,
    past: list[Alert] | None = None,
    executable: frozenset[RepairAction] | None = None,
) -> Recommendation | Skip:
    return recommend(
        alerts,
        N1,
        history or [],
        policy or RepairPolicy(),
        breaker,
        nodes,
        active or [],
        pools or {},
        T0,
        past_alerts=past or [],
        executable=executable,
    )


def _skip(result: Recommendation | Skip, rule: str) -> Skip:
    assert isinstance(result, Skip), result
    assert result.rule == rule and result.reason
    return result


def _rec(result: Recommendation | Skip) -> Recommendation:
    assert isinstance(result, Recommendation), result
    assert result.rule and result.reason
    return result


def test_default_is_a_pending_recommendation_with_evidence() -> None:
    alerts = [_alert()]
    rec = _rec(_recommend(alerts))
    assert rec.state is PENDING and rec.approved_by is None and rec.rule == "approval-required"
    assert rec.request.action is B
    assert rec.request.requester_kind is MEDIC and rec.request.requested_by == "medic"
    assert rec.request.alert_keys == ("xid:79",) and rec.request.xid == 79
    assert has_evidence(rec.request, alerts)
    assert rec.wait_deadline is None
    assert [rule for rule, _ in rec.trace] == ["persistence", "approval-required"]


def test_nothing_firing() -> None:
    _skip(_recommend([]), "no-alert")
    _skip(_recommend([_alert(state=AlertState.RESOLVED)]), "no-alert")
    _skip(_recommend([_alert(node=NodeName("n2"))]), "no-alert")


@pytest.mark.parametrize("state", [PENDING, APPROVED, RepairState.EXECUTING])
def test_one_open_repair_per_node(state: RepairState) -> None:
    _skip(_recommend([_alert()], history=[_repair(B, state)]), "open-repair")
    _skip(_recommend([_alert()], active=[_repair(B, state)]), "open-repair")


def test_unmapped_alerts_are_listed_not_dropped() -> None:
    skip = _skip(_recommend([_alert("agent:thermal"), _alert("xid:13")]), "unmapped")
    assert skip.unmapped == ("agent:thermal", "xid:13")
    rec = _rec(_recommend([_alert("agent:thermal"), _alert()]))
    assert rec.unmapped == ("agent:thermal",)
    assert rec.request.alert_keys == ("xid:79",)


def test_persistence_holds_the_recommendation() -> None:
    policy = RepairPolicy(persistence_seconds=900.0)
    skip = _skip(_recommend([_alert()], policy=policy), "persistence")
    assert skip.retry_at == T0 + timedelta(minutes=5)
    assert _rec(_recommend([_alert(first_seen=T0 - timedelta(minutes=15))], policy=policy))


def test_cooldown_after_a_finished_repair() -> None:
    recent = _repair(R, ago=timedelta(minutes=29), keys=("xid:48",), xid=48)
    skip = _skip(_recommend([_alert()], history=[recent]), "cooldown")
    assert skip.retry_at == T0 + timedelta(minutes=1)
    older = _repair(R, ago=timedelta(minutes=30), keys=("xid:48",), xid=48)
    assert _rec(_recommend([_alert()], history=[older]))


def test_escalation_after_two_done_runs() -> None:
    history = [_repair(B, id=1), _repair(B, id=2, ago=timedelta(days=2))]
    rec = _rec(_recommend([_alert()], history=history))
    assert rec.request.action is P and rec.escalated_from is B
    assert "escalation" in [rule for rule, _ in rec.trace]
    assert rec.request.evidence["escalated_from"] == "reboot"
    assert "reboot ran 2x" in rec.reason


def test_migration_needs_critical_evidence() -> None:
    history = [_repair(P, id=i, keys=("agent:row_remap_failure",), xid=None) for i in (1, 2)]
    critical = _alert("agent:row_remap_failure")
    rec = _rec(_recommend([critical], history=history))
    assert rec.request.action is M and rec.escalated_from is P

    warning = _alert("agent:row_remap_failure", severity=Severity.WARNING)
    gated = _rec(_recommend([warning], history=history))
    assert gated.request.action is P
    assert gated.escalated_from is None  # the gate brought it back where it started
    assert "migration-gate" in [rule for rule, _ in gated.trace]
    assert "reprovision instead" in gated.reason

    past = [_alert("xid:79", state=AlertState.RESOLVED)]  # critical, seen now
    assert _rec(_recommend([warning], history=history, past=past)).request.action is M


def test_heaviest_action_wins_and_every_mapped_alert_is_evidence() -> None:
    alerts = [_alert("xid:48"), _alert("xid:79"), _alert("agent:thermal")]
    rec = _rec(_recommend(alerts))
    assert rec.request.action is B
    assert rec.request.xid == 79
    assert set(rec.request.alert_keys) == {"xid:48", "xid:79"}


def test_auto_approval_and_its_deadline() -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}))
    rec = _rec(_recommend([_alert()], policy=policy))
    assert (rec.state, rec.approved_by, rec.rule) == (APPROVED, "auto", "auto:xid:79")
    assert rec.wait_deadline == T0 + timedelta(hours=2)


def test_tripped_breaker_pauses_automatic_approval_only() -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}))
    rec = _rec(_recommend([_alert()], policy=policy, breaker=TRIPPED))
    assert (rec.state, rec.approved_by, rec.rule) == (PENDING, None, "breaker-tripped")


def test_budget_holds_automatic_repairs_not_pending_ones() -> None:
    busy = [_repair(B, RepairState.EXECUTING, id=9, node=NodeName(f"x{i}")) for i in range(5)]
    auto = RepairPolicy(auto_xids=frozenset({79}))  # 100 nodes x 5 % = 5
    skip = _skip(_recommend([_alert()], policy=auto, active=busy), "budget")
    assert "budget 5" in skip.reason
    assert skip.trace[-1][0] == "budget"
    assert _rec(_recommend([_alert()], active=busy)).state is PENDING
    assert _rec(_recommend([_alert()], policy=auto, active=busy[:4])).state is APPROVED


def test_budget_per_pool() -> None:
    auto = RepairPolicy(auto_xids=frozenset({79}))
    pools = {N1: "p0", NodeName("n2"): "p0", NodeName("n3"): "p1"}
    busy = [_repair(B, RepairState.DRAINING, node=NodeName("n2"))]
    skip = _skip(_recommend([_alert()], policy=auto, active=busy, pools=pools), "budget")
    assert "node pool p0" in skip.reason
    other = [_repair(B, RepairState.DRAINING, node=NodeName("n3"))]
    assert _rec(_recommend([_alert()], policy=auto, active=other, pools=pools))


# --- admit ------------------------------------------------------------------------------------


def _admit(
    request: RepairRequest,
    alerts: list[Alert],
    *,
    open_: list[Repair] | None = None,
    recent: list[Repair] | None = None,
    policy: RepairPolicy | None = None,
    breaker: Breaker = BREAKER,
) -> Recommendation | Skip:
    return admit(request, alerts, open_ or [], recent or [], policy or RepairPolicy(), breaker, T0)


def test_admit_a_detector_request() -> None:
    rec = _rec(_admit(_request(kind=DETECTOR), [_alert()], policy=TRUSTING))
    assert (rec.state, rec.approved_by, rec.rule) == (APPROVED, "auto", "auto:detector:nvsentinel")
    assert rec.wait_deadline == T0 + timedelta(hours=2)
    waits = _rec(_admit(_request(kind=DETECTOR), [_alert()]))
    assert (waits.state, waits.approved_by, waits.rule) == (PENDING, None, "detector-untrusted")
    assert waits.wait_deadline is None


def test_admit_needs_evidence() -> None:
    _skip(_admit(_request(kind=DETECTOR), []), "evidence")
    _skip(_admit(_request(kind=USER, keys=()), [_alert()]), "evidence")


def test_admit_detector_cap_and_open_repair() -> None:
    recent = [
        Repair(
            id=i,
            cluster=CLUSTER,
            node=NodeName(f"x{i}"),
            action=B,
            state=RepairState.DONE,
            requested_by="nvsentinel",
            requester_kind=DETECTOR,
            reason="r",
            alert_keys=("detector:nvsentinel:xid",),
            created_at=T0 - timedelta(minutes=5),
            updated_at=T0,
        )
        for i in range(3)
    ]
    capped = RepairPolicy(detector_cap_per_hour=3)
    _skip(_admit(_request(kind=DETECTOR), [_alert()], recent=recent, policy=capped), "detector-cap")
    assert _rec(_admit(_request(kind=USER), [_alert()], recent=recent, policy=capped))
    _skip(_admit(_request(kind=USER), [_alert()], open_=[_repair(R, PENDING)]), "open-repair")


def test_admit_gates_migration() -> None:
    warning = _alert(severity=Severity.WARNING)
    rec = _rec(_admit(_request(M, USER), [warning]))
    assert rec.request.action is P and "reprovision instead" in rec.request.reason
    assert _rec(_admit(_request(M, USER), [_alert()])).request.action is M


def test_admit_remove_by_detector_waits_for_a_person() -> None:
    rec = _rec(_admit(_request(X, DETECTOR), [_alert()]))
    assert (rec.state, rec.approved_by, rec.rule) == (PENDING, None, "remove-human-only")


SLURM_ALONE = frozenset({RepairAction.REBOOT, RepairAction.REMOVE})


def test_a_gpu_reset_nothing_can_execute_becomes_a_reboot() -> None:
    ecc = [_alert("agent:ecc_dbe")]
    assert _rec(_recommend(ecc)).request.action is RepairAction.RESET_GPU
    rec = _rec(_recommend(ecc, executable=SLURM_ALONE))
    assert rec.request.action is RepairAction.REBOOT
    assert ("executor", rec.trace[1][1]) == rec.trace[1] and "reset_gpu_command" in rec.trace[1][1]
    assert "a reboot resets every GPU" in rec.request.reason


def test_an_action_without_a_lighter_executable_one_is_still_recommended() -> None:
    # a reprovision nothing here can run: recommended as is, so a person sees what is needed
    # (the lifecycle refuses to start it before the node is touched)
    remap = [_alert("agent:row_remap_failure")]
    rec = _rec(_recommend(remap, executable=SLURM_ALONE))
    assert rec.request.action is RepairAction.REPROVISION
    assert "executor" not in [rule for rule, _ in rec.trace]
