"""The repair API over real HTTP (uvicorn on 127.0.0.1, FakeClock) on SQLite, and on PostgreSQL
when ``MEDIC_TEST_POSTGRES_URL`` names a disposable database: idempotent requests (racing twins
included), trusted detectors skipping the approval queue but not the guardrails and untrusted ones
waiting for a person, people's decisions, the repair policy and the circuit breaker.

Who acts is the API token: ``alice`` (admin: the policy too), ``bob`` and ``carol`` (operators),
the detectors ``nvsentinel`` (trusted by the cluster's policy, ``TRUSTED``) and ``dcgm`` (not);
plain reads go out with a viewer's token."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from medic.api import problems
from medic.api.app import create_app
from medic.api.repairs import router as repairs_router
from medic.config.loading import load_settings
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import Role
from medic.domain.cluster import Node, NodeState
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    Breaker,
    RepairPolicy,
    RepairState,
    ValidationOutcome,
    ValidationResult,
)
from medic.errors import PolicyViolation, SafetyBudgetExceeded
from medic.repair.intake_common import IntakeStore
from medic.services import Services
from medic.testing import FakeClock, LiveServer
from medic.wiring import build

from .auth_kit import bearer, grant

PROBLEM_JSON = "application/problem+json"
CLUSTER = ClusterName("c1")
NODES = 40
"""Budget: max(1, floor(0.05 x 40)) = 2 repairs at once."""
S = RepairState
TOKENS = {
    "alice": Role.ADMIN,
    "bob": Role.OPERATOR,
    "carol": Role.OPERATOR,
    "nvsentinel": Role.DETECTOR,
    "dcgm": Role.DETECTOR,
    "watcher": Role.VIEWER,
}
TRUSTED = RepairPolicy(trusted_detectors=frozenset({"nvsentinel"}))
"""The cluster's policy in every test: the defaults, and the detector ``nvsentinel`` trusted."""

ENGINES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "MEDIC_TEST_POSTGRES_URL",
        id="postgresql",
        marks=pytest.mark.skipif(
            not os.environ.get("MEDIC_TEST_POSTGRES_URL"), reason="MEDIC_TEST_POSTGRES_URL unset"
        ),
    ),
]


@dataclass
class Api:
    services: Services
    clock: FakeClock
    url: str
    http: httpx.Client
    """Signed in as the viewer ``watcher``; pass ``headers=api.as_(name)`` to act as another."""
    tokens: dict[str, str]

    @property
    def store(self) -> IntakeStore:
        return self.services.repair_store

    def as_(self, who: str | None) -> dict[str, str]:
        """The headers of the token named ``who`` (``user:``/``detector:`` prefix ignored); None:
        an ``Authorization`` header that the client's default cannot fill in (anonymous)."""
        if who is None:
            return {"Authorization": ""}
        return bearer(self.tokens[who.split(":", 1)[-1]])

    def post(self, body: dict[str, Any], actor: str | None = "nvsentinel") -> httpx.Response:
        """POST a repair request with the token of ``actor`` (default: the detector)."""
        return self.http.post("/api/v1/repairs", json=body, headers=self.as_(actor))

    def decide(
        self, repair_id: int, verb: str, header: str | None = "user:alice", **body: Any
    ) -> httpx.Response:
        """POST a decision with the token named by ``header`` (None: none)."""
        return self.http.post(
            f"/api/v1/repairs/{repair_id}/{verb}", json=body, headers=self.as_(header)
        )

    def fire(self, node: str, key: str = "xid:79", severity: Severity = Severity.CRITICAL) -> None:
        alert = Alert(
            cluster=CLUSTER,
            node=NodeName(node),
            key=key,
            source=AlertSource.SIGNATURE,
            summary=f"{key} on {node}",
            description="",
            severity=severity,
            xid=79 if key == "xid:79" else None,
        )
        self.store.upsert_alert(alert, self.clock.now())

    def audit(self, kind: AuditKind) -> list[AuditEvent]:
        return self.store.query_audit(cluster=CLUSTER, kind=kind, limit=10_000)

    def walk(self, repair_id: int, *states: RepairState) -> None:
        """Move a repair through ``states`` as the engine would."""
        for state in states:
            current = self.store.get_repair(repair_id)
            assert current is not None
            self.store.transition_repair(repair_id, current.state, state, self.clock.now())


