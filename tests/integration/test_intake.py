"""Repair intake as a library over a real SQLite store (``medic.repair.intake``), and the Slurm
path without the API: ``medic-request:`` drain reasons parsed by
``medic.schedulers.slurm.requests.parse_request`` and submitted pass after pass.

The store's policy trusts the detector ``nvsentinel`` (``TRUSTED``: by default no detector is
trusted), and ``_detector`` requests come as through the API (authenticated); a Slurm request's
detector name is not authenticated."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from medic.domain.audit import AuditKind
from medic.domain.cluster import Node, NodeState
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RepairUpdate,
    RequestChannel,
    RequesterKind,
)
from medic.errors import ConflictError, InputError, PolicyViolation, SafetyBudgetExceeded
from medic.repair.actors import Actor, EvidenceRequired, GuardrailRefused, RepairInProgress
from medic.repair.decisions import approve_repair, cancel_repair, reject_repair
from medic.repair.intake import record_invalid_request, submit_repair
from medic.repair.intake_common import detector_alert_key, node_pools
from medic.repair.policy_changes import check_policy, put_policy, reset_breaker
from medic.repair.rules.lightest import SLURM_DRAIN, effective_action
from medic.schedulers.slurm.requests import SLURM_OPERATOR, parse_request, request_id_for
from medic.store import SqlStore, create_store
from medic.testing import FakeClock

C = ClusterName("c1")
S = RepairState
NODES = [
    Node(NodeName(f"n{i:02d}"), NodeState.IDLE, partitions=(f"p{i % 2}",), gpus=8)
    for i in range(1, 41)
]
"""40 nodes in two pools (p0: even, p1: odd): budget 2 at once, one per pool."""
POOLS = node_pools(NODES)
TRUSTED = RepairPolicy(trusted_detectors=frozenset({"nvsentinel"}))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = create_store(f"sqlite:///{tmp_path / 'medic.db'}")
    opened.put_repair_policy(C, TRUSTED)
    yield opened
    opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _detector(node: str = "n01", request_id: str = "r-1", **kw: Any) -> RepairRequest:
    fields: dict[str, Any] = {
        "cluster": C,
        "node": NodeName(node),
        "action": RepairAction.REBOOT,
        "requested_by": "nvsentinel",
        "requester_kind": RequesterKind.DETECTOR,
        "reason": "GPU memory test failed",
        "request_id": request_id,
        "evidence": {"check": "gpu_mem", "log": "s3://diag/dcgm.log"},
        "channel": RequestChannel.API,
    }
    return RepairRequest(**{**fields, **kw})


def _person(node: str = "n05", **kw: Any) -> RepairRequest:
    fields: dict[str, Any] = {
        "cluster": C,
        "node": NodeName(node),
        "action": RepairAction.REBOOT,
        "requested_by": "alice",
        "requester_kind": RequesterKind.USER,
        "reason": "Xid 79 again",
        "alert_keys": ("xid:79",),
    }
    return RepairRequest(**{**fields, **kw})


def _submit(
    store: SqlStore, clock: FakeClock, request: RepairRequest, **kw: Any
) -> tuple[Repair, bool, str]:
    return submit_repair(
        store, request, clock.now(), cluster_nodes=len(NODES), node_pools=POOLS, **kw
    )


def _fire(store: SqlStore, clock: FakeClock, node: str, key: str = "xid:79", **kw: Any) -> None:
    fields: dict[str, Any] = {
        "cluster": C,
        "node": NodeName(node),
        "key": key,
        "source": AlertSource.SIGNATURE,
        "summary": key,
        "description": "",
        "severity": Severity.CRITICAL,
    }
    store.upsert_alert(Alert(**{**fields, **kw}), clock.now())


def _walk(store: SqlStore, clock: FakeClock, repair: Repair, *states: RepairState) -> Repair:
    for state in states:
        repair = store.transition_repair(repair.id, repair.state, state, clock.now())
    return repair


def _kinds(store: SqlStore) -> list[AuditKind]:
    return [e.kind for e in store.query_audit(cluster=C, limit=10_000)]


# --- submission --------------------------------------------------------------------------------
def test_a_detector_request_is_approved_and_its_alert_never_maps_to_a_repair(
    store: SqlStore, clock: FakeClock
) -> None:
    repair, created, rule = _submit(store, clock, _detector())

    assert created and rule == "auto:detector:nvsentinel"
    assert (repair.state, repair.approved_by, repair.approved_at) == (
        S.APPROVED,
        "auto",
        clock.now(),
    )
    key = detector_alert_key("nvsentinel", "gpu_mem")
    assert repair.alert_keys == (key,) and key == "detector:nvsentinel:gpu_mem"
    [alert] = store.list_alerts(cluster=C, node=NodeName("n01"))
    assert alert.key == key and effective_action(alert) is None
    assert alert.severity is Severity.ERROR and alert.evidence["refs"] == {
        "log": "s3://diag/dcgm.log"
    }
    rules = {rule for rule, _ in repair.evidence["trace"]}
    assert {"evidence", "cooldown", "budget", "auto:detector:nvsentinel"} <= rules


def test_a_detector_alert_key_is_made_safe() -> None:
    assert (
        detector_alert_key("NV Sentinel@site", "GPU Mem!") == "detector:nv_sentinel_site:gpu_mem_"
    )


def test_repeats_return_the_same_repair_in_every_state(store: SqlStore, clock: FakeClock) -> None:
    first, _, _ = _submit(store, clock, _detector())
    for state in (S.CORDONED, S.DRAINING, S.EXECUTING, S.REJOINING, S.DONE):
        first = _walk(store, clock, first, state)
        clock.advance(3600)
        again, created, rule = _submit(store, clock, _detector(reason="still failing"))
        assert (again.id, again.state, created, rule) == (
            first.id,
            state,
            False,
            "idempotent-repeat",
        )
    assert len(store.list_repairs(cluster=C)) == 1
    assert len(store.list_alerts(cluster=C)) == 1 and store.list_alerts()[0].count == 1, (
        "a repeat touches nothing"
    )


def test_the_same_request_id_on_another_node_is_refused(store: SqlStore, clock: FakeClock) -> None:
    _submit(store, clock, _detector("n01"))

    with pytest.raises(InputError, match=r"already names repair \d+ of n01, not n02"):
        _submit(store, clock, _detector("n02"))
    assert [r.node for r in store.list_repairs(cluster=C)] == ["n01"]
    assert store.list_alerts(cluster=C, node=NodeName("n02")) == [], "nothing left on n02"


def test_one_repair_per_pool_and_the_budget(store: SqlStore, clock: FakeClock) -> None:
    _submit(store, clock, _detector("n01", "a"))  # pool p1

    with pytest.raises(GuardrailRefused, match="node pool p1 already has repair"):
        _submit(store, clock, _detector("n03", "b"))
    _submit(store, clock, _detector("n02", "c"))  # pool p0
    with pytest.raises(SafetyBudgetExceeded, match="budget 2"):
        _submit(store, clock, _detector("n04", "d"))


def test_cooldown_refuses_a_detector_but_not_a_person(store: SqlStore, clock: FakeClock) -> None:
    done, _, _ = _submit(store, clock, _detector("n05"))
    _walk(store, clock, done, S.CORDONED, S.DRAINING, S.EXECUTING, S.REJOINING, S.DONE)
    _fire(store, clock, "n05")

    with pytest.raises(GuardrailRefused) as refused:
        _submit(store, clock, _detector("n05", "r-2"))
    person, created, _ = _submit(store, clock, _person("n05"))
    clock.advance(1801)

    assert refused.value.rule == "cooldown" and created and person.state is S.PENDING_APPROVAL
    _walk(store, clock, person, S.CANCELLED)
    later, created, _ = _submit(store, clock, _detector("n05", "r-3"))
    assert created and later.state is S.APPROVED


def test_the_breaker_stops_detectors_but_people_still_ask(
    store: SqlStore, clock: FakeClock
) -> None:
    store.set_breaker(
        Breaker(C, tripped=True, tripped_at=clock.now(), reason="trip"), expected_tripped=False
    )
    store.put_repair_policy(C, replace(TRUSTED, auto_actions=frozenset({RepairAction.REBOOT})))
    _fire(store, clock, "n05")

    with pytest.raises(GuardrailRefused, match=r"breaker-tripped: .*tripped at .*: trip"):
        _submit(store, clock, _detector())
    person, _, rule = _submit(store, clock, _person("n05"))

    assert (person.state, rule) == (S.PENDING_APPROVAL, "breaker-tripped")


def test_evidence_refusals_are_policy_violations(store: SqlStore, clock: FakeClock) -> None:
    with pytest.raises(EvidenceRequired) as refused:
        _submit(store, clock, _person())
    assert isinstance(refused.value, PolicyViolation) and refused.value.rule == "evidence"
    assert _kinds(store) == [AuditKind.REPAIR_REQUEST_REFUSED]


def test_identity_rules(store: SqlStore, clock: FakeClock) -> None:
    for request, error in [
        (_detector(requester_kind=RequesterKind.MEDIC, requested_by="medic"), PolicyViolation),
        (_detector(requested_by="auto"), PolicyViolation),
        (_person(requested_by="medic"), PolicyViolation),
        (_detector(action=RepairAction.REMOVE), PolicyViolation),
        (_detector(request_id=None), InputError),
        (_detector(requested_by="bad name"), InputError),
    ]:
        with pytest.raises(error):
            _submit(store, clock, request)
    assert store.list_repairs() == [] and len(_kinds(store)) == 6


def test_a_detector_migrate_needs_critical_evidence(store: SqlStore, clock: FakeClock) -> None:
    plain, _, _ = _submit(store, clock, _detector("n01", "m-1", action=RepairAction.MIGRATE))
    critical = _detector(
        "n02",
        "m-2",
        action=RepairAction.MIGRATE,
        evidence={"check": "gpu_mem", "severity": "critical"},
    )
    gated, _, _ = _submit(store, clock, critical)

    assert plain.action is RepairAction.REPROVISION and "reprovision instead" in plain.reason
    assert gated.action is RepairAction.MIGRATE


def test_an_open_repair_blocks_a_second_one(store: SqlStore, clock: FakeClock) -> None:
    _submit(store, clock, _detector())
    with pytest.raises(RepairInProgress) as refused:
        _submit(store, clock, _detector(request_id="r-2"))
    assert isinstance(refused.value, ConflictError)


def test_dedupe_window_audits_repeated_refusals_once(store: SqlStore, clock: FakeClock) -> None:
    request = _person()  # no alert firing: refused every pass
    for _ in range(5):
        with pytest.raises(EvidenceRequired):
            _submit(
                store,
                clock,
                replace(request, request_id="slurm-1"),
                dedupe_window=timedelta(hours=1),
            )
        clock.advance(10)
    clock.advance(3600)
    with pytest.raises(EvidenceRequired):
        _submit(
            store, clock, replace(request, request_id="slurm-1"), dedupe_window=timedelta(hours=1)
        )

    assert _kinds(store) == [AuditKind.REPAIR_REQUEST_REFUSED] * 2


# --- decisions -----------------------------------------------------------------------------------
def test_people_decide_detectors_do_not(store: SqlStore, clock: FakeClock) -> None:
    _fire(store, clock, "n05")
    _fire(store, clock, "n06")
    pending, _, _ = _submit(store, clock, _person("n05"))
    other, _, _ = _submit(store, clock, _person("n06"))

    for who in ("detector:nvsentinel", Actor("nvsentinel", RequesterKind.DETECTOR), "agent:n05"):
        for decide in (approve_repair, reject_repair, cancel_repair):
            with pytest.raises(PolicyViolation, match="detector"):
                decide(store, pending.id, who, clock.now())
    approved = approve_repair(store, pending.id, "bob", clock.now(), RepairAction.REMOVE)
    rejected = reject_repair(store, other.id, "user:bob", clock.now(), reason="no")

    assert (approved.state, approved.action, approved.approved_by) == (
        S.APPROVED,
        RepairAction.REMOVE,
        "bob",
    )
    assert rejected.state is S.REJECTED
    assert reject_repair(store, other.id, "bob", clock.now()) == rejected, "idempotent"
    with pytest.raises(ConflictError, match="only a repair pending approval"):
        reject_repair(store, pending.id, "bob", clock.now())


class _EngineMovesFirst:
    """A store whose first transition loses to the engine moving the repair one step."""

    def __init__(self, inner: SqlStore, clock: FakeClock) -> None:
        self.inner, self.clock, self.raced = inner, clock, False

    def transition_repair(
        self,
        repair_id: int,
        expected: RepairState,
        new: RepairState,
        now: Any,
        update: RepairUpdate | None = None,
    ) -> Repair:
        if not self.raced:
            self.raced = True
            self.inner.transition_repair(repair_id, expected, S.CORDONED, self.clock.now())
        return self.inner.transition_repair(repair_id, expected, new, now, update)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_cancel_retries_when_the_engine_moves_the_repair(store: SqlStore, clock: FakeClock) -> None:
    repair, _, _ = _submit(store, clock, _detector())
    racing: Any = _EngineMovesFirst(store, clock)

    cancelled = cancel_repair(racing, repair.id, "alice", clock.now(), reason="wrong node")

    assert racing.raced and cancelled.state is S.CANCELLED
    [event] = store.query_audit(kind=AuditKind.REPAIR_CANCELLED)
    assert event.payload["previous_state"] == "cordoned"
    assert cancelled.error == "cancelled by user:alice: wrong node"


def test_policy_and_breaker(store: SqlStore, clock: FakeClock) -> None:
    with pytest.raises(InputError, match="max_wait_seconds"):
        check_policy(RepairPolicy(max_wait_seconds=float("nan")))
    stored = put_policy(store, C, RepairPolicy(auto_xids=frozenset({79})), "alice", clock.now())
    assert stored.auto_xids == frozenset({79})
    assert reset_breaker(store, C, "alice", clock.now()) == (store.get_breaker(C), False)
    store.set_breaker(Breaker(C, tripped=True, tripped_at=clock.now()), expected_tripped=False)

    closed, changed = reset_breaker(store, C, "alice", clock.now(), reason="fixed")

    assert changed and not closed.tripped and closed.reset_by == "alice"
    assert _kinds(store) == [AuditKind.REPAIR_POLICY_CHANGED, AuditKind.BREAKER_RESET]


# --- the Slurm path ------------------------------------------------------------------------------
def _drained(reason: str | None, name: str = "n07") -> Node:
    return Node(NodeName(name), NodeState.DRAINED, partitions=("p1",), gpus=8, reason=reason)


def test_parse_a_detector_request() -> None:
    node = _drained(
        "medic-request: reboot id=ticket-4711 detector=nvsentinel GPU memory test failed"
    )

    request = parse_request(node, C)

    assert request is not None
    assert (request.action, request.request_id, request.requested_by) == (
        RepairAction.REBOOT,
        "ticket-4711",
        "nvsentinel",
    )
    assert request.requester_kind is RequesterKind.DETECTOR
    assert request.reason == "GPU memory test failed" and request.alert_keys == (SLURM_DRAIN,)
    assert request.cluster == C and request.node == "n07"


def test_parse_a_person_request_with_a_default_id() -> None:
    reason = "Medic-Request:  RESET-GPU   detector=  fans"  # odd case and spacing, empty value
    with pytest.raises(InputError, match=r"n07: .*detector=''"):
        parse_request(_drained(reason), C)

    request = parse_request(_drained("medic-request: reset-gpu  fans are loud"), C)
    again = parse_request(_drained("medic-request:  reset-gpu fans are loud "), C)
    elsewhere = parse_request(_drained("medic-request: reset-gpu fans are loud", "n08"), C)

    assert request is not None and again is not None and elsewhere is not None
    assert request.action is RepairAction.RESET_GPU
    assert (request.requested_by, request.requester_kind) == (SLURM_OPERATOR, RequesterKind.USER)
    assert request.request_id == again.request_id, "the same reason is the same request"
    assert request.request_id != elsewhere.request_id
    assert request.request_id == request_id_for("n07", "medic-request: reset-gpu fans are loud")


def _commented(comment: str | None, reason: str | None = None) -> Node:
    state = NodeState.DRAINED if reason else NodeState.IDLE
    return Node(NodeName("n07"), state, partitions=("p1",), gpus=8, reason=reason, comment=comment)


def test_parse_a_detector_request_in_the_node_comment() -> None:
    node = _commented("medic-request: reset_gpu id=hc-981 detector=nvsentinel ECC DBE on GPU 3")

    request = parse_request(node, C)

    assert request is not None
    assert (request.action, request.request_id, request.requested_by) == (
        RepairAction.RESET_GPU,
        "hc-981",
        "nvsentinel",
    )
    assert request.requester_kind is RequesterKind.DETECTOR and request.alert_keys == ()
    assert request.evidence["source"] == "slurm-comment"
    with pytest.raises(InputError, match="must name detector="):
        parse_request(_commented("medic-request: reboot the fans are loud"), C)
    assert parse_request(_commented("rack 7, row B"), C) is None
    # a drain reason that is a request wins over the comment
    both = parse_request(
        _commented("medic-request: reboot detector=x a", "medic-request: reprovision b"), C
    )
    assert both is not None and both.action is RepairAction.REPROVISION


def test_a_comment_request_read_every_pass_makes_one_repair(
    store: SqlStore, clock: FakeClock
) -> None:
    node = _commented("medic-request: reboot detector=nvsentinel DCGM diag level 3 failed")
    for _ in range(3):
        request = parse_request(node, C)
        assert request is not None
        _submit(store, clock, request, dedupe_window=timedelta(hours=1))
        clock.advance(5)
    [repair] = store.list_repairs(cluster=C)
    assert (repair.node, repair.requested_by) == ("n07", "nvsentinel")
    assert (repair.state, repair.rule) == (S.PENDING_APPROVAL, "detector-unauthenticated")
    assert repair.alert_keys, "the detector's own failed check is its evidence"


@pytest.mark.parametrize("reason", [None, "", "medic: drained for repair 12", "NHC failed"])
def test_other_drain_reasons_are_not_requests(reason: str | None) -> None:
    assert parse_request(_drained(reason), C) is None


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("medic-request:", "names no action"),
        ("medic-request: explode now", "unknown action 'explode'"),
        ("medic-request: reboot foo=bar text", "unknown option 'foo'"),
        ("medic-request: reboot id=a id=b", "id= given twice"),
        ("medic-request: reboot id=bad/id", "id='bad/id' is not valid"),
        ("medic-request: remove detector=nvsentinel RMA", "removal is a person's decision"),
    ],
)
def test_invalid_requests_name_the_node_and_the_problem(reason: str, message: str) -> None:
    with pytest.raises(InputError) as error:
        parse_request(_drained(reason), C)
    assert error.value.where == "node n07" and message in error.value.message


def test_a_drain_reason_read_every_pass_makes_one_repair(store: SqlStore, clock: FakeClock) -> None:
    detector = _drained("medic-request: reboot detector=nvsentinel DCGM diag level 3 failed")
    person = _drained("medic-request: reprovision disk keeps failing", "n10")
    broken = _drained("medic-request: defragment", "n12")
    _fire(store, clock, "n10", SLURM_DRAIN, source=AlertSource.SCHEDULER, severity=Severity.WARNING)
    window = timedelta(hours=1)

    for _ in range(5):  # five engine passes
        for node in (detector, person, broken):
            try:
                request = parse_request(node, C)
            except InputError as error:
                record_invalid_request(store, C, node.name, error, clock.now())
                continue
            assert request is not None
            _submit(store, clock, request, dedupe_window=window)
        clock.advance(5)

    repairs = store.list_repairs(cluster=C)
    assert [(r.node, r.state, r.requester_kind) for r in repairs] == [
        ("n07", S.PENDING_APPROVAL, RequesterKind.DETECTOR),  # detector= is not authenticated
        ("n10", S.PENDING_APPROVAL, RequesterKind.USER),
    ]
    assert repairs[1].alert_keys == (SLURM_DRAIN,)
    kinds = _kinds(store)
    assert kinds.count(AuditKind.REPAIR_REQUESTED) == 2
    assert kinds.count(AuditKind.REPAIR_REQUEST_REPEATED) == 2, "one per repair and state"
    assert kinds.count(AuditKind.REPAIR_REQUEST_INVALID) == 1, "once an hour per message"
    [invalid] = store.query_audit(kind=AuditKind.REPAIR_REQUEST_INVALID)
    assert invalid.subject_id == "n12" and "unknown action 'defragment'" in invalid.payload["error"]