def _map_guardrail_errors(app: FastAPI) -> None:
    """Until ``medic.api.problems`` maps them: SafetyBudgetExceeded 409, PolicyViolation 403."""
    mapped = {cls for cls, _, _ in problems._STATUS}
    for cls, status, code in (
        (SafetyBudgetExceeded, 409, "budget_exceeded"),
        (PolicyViolation, 403, "policy_violation"),
    ):
        if cls in mapped:
            continue

        def handler(_: Request, exc: Exception, status: int = status, code: str = code) -> Any:
            return problems.problem(status, code, str(exc))

        async def on_error(request: Request, exc: Exception, h: Any = handler) -> JSONResponse:
            response: JSONResponse = h(request, exc)
            return response

        app.add_exception_handler(cls, on_error)


def _database(param: str, tmp_path: Path) -> str:
    if param == "sqlite":
        return f"sqlite:///{tmp_path / 'medic.db'}"
    from contract.test_store import _drop_everything

    url = os.environ[param]
    _drop_everything(url)
    return url


@pytest.fixture(params=ENGINES)
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    clock = FakeClock()
    settings = load_settings(
        env={},
        overrides={"store.url": _database(request.param, tmp_path), "scheduler.cluster": CLUSTER},
    )
    services = build(settings, clock=clock)
    nodes = [Node(NodeName(f"n{i:02d}"), NodeState.IDLE, gpus=8) for i in range(1, NODES + 1)]
    services.store.sync_nodes(CLUSTER, nodes, clock.now())
    services.store.put_repair_policy(CLUSTER, TRUSTED)
    app = create_app(services)
    if not any(getattr(r, "path", None) == "/api/v1/repairs" for r in app.routes):
        app.include_router(repairs_router)  # until create_app includes the repairs router
    _map_guardrail_errors(app)
    server = LiveServer(app).start()
    url = server.url
    tokens = {name: grant(services.store, role, name) for name, role in TOKENS.items()}
    http = httpx.Client(base_url=url, timeout=10.0, headers=bearer(tokens["watcher"]))
    try:
        yield Api(services, clock, url, http, tokens)
    finally:
        http.close()
        server.stop()
        services.close()


def _problem(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body = response.json()
    assert body["code"] == code and body["status"] == status
    detail: str = body["detail"]
    return detail


def _detector(node: str = "n01", request_id: str = "r-1", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "cluster": CLUSTER,
        "node": node,
        "action": "reboot",
        "request_id": request_id,
        "requested_by": "nvsentinel",
        "requester_kind": "detector",
        "reason": "GPU memory test failed",
        "check": "gpu_mem",
        "evidence": {"log": "s3://diag/n01/dcgm-l3.log"},
    }
    body.update(overrides)
    return body


def _person(node: str = "n05", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "cluster": CLUSTER,
        "node": node,
        "action": "reboot",
        "reason": "Xid 79 keeps coming back",
        "alert_keys": ["xid:79"],
    }
    body.update(overrides)
    return body


# --- idempotency ---------------------------------------------------------------------------------
def _twins(api: Api, body: dict[str, Any]) -> list[httpx.Response]:
    """Send ``body`` twice at the same moment from two threads, each with its own connection."""
    barrier = threading.Barrier(2)
    answers: list[httpx.Response] = []

    def send() -> None:
        with httpx.Client(base_url=api.url, timeout=10.0, headers=api.as_("nvsentinel")) as client:
            barrier.wait()
            answers.append(client.post("/api/v1/repairs", json=body))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return answers


def test_racing_requests_with_the_same_request_id_make_one_repair(api: Api) -> None:
    for round_ in range(6):
        node, request_id = f"n{round_ + 10:02d}", f"race-{round_}"

        answers = _twins(api, _detector(node, request_id))

        assert sorted(r.status_code for r in answers) == [200, 201], [r.text for r in answers]
        assert answers[0].json()["id"] == answers[1].json()["id"]
        assert answers[0].headers["Location"] == answers[1].headers["Location"]
        same = [r for r in api.store.list_repairs(cluster=CLUSTER) if r.request_id == request_id]
        assert len(same) == 1, "two racing twins must make exactly one repair"
        api.walk(same[0].id, S.CANCELLED)  # free the budget for the next round


def test_a_repeat_after_the_repair_finished_returns_it(api: Api) -> None:
    first = api.post(_detector())
    assert first.status_code == 201, first.text
    repair_id = first.json()["id"]
    assert first.headers["Location"] == f"/api/v1/repairs/{repair_id}"
    api.walk(repair_id, S.CORDONED, S.DRAINING, S.EXECUTING, S.REJOINING, S.DONE)
    api.clock.advance(7200)  # past the cooldown: only the request id stops a second reboot

    again = api.post(_detector(reason="GPU memory test failed again"))

    assert again.status_code == 200, again.text
    assert again.json()["id"] == repair_id and again.json()["state"] == "done"
    assert again.headers["Location"] == f"/api/v1/repairs/{repair_id}"
    assert len(api.store.list_repairs(cluster=CLUSTER, node=NodeName("n01"))) == 1
    repeated = api.audit(AuditKind.REPAIR_REQUEST_REPEATED)
    assert [e.payload["repair_id"] for e in repeated] == [repair_id]


# --- detectors -----------------------------------------------------------------------------------
def test_a_trusted_detector_request_skips_approval_and_records_its_check(api: Api) -> None:
    response = api.post(_detector())

    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["state"], body["approved_by"], body["rule"]) == (
        "approved",
        "auto",
        "auto:detector:nvsentinel",
    )
    assert (body["requested_by"], body["requester_kind"]) == ("nvsentinel", "detector")
    assert "detector:nvsentinel:gpu_mem" in body["alert_keys"]
    [alert] = api.store.list_alerts(cluster=CLUSTER, node=NodeName("n01"))
    assert (alert.key, alert.source, alert.detector) == (
        "detector:nvsentinel:gpu_mem",
        AlertSource.DETECTOR,
        "nvsentinel",
    )
    assert alert.evidence["refs"] == {"log": "s3://diag/n01/dcgm-l3.log"}
    assert alert.mapped_action is None, "the request is the repair; medic never repeats it"
    [event] = api.audit(AuditKind.REPAIR_REQUESTED)
    assert event.payload["rule"] == "auto:detector:nvsentinel"
    assert event.payload["repair_id"] == body["id"] and event.payload["channel"] == "api"
    assert event.payload["requester_kind"] == "detector" and event.action == "reboot"


def test_an_untrusted_detector_request_waits_for_a_person(api: Api) -> None:
    defaults = api.http.get("/api/v1/policy/repair", params={"cluster": "c2"}).json()
    assert (defaults["trusted_detectors"], defaults["trust_scheduler_requests"]) == ([], False)

    response = api.post(_detector(requested_by="dcgm"), actor="dcgm")

    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["state"], body["approved_by"], body["rule"]) == (
        "pending_approval",
        None,
        "detector-untrusted",
    )
    assert api.store.list_repairs(cluster=CLUSTER, states=frozenset({S.APPROVED})) == []
    approved = api.decide(body["id"], "approve", header="user:bob")
    assert approved.status_code == 200 and approved.json()["approved_by"] == "bob"


def test_an_admin_trusts_a_detector_in_the_policy(api: Api) -> None:
    document = {"trusted_detectors": ["dcgm", "agent"], "trust_scheduler_requests": False}
    put = api.http.put("/api/v1/policy/repair", json=document, headers=api.as_("alice"))

    assert put.status_code == 200, put.text
    assert put.json()["trusted_detectors"] == ["agent", "dcgm"]
    [event] = api.audit(AuditKind.REPAIR_POLICY_CHANGED)
    assert event.payload["changed"]["trusted_detectors"] == [["nvsentinel"], ["agent", "dcgm"]]
    trusted = api.post(_detector(requested_by="dcgm"), actor="dcgm").json()
    untrusted = api.post(_detector("n02"), actor="nvsentinel").json()
    assert (trusted["state"], trusted["rule"]) == ("approved", "auto:detector:dcgm")
    assert (untrusted["state"], untrusted["rule"]) == ("pending_approval", "detector-untrusted")


def test_a_detector_request_over_the_budget_is_refused(api: Api) -> None:
    assert api.post(_detector("n01", "r-1")).status_code == 201
    assert api.post(_detector("n02", "r-2")).status_code == 201

    refused = api.post(_detector("n03", "r-3"))

    detail = _problem(refused, 409, "budget_exceeded")
    assert "budget" in detail and "2 repair(s) in progress, budget 2" in detail
    assert api.store.list_repairs(cluster=CLUSTER, node=NodeName("n03")) == []
    [event] = api.audit(AuditKind.REPAIR_REQUEST_REFUSED)
    assert (event.payload["rule"], event.payload["request_id"]) == ("budget", "r-3")


def test_a_detector_request_over_the_hourly_cap_is_refused(api: Api) -> None:
    put = api.http.put(
        "/api/v1/policy/repair",
        json={
            "detector_cap_per_hour": 1,
            "max_concurrent_fraction": 0.5,
            "trusted_detectors": ["nvsentinel"],
        },
        headers=api.as_("alice"),
    )
    assert put.status_code == 200, put.text
    assert api.post(_detector("n01", "r-1")).status_code == 201

    detail = _problem(api.post(_detector("n02", "r-2")), 409, "budget_exceeded")

    assert detail.startswith("detector-cap:") and "cap 1 per cluster" in detail
    api.clock.advance(3601)
    assert api.post(_detector("n02", "r-2")).status_code == 201, "the cap is per hour"


def test_a_detector_request_with_the_breaker_tripped_is_refused(api: Api) -> None:
    now = api.clock.now()
    tripped = Breaker(CLUSTER, tripped=True, tripped_at=now, reason="4 nodes rebooted in 10 min")
    api.store.set_breaker(tripped, expected_tripped=False)

    detail = _problem(api.post(_detector()), 409, "budget_exceeded")

    assert "breaker" in detail and "4 nodes rebooted in 10 min" in detail
    assert api.store.list_repairs(cluster=CLUSTER) == []


def test_a_detector_request_in_cooldown_is_refused(api: Api) -> None:
    first = api.post(_detector()).json()
    api.walk(first["id"], S.CORDONED, S.DRAINING, S.EXECUTING, S.REJOINING, S.DONE)

    detail = _problem(api.post(_detector(request_id="r-2")), 409, "budget_exceeded")

    assert detail.startswith("cooldown:") and f"repair {first['id']}" in detail


def test_a_detector_must_name_a_request_id_and_never_removes(api: Api) -> None:
    detail = _problem(api.post(_detector(request_id=None)), 422, "invalid_input")
    assert "request id" in detail
    detail = _problem(api.post(_detector(action="remove")), 403, "policy_violation")
    assert "removal" in detail
    assert api.store.list_repairs(cluster=CLUSTER) == []
    rules = [e.payload["rule"] for e in api.audit(AuditKind.REPAIR_REQUEST_REFUSED)]
    assert rules == ["invalid-request", "remove-human-only"]


def test_an_open_repair_on_the_node_is_a_conflict(api: Api) -> None:
    assert api.post(_detector()).status_code == 201

    detail = _problem(api.post(_detector(request_id="r-2", check="nvlink")), 409, "conflict")

    assert "is open on n01" in detail


# --- people --------------------------------------------------------------------------------------
def test_a_request_without_a_firing_alert_is_refused(api: Api) -> None:
    detail = _problem(api.post(_person(alert_keys=[]), actor="user:alice"), 422, "invalid_input")
    assert "no alert named as evidence" in detail
    detail = _problem(api.post(_person(), actor="user:alice"), 422, "invalid_input")
    assert "xid:79" in detail and "is firing on n05" in detail
    [_, event] = api.audit(AuditKind.REPAIR_REQUEST_REFUSED)
    assert event.payload["rule"] == "evidence" and event.payload["requester_kind"] == "user"


def test_a_person_request_waits_for_approval_and_is_approved_with_another_action(
    api: Api,
) -> None:
    api.fire("n05")
    created = api.post(_person(), actor="user:alice")
    assert created.status_code == 201, created.text
    repair = created.json()
    assert (repair["state"], repair["rule"], repair["approved_by"]) == (
        "pending_approval",
        "approval-required",
        None,
    )
    assert repair["request_id"] is None and repair["requested_by"] == "alice"
    api.clock.advance(60)

    approved = api.decide(repair["id"], "approve", header="user:bob", action="reset_gpu")

    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert (body["state"], body["action"], body["approved_by"]) == ("approved", "reset_gpu", "bob")
    assert body["wait_deadline"] is not None
    [event] = api.audit(AuditKind.REPAIR_APPROVED)
    assert event.payload["by"] == "user:bob" and event.payload["previous_action"] == "reboot"
    assert event.action == "reset_gpu" and event.time == api.clock.now()
    again = api.decide(repair["id"], "approve", header="user:bob")
    assert again.status_code == 200 and again.json() == body, "the same approval is a no-op"
    detail = _problem(api.decide(repair["id"], "approve", header="user:carol"), 409, "conflict")
    assert "approved by bob" in detail
    # people's requests and decisions are counted like the engine's moves, a repeat is not
    counted = _repairs_total(api)
    assert counted[("reboot", "pending_approval")] == 1
    assert counted[("reset_gpu", "approved")] == 1


def _repairs_total(api: Api) -> dict[tuple[str, str], float]:
    """``medic_repairs_total`` of the API's ``/metrics``, by (action, state)."""
    found: dict[tuple[str, str], float] = {}
    for line in api.http.get("/metrics").text.splitlines():
        match = re.match(r"^medic_repairs_total\{(.*)\} (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match[1]))
            found[(labels["action"], labels["state"])] = float(match[2])
    return found


def test_the_policy_approves_a_person_request_but_never_a_removal(api: Api) -> None:
    api.fire("n05")
    api.fire("n06")
    policy = {"auto_actions": ["reboot"], "actor": "alice"}
    put = api.http.put("/api/v1/policy/repair", json=policy, headers=api.as_("alice"))
    assert put.status_code == 200, put.text

    auto = api.post(_person(), actor="alice").json()
    remove = api.post(_person("n06", action="remove"), actor="alice").json()

    assert (auto["state"], auto["approved_by"], auto["rule"]) == (
        "approved",
        "auto",
        "auto:action:reboot",
    )
    assert (remove["state"], remove["rule"]) == ("pending_approval", "remove-human-only")
    approved = api.decide(remove["id"], "approve", header="user:bob")
    assert approved.status_code == 200 and approved.json()["action"] == "remove"


def test_reject(api: Api) -> None:
    api.fire("n05")
    repair = api.post(_person(), actor="user:alice").json()

    rejected = api.decide(repair["id"], "reject", header="user:bob", reason="not now")

    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["state"] == "rejected"
    assert rejected.json()["error"] == "rejected by user:bob: not now"
    [event] = api.audit(AuditKind.REPAIR_REJECTED)
    assert (event.payload["by"], event.payload["reason"]) == ("user:bob", "not now")
    _problem(api.decide(repair["id"], "approve", header="user:bob"), 409, "conflict")


def test_cancel_until_the_repair_executes(api: Api) -> None:
    early = api.post(_detector("n01", "r-1")).json()
    late = api.post(_detector("n02", "r-2")).json()
    api.walk(early["id"], S.CORDONED)
    api.walk(late["id"], S.CORDONED, S.DRAINING, S.EXECUTING)

    cancelled = api.decide(early["id"], "cancel", reason="wrong node")
    refused = api.decide(late["id"], "cancel")

    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert "can no longer be cancelled" in _problem(refused, 409, "conflict")
    late_now = api.store.get_repair(late["id"])
    assert late_now is not None and late_now.state is S.EXECUTING
    [event] = api.audit(AuditKind.REPAIR_CANCELLED)
    assert (event.payload["previous_state"], event.payload["by"]) == ("cordoned", "user:alice")


def test_a_detector_never_acts_as_a_person(api: Api) -> None:
    api.fire("n05")
    repair = api.post(_person(), actor="user:alice").json()

    as_detector = api.decide(repair["id"], "approve", header="detector:nvsentinel")
    cancel_as_detector = api.decide(repair["id"], "cancel", header="nvsentinel")

    for response in (as_detector, cancel_as_detector):
        assert "needs role" in _problem(response, 403, "forbidden")
    impersonation = api.post(
        _person("n05", requested_by="alice", requester_kind="user"), actor="nvsentinel"
    )
    assert "acts only as its own token" in _problem(impersonation, 403, "forbidden")
    still = api.store.get_repair(repair["id"])
    assert still is not None and still.state is S.PENDING_APPROVAL


def test_a_body_can_only_name_the_tokens_own_identity(api: Api) -> None:
    api.fire("n05")
    repair = api.post(_person(), actor="user:alice").json()

    claims = [
        {"actor": "nvsentinel", "actor_kind": "detector"},
        {"actor_kind": "detector"},
        {"actor": "detector:nvsentinel"},
        {"actor": "agent:n05"},
        {"actor": "alice"},
        {"actor": "user:carol"},
        {"actor": "auto"},
    ]
    for claim in claims:
        response = api.decide(repair["id"], "approve", header="bob", **claim)
        assert "acts only as its own token" in _problem(response, 403, "forbidden"), claim
    _problem(api.decide(repair["id"], "approve", header=None), 401, "unauthenticated")
    still = api.store.get_repair(repair["id"])
    assert still is not None and still.state is S.PENDING_APPROVAL

    denied = api.store.query_audit(kind=AuditKind.ACCESS_DENIED, limit=100)
    assert [e.payload["principal"] for e in denied] == ["bob"] * len(claims) + ["anonymous"]
    assert all(e.payload["path"] == f"/api/v1/repairs/{repair['id']}/approve" for e in denied)

    own = api.decide(repair["id"], "approve", header="bob", actor="user:bob", actor_kind="user")
    assert own.status_code == 200 and own.json()["approved_by"] == "bob"


def test_change_the_action_of_a_pending_repair(api: Api) -> None:
    api.fire("n05")
    repair = api.post(_person(), actor="user:alice").json()

    changed = api.http.put(
        f"/api/v1/repairs/{repair['id']}/action",
        json={"action": "reset_gpu", "actor": "bob"},
        headers=api.as_("bob"),
    )

    assert changed.status_code == 200, changed.text
    assert (changed.json()["action"], changed.json()["state"]) == ("reset_gpu", "pending_approval")
    [event] = api.audit(AuditKind.REPAIR_ACTION_CHANGED)
    assert (event.payload["by"], event.payload["previous_action"]) == ("user:bob", "reboot")


def test_each_decision_is_audited_as_the_person_who_made_it(api: Api) -> None:
    for node in ("n05", "n06", "n07"):
        api.fire(node)
    asked = [api.post(_person(node), actor="user:alice").json() for node in ("n05", "n06", "n07")]
    api.store.set_breaker(
        Breaker(CLUSTER, tripped=True, tripped_at=api.clock.now(), reason="test"),
        expected_tripped=False,
    )

    answers = [
        api.decide(asked[0]["id"], "approve", header="user:bob"),
        api.decide(asked[1]["id"], "reject", header="user:carol"),
        api.decide(asked[2]["id"], "cancel", header="user:bob"),
        api.http.put(
            "/api/v1/policy/repair", json={"cooldown_seconds": 60}, headers=api.as_("alice")
        ),
        api.http.post("/api/v1/breaker/reset", json={}, headers=api.as_("carol")),
        api.http.put("/api/v1/policy/modes", json={"mode": "observe"}, headers=api.as_("bob")),
    ]

    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    actors = {e.kind: e.actor for e in api.store.query_audit(cluster=CLUSTER, limit=1000)}
    assert {k: v for k, v in actors.items() if v != "medic-engine"} == {
        AuditKind.REPAIR_APPROVED: "user:bob",
        AuditKind.REPAIR_REJECTED: "user:carol",
        AuditKind.REPAIR_CANCELLED: "user:bob",
        AuditKind.REPAIR_POLICY_CHANGED: "user:alice",
        AuditKind.BREAKER_RESET: "user:carol",
        AuditKind.MODE_CHANGED: "user:bob",
    }, "a person's decision is theirs, never the engine's"
    assert actors[AuditKind.REPAIR_REQUESTED] == "medic-engine", "the engine admits a request"
    # the audit search (and the console's, which reads it) finds a person's decisions by name
    page = api.http.get("/api/v1/audit", params={"actor": "user:bob"}).json()
    assert [e["kind"] for e in page["events"]] == [
        "repair-approved",
        "repair-cancelled",
        "mode-changed",
    ]


# --- reading -------------------------------------------------------------------------------------
def test_list_and_get_with_validations(api: Api) -> None:
    api.fire("n05")
    detector = api.post(_detector()).json()
    person = api.post(_person(), actor="alice").json()
    api.store.add_validation(
        ValidationResult(
            repair_id=detector["id"],
            node=NodeName("n01"),
            outcome=ValidationOutcome.PASS,
            tests=(("dcgmi diag -r 3", True, "all passed"),),
            time=api.clock.now(),
        )
    )

    every = api.http.get("/api/v1/repairs", params={"cluster": CLUSTER}).json()
    pending = api.http.get("/api/v1/repairs", params={"state": "pending_approval"}).json()
    both = api.http.get(
        "/api/v1/repairs", params=[("state", "approved"), ("state", "pending_approval")]
    )
    on_n01 = api.http.get("/api/v1/repairs", params={"node": "n01"}).json()
    one = api.http.get(f"/api/v1/repairs/{detector['id']}").json()

    assert [r["id"] for r in every] == [detector["id"], person["id"]]
    assert [r["id"] for r in pending] == [person["id"]]
    assert len(both.json()) == 2
    assert [r["id"] for r in on_n01] == [detector["id"]]
    assert one["validations"] == [
        {
            "outcome": "pass",
            "time": one["validations"][0]["time"],
            "ticket": None,
            "tests": [{"name": "dcgmi diag -r 3", "passed": True, "log": "all passed"}],
        }
    ]
    _problem(api.http.get("/api/v1/repairs/99999"), 404, "not_found")
    _problem(api.http.get("/api/v1/repairs", params={"state": "burning"}), 422, "invalid_request")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"node": "n99"}, "node"),
        ({"cluster": "elsewhere"}, "cluster"),
        ({"action": "explode"}, "body.action"),
        ({"node": "bad node"}, "body.node"),
        ({"reason": ""}, "body.reason"),
        ({"alert_keys": ["Bad Key"]}, "body.alert_keys"),
        ({"extra": 1}, "body.extra"),
        ({"requester_kind": "medic"}, "body.requester_kind"),
    ],
)
def test_malformed_requests_are_422(api: Api, overrides: dict[str, Any], field: str) -> None:
    response = api.post(_detector(**overrides))
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]


# --- policy and breaker --------------------------------------------------------------------------
def test_policy_round_trip(api: Api) -> None:
    defaults = api.http.get("/api/v1/policy/repair").json()
    assert defaults["cluster"] == CLUSTER and defaults["max_wait_seconds"] == 7200.0
    document = {
        **{k: v for k, v in defaults.items() if k != "cluster"},
        "auto_actions": ["reset_gpu", "reboot"],
        "auto_xids": [79, 48],
        "wait_mode": "never_interrupt",
        "max_wait_seconds": 86_400.0,
        "persistence_overrides": {"xid:*": 30.0},
        "detector_cap_per_hour": 5,
    }

    put = api.http.put(
        "/api/v1/policy/repair",
        params={"cluster": CLUSTER},
        json=document,
        headers=api.as_("alice"),
    )
    got = api.http.get("/api/v1/policy/repair", params={"cluster": CLUSTER}).json()

    assert put.status_code == 200, put.text
    assert got == put.json()
    assert got["auto_actions"] == ["reboot", "reset_gpu"] and got["auto_xids"] == [48, 79]
    assert {k: v for k, v in got.items() if k != "cluster"} == {
        **document,
        "auto_actions": ["reboot", "reset_gpu"],
        "auto_xids": [48, 79],
    }
    [event] = api.audit(AuditKind.REPAIR_POLICY_CHANGED)
    assert event.payload["by"] == "user:alice"
    assert event.payload["changed"]["detector_cap_per_hour"] == [50, 5]
    other = api.http.get("/api/v1/policy/repair", params={"cluster": "c2"}).json()
    assert other["auto_actions"] == [], "policies are per cluster"


@pytest.mark.parametrize(
    ("document", "code", "field"),
    [
        # ranges and key patterns the schema states: refused as the schema's (invalid_request)
        ({"max_wait_seconds": 86_401}, "invalid_request", "max_wait_seconds"),
        ({"max_wait_seconds": -1}, "invalid_request", "max_wait_seconds"),
        ({"breaker_fraction": 1.5}, "invalid_request", "breaker_fraction"),
        ({"max_concurrent_fraction": 0}, "invalid_request", "max_concurrent_fraction"),
        ({"breaker_window_seconds": 0}, "invalid_request", "breaker_window_seconds"),
        ({"detector_cap_per_hour": -1}, "invalid_request", "detector_cap_per_hour"),
        ({"persistence_overrides": {"Bad Key": 1}}, "invalid_request", "persistence_overrides"),
        ({"persistence_overrides": {"xid:*": 1e9}}, "invalid_request", "persistence_overrides"),
        # listed in the schema, refused by check_policy
        ({"auto_actions": ["remove"]}, "invalid_input", "auto_actions"),
        ({"auto_xids": [99999]}, "invalid_input", "auto_xids"),
        ({"auto_actions": ["explode"]}, "invalid_request", "auto_actions"),
        ({"trusted_detectors": ["bad name"]}, "invalid_request", "trusted_detectors"),
        ({"trusted_detectors": ["detector:dcgm"]}, "invalid_input", "trusted_detectors"),
        ({"wait_mode": "forever"}, "invalid_request", "wait_mode"),
        ({"surprise": True}, "invalid_request", "surprise"),
    ],
)
def test_policy_validation(api: Api, document: dict[str, Any], code: str, field: str) -> None:
    response = api.http.put("/api/v1/policy/repair", json=document, headers=api.as_("alice"))

    assert field in _problem(response, 422, code)
    assert api.audit(AuditKind.REPAIR_POLICY_CHANGED) == []


def test_only_an_admin_changes_the_policy(api: Api) -> None:
    for who in ("nvsentinel", "bob", "watcher"):
        response = api.http.put("/api/v1/policy/repair", json={}, headers=api.as_(who))
        _problem(response, 403, "forbidden")
    assert api.audit(AuditKind.REPAIR_POLICY_CHANGED) == []


def test_breaker_reset_is_audited(api: Api) -> None:
    closed = api.http.get("/api/v1/breaker").json()
    assert closed["tripped"] is False and closed["cluster"] == CLUSTER
    tripped_at = api.clock.now()
    api.store.set_breaker(
        Breaker(CLUSTER, tripped=True, tripped_at=tripped_at, reason="5 of 40 nodes rebooted"),
        expected_tripped=False,
    )
    api.clock.advance(120)

    by_detector = api.http.post(
        "/api/v1/breaker/reset", json={}, headers=api.as_("detector:nvsentinel")
    )
    reset = api.http.post(
        "/api/v1/breaker/reset",
        json={"cluster": CLUSTER, "actor": "alice", "reason": "cooling fixed"},
        headers=api.as_("alice"),
    )
    twice = api.http.post("/api/v1/breaker/reset", json={}, headers=api.as_("alice"))

    _problem(by_detector, 403, "forbidden")
    assert reset.status_code == 200, reset.text
    body = reset.json()
    assert (body["tripped"], body["reset_by"]) == (False, "alice")
    assert body["reason"] == "5 of 40 nodes rebooted", "the last trip's reason stays readable"
    assert twice.status_code == 200 and twice.json() == body
    [event] = api.audit(AuditKind.BREAKER_RESET)
    assert event.payload["by"] == "user:alice" and event.payload["reason"] == "cooling fixed"
    assert event.subject_id == CLUSTER and event.time == tripped_at + timedelta(seconds=120)
    assert api.http.get("/api/v1/breaker").json() == body
    assert api.post(_detector()).status_code == 201, "detector requests flow again"


# --- the state gauges of /metrics (deploy/prometheus/medic-rules.yaml reads them) ---------------
def _gauges(api: Api) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in api.http.get("/metrics").text.splitlines():
        match = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
            found[(match[1], labels)] = float(match[3])
    return found


def test_metrics_show_open_repairs_the_approval_wait_the_breaker_and_the_nodes(api: Api) -> None:
    c = ("cluster", CLUSTER)
    api.fire("n05")
    created = api.post(_person(), actor="user:alice")
    assert created.status_code == 201, created.text
    api.clock.advance(90)
    g = _gauges(api)
    assert g[("medic_state_up", frozenset())] == 1.0
    assert g[("medic_repairs_open", frozenset({c, ("state", "pending_approval")}))] == 1.0
    assert g[("medic_repairs_open", frozenset({c, ("state", "approved")}))] == 0.0
    assert g[("medic_repair_approval_wait_seconds", frozenset({c}))] == 90.0
    assert g[("medic_breaker_tripped", frozenset({c}))] == 0.0
    nodes = {dict(k[1])["health"]: v for k, v in g.items() if k[0] == "medic_nodes"}
    assert nodes == {"healthy": NODES, "degraded": 0, "under_repair": 0, "out_of_service": 0}
    assert sum(v for k, v in g.items() if k[0] == "medic_jobs") == 0
    # Approved: nobody waits any more; the breaker tripped shows.
    assert api.decide(created.json()["id"], "approve", header="user:bob").status_code == 200
    api.store.set_breaker(
        Breaker(CLUSTER, tripped=True, tripped_at=api.clock.now(), reason="test"),
        expected_tripped=False,
    )
    # The watchdog's releases of the last hour, from the audit trail (not an engine's release,
    # not one two hours old).
    for key, age in (
        ("watchdog/a1/g1/release", 60),
        ("a2/g1/release", 60),
        ("watchdog/a3/g1/release", 7200),
    ):
        api.store.append_audit(
            AuditEvent(
                time=api.clock.now() - timedelta(seconds=age),
                actor="controller:c1",
                kind=AuditKind.ACTION_SUCCEEDED,
                subject_type=SubjectType.JOB,
                subject_id="42",
                cluster=CLUSTER,
                action="release",
                payload={"key": key, "component": "medic-watchdog"},
            )
        )
    g = _gauges(api)
    assert g[("medic_repair_approval_wait_seconds", frozenset({c}))] == 0.0
    assert g[("medic_repairs_open", frozenset({c, ("state", "approved")}))] == 1.0
    assert g[("medic_breaker_tripped", frozenset({c}))] == 1.0
    assert g[("medic_watchdog_releases", frozenset({c}))] == 1.0


def test_metrics_answer_when_the_store_does_not(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*_: Any, **__: Any) -> Any:
        raise RuntimeError("connection refused")

    monkeypatch.setattr(api.services.store, "list_jobs", down)
    response = api.http.get("/metrics")
    assert response.status_code == 200
    g = _gauges(api)
    assert g[("medic_state_up", frozenset())] == 0.0
    assert not any(k[0] == "medic_repairs_open" for k in g)
    assert any(k[0] == "medic_loop_pass_seconds_count" for k in g)
