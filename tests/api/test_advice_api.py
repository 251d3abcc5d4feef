"""The advisor API over real HTTP (uvicorn on 127.0.0.1, SQLite store, FakeClock), and how its
client, :class:`~medic.remote.MedicApiClient`, turns HTTP outcomes into medic errors."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from medic.api.advice import router as advice_router
from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.advice import Advice, AdviceAction, AdviceRequest, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import Role
from medic.domain.cluster import Mode
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.errors import ConflictError, NotFoundError, PermanentError, TransientError
from medic.remote import MedicApiClient
from medic.services import Services
from medic.testing import FakeClock, LiveServer
from medic.wiring import build

from .auth_kit import bearer, grant

PROBLEM_JSON = "application/problem+json"
CLUSTER = ClusterName("c1")
CONTROLLER = "slurm-a"
"""The controller token's name: its audit events are written as ``controller:slurm-a``."""


@dataclass
class Api:
    services: Services
    clock: FakeClock
    url: str
    http: httpx.Client
    client: MedicApiClient
    jobs: Iterator[int]

    def publish(self, *, exclude: str = "node003", attempt: int = 0) -> Advice:
        """Advice for a fresh job (or a new generation when ``attempt`` changes for the same)."""
        job = JobId(f"j{next(self.jobs)}")
        return self.republish(job, exclude=exclude, attempt=attempt)

    def republish(
        self,
        job: JobId,
        *,
        exclude: str = "node003",
        attempt: int = 0,
        repair_id: int | None = None,
    ) -> Advice:
        request = AdviceRequest(
            cluster=CLUSTER,
            job_id=job,
            attempt=attempt,
            action=AdviceAction.REQUEUE,
            exclude_nodes=frozenset({NodeName(exclude)}),
            reason="test",
            mode=Mode.ACT,
            rule="test",
            repair_id=repair_id,
        )
        return self.services.store.publish_advice(request, self.clock.now())


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    db = tmp_path_factory.mktemp("advice-api") / "medic.db"
    clock = FakeClock()
    settings = load_settings(
        env={}, overrides={"store.url": f"sqlite:///{db}", "scheduler.cluster": CLUSTER}
    )
    services = build(settings, clock=clock)
    app = create_app(services)
    if not any(getattr(r, "path", None) == "/api/v1/actions" for r in app.routes):
        app.include_router(advice_router)  # until create_app includes the advice router
    server = LiveServer(app).start()
    url = server.url
    token = grant(services.store, Role.CONTROLLER, CONTROLLER)
    http = httpx.Client(base_url=url, timeout=5.0, headers=bearer(token))
    client = MedicApiClient(url, timeout=5.0, token=token)
    yield Api(services, clock, url, http, client, itertools.count(1))
    client.close()
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


# --- advice and reconciliation -------------------------------------------------------------------
def test_get_advice(api: Api) -> None:
    advice = api.publish()
    body = api.http.get(f"/api/v1/advice/{advice.id}").json()
    assert (body["id"], body["job_id"], body["generation"]) == (advice.id, advice.job_id, 1)
    assert body["exclude_nodes"] == ["node003"] and body["active"] is True
    _problem(api.http.get("/api/v1/advice/99999"), 404, "not_found")
    _problem(api.http.get("/api/v1/advice/0"), 422, "invalid_request")


def test_advice_names_the_repair_that_owns_it(api: Api) -> None:
    own = api.publish()
    evacuation = api.republish(own.job_id, repair_id=42)  # a repair moves the job off its node
    assert (evacuation.generation, evacuation.repair_id) == (2, 42)
    assert api.http.get(f"/api/v1/advice/{own.id}").json()["repair_id"] == 42
    feed = api.http.get("/api/v1/advice", params={"cluster": CLUSTER, "active": "true"}).json()
    assert {a["id"]: a["repair_id"] for a in feed}[own.id] == 42
    assert api.client.get_advice(own.id) == evacuation
    assert [a.repair_id for a in api.client.list_active_advice(CLUSTER) if a.id == own.id] == [42]
    other = api.publish()
    assert api.http.get(f"/api/v1/advice/{other.id}").json()["repair_id"] is None
    assert api.client.get_advice(other.id) == other


def test_reconciliation_report_is_idempotent(api: Api) -> None:
    advice = api.publish()
    report = {"observed_generation": 1, "status": "converged", "reason": "desired state observed"}
    url = f"/api/v1/advice/{advice.id}/reconciliation"

    first = api.http.put(url, json=report)
    api.clock.advance(5)
    second = api.http.put(url, json=report)

    assert first.status_code == second.status_code == 200
    assert first.json() == second.json(), "the same report twice must change nothing"
    assert first.json()["status"] == "converged" and first.json()["active"] is False
    stored = api.services.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.CONVERGED


def test_report_on_a_superseded_generation_is_a_conflict_naming_the_current_one(api: Api) -> None:
    advice = api.publish()
    newer = api.republish(advice.job_id, exclude="node004")
    assert newer.generation == 2
    url = f"/api/v1/advice/{advice.id}/reconciliation"

    stale = api.http.put(url, json={"observed_generation": 1, "status": "converged", "reason": "x"})

    detail = _problem(stale, 409, "conflict")
    assert "current generation is 2" in detail
    stored = api.services.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.PENDING
    unpublished = {"observed_generation": 3, "status": "converged", "reason": "x"}
    assert "never published" in _problem(api.http.put(url, json=unpublished), 422, "invalid_input")


@pytest.mark.parametrize(
    "body",
    [
        {"observed_generation": 1, "status": "done", "reason": "x"},
        {"observed_generation": 0, "status": "converged", "reason": "x"},
        {"observed_generation": 1, "status": "converged", "reason": ""},
        {"observed_generation": 1, "status": "converged", "reason": "x" * 1001},
        {"observed_generation": 1, "status": "converged"},
        {"observed_generation": 1, "status": "converged", "reason": "x", "extra": 1},
        {"observed_generation": "one", "status": "converged", "reason": "x"},
    ],
    ids=["status", "generation-0", "empty-reason", "long-reason", "no-reason", "extra", "type"],
)
def test_bad_reconciliation_reports_are_422(api: Api, body: dict[str, Any]) -> None:
    advice = api.publish()
    response = api.http.put(f"/api/v1/advice/{advice.id}/reconciliation", json=body)
    _problem(response, 422, "invalid_request")


def test_report_on_unknown_advice_is_404(api: Api) -> None:
    body = {"observed_generation": 1, "status": "converged", "reason": "x"}
    _problem(api.http.put("/api/v1/advice/424242/reconciliation", json=body), 404, "not_found")


# --- step ledger --------------------------------------------------------------------------------
def _begin(advice: Advice, kind: str = "requeue_hold") -> dict[str, Any]:
    return {
        "key": f"advice/{advice.id}/g{advice.generation}/{kind}",
        "cluster": advice.cluster,
        "kind": kind,
        "job_id": advice.job_id,
        "advice_id": advice.id,
    }


def test_begin_get_and_finish_a_step(api: Api) -> None:
    advice = api.publish()
    body = _begin(advice)
    key = body["key"]

    begun_at = api.clock.now()
    created = api.http.post("/api/v1/actions", json=body)
    api.clock.advance(1)
    again = api.http.post("/api/v1/actions", json=body)

    assert created.status_code == 201 and again.status_code == 200
    assert created.json() == again.json(), "the existing record comes back unchanged"
    record = created.json()
    assert record["status"] == "started" and record["cluster"] == CLUSTER
    assert datetime.fromisoformat(record["started_at"]) == begun_at, "stamped by the server"
    assert api.http.get(f"/api/v1/actions/{key}").json() == record

    finished = api.http.put(f"/api/v1/actions/{key}", json={"status": "succeeded"})
    assert finished.status_code == 200
    assert finished.json()["status"] == "succeeded"
    assert datetime.fromisoformat(finished.json()["finished_at"]) == api.clock.now()
    [stored] = [a for a in api.services.store.list_actions(CLUSTER) if a.key == key]
    assert stored.status is ActionStatus.SUCCEEDED


def test_step_ledger_errors(api: Api) -> None:
    advice = api.publish()
    other = api.publish()
    key = _begin(advice)["key"]
    _problem(api.http.get("/api/v1/actions/advice/999/g1/release"), 404, "not_found")
    _problem(
        api.http.put("/api/v1/actions/advice/999/g1/release", json={"status": "failed"}),
        404,
        "not_found",
    )
    api.http.post("/api/v1/actions", json=_begin(advice))
    _problem(
        api.http.put(f"/api/v1/actions/{key}", json={"status": "started"}), 422, "invalid_request"
    )
    mismatch = {**_begin(advice), "job_id": other.job_id}
    assert "is for job" in _problem(
        api.http.post("/api/v1/actions", json=mismatch), 422, "invalid_input"
    )
    _problem(
        api.http.post("/api/v1/actions", json={**_begin(advice), "advice_id": 999_999}),
        404,
        "not_found",
    )
    for bad in ({"key": "has space"}, {"kind": "reboot"}, {"cluster": ""}, {"key": "k" * 257}):
        response = api.http.post("/api/v1/actions", json={**_begin(advice), **bad})
        _problem(response, 422, "invalid_request")


# --- audit --------------------------------------------------------------------------------------
def _event(**extra: Any) -> dict[str, Any]:
    return {
        "actor": "medic-controller",
        "kind": "action-started",
        "subject_type": "job",
        "subject_id": "j1",
        "cluster": CLUSTER,
        "action": "requeue_hold",
        "mode": "act",
        "payload": {"advice_id": 1, "generation": 1, "key": "advice/1/g1/requeue_hold"},
        **extra,
    }


def test_audit_events_get_the_servers_time_and_the_tokens_controller_actor(api: Api) -> None:
    api.clock.advance(3)
    created = api.http.post("/api/v1/audit", json=_event())
    assert created.status_code == 201
    body = created.json()
    assert body["actor"] == f"controller:{CONTROLLER}", "the token names the actor"
    assert body["payload"]["component"] == "medic-controller", "the body's actor is kept"
    assert datetime.fromisoformat(body["time"]) == api.clock.now()
    [stored] = api.services.store.query_audit(
        actor=f"controller:{CONTROLLER}", after_id=body["id"] - 1
    )
    assert (
        stored.kind is AuditKind.ACTION_STARTED
        and stored.payload["key"] == "advice/1/g1/requeue_hold"
    )
    elsewhere = api.http.post("/api/v1/audit", json=_event(actor="controller:elsewhere")).json()
    assert elsewhere["actor"] == f"controller:{CONTROLLER}", "no writing as another controller"
    assert elsewhere["payload"]["component"] == "elsewhere"
    itself = api.http.post("/api/v1/audit", json=_event(actor=CONTROLLER)).json()
    assert itself["actor"] == f"controller:{CONTROLLER}" and "component" not in itself["payload"]


@pytest.mark.parametrize(
    "extra",
    [
        {"kind": "verdict"},
        {"kind": "advice"},
        {"kind": "nonsense"},
        {"subject_type": "rack"},
        {"actor": "has space"},
        {"actor": ""},
        {"payload": {"blob": "x" * 20_000}},
        {"time": "2020-01-01T00:00:00Z"},
    ],
    ids=[
        "verdict",
        "advice",
        "unknown-kind",
        "subject",
        "actor-space",
        "actor-empty",
        "big",
        "time",
    ],
)
def test_bad_audit_events_are_422(api: Api, extra: dict[str, Any]) -> None:
    _problem(api.http.post("/api/v1/audit", json=_event(**extra)), 422, "invalid_request")


# --- the client ---------------------------------------------------------------------------------
def test_client_round_trips_the_ledger(api: Api) -> None:
    advice = api.publish()
    client = api.client
    assert client.get_advice(advice.id) == api.services.store.get_advice(advice.id)
    assert client.get_advice(AdviceId(777_777)) is None
    assert advice in client.list_active_advice(CLUSTER)
    assert client.list_active_advice(ClusterName("elsewhere")) == []

    key = f"advice/{advice.id}/g1/requeue_hold"
    record = ActionRecord(
        key=key,
        cluster=CLUSTER,
        kind=ActionKind.REQUEUE_HOLD,
        status=ActionStatus.STARTED,
        job_id=advice.job_id,
        node=None,
        advice_id=advice.id,
        started_at=api.clock.now(),
    )
    assert client.get_action(key) is None
    assert client.begin_action(record) is True
    assert client.begin_action(record) is False
    client.finish_action(key, ActionStatus.FAILED, api.clock.now(), "boom")
    fetched = client.get_action(key)
    assert fetched is not None
    assert (fetched.status, fetched.error, fetched.kind) == (
        ActionStatus.FAILED,
        "boom",
        record.kind,
    )
    assert fetched == api.services.store.get_action(key)
    event_id = client.append_audit(
        AuditEvent(
            time=api.clock.now(),
            actor="medic-controller",
            kind=AuditKind.ACTION_FAILED,
            subject_type=SubjectType.JOB,
            subject_id=advice.job_id,
            cluster=CLUSTER,
            action="requeue_hold",
            mode=Mode.ACT,
            payload={"key": key, "error": "boom"},
        )
    )
    [stored] = api.services.store.query_audit(after_id=event_id - 1, limit=1)
    assert stored.id == event_id and stored.actor == f"controller:{CONTROLLER}"
    assert stored.payload["component"] == "medic-controller"

    reported = client.report_reconciliation(
        advice.id, 1, Reconciliation.ABANDONED, "test", api.clock.now()
    )
    assert reported.status is Reconciliation.ABANDONED
    assert reported == api.services.store.get_advice(advice.id)


def test_client_maps_4xx_answers_to_medic_errors(api: Api) -> None:
    client = api.client
    advice = api.publish()
    api.republish(advice.job_id, exclude="node005")
    now = api.clock.now()
    with pytest.raises(ConflictError, match="current generation is 2"):
        client.report_reconciliation(advice.id, 1, Reconciliation.CONVERGED, "x", now)
    with pytest.raises(NotFoundError):
        client.report_reconciliation(AdviceId(888_888), 1, Reconciliation.CONVERGED, "x", now)
    with pytest.raises(PermanentError, match="never published") as info:
        client.report_reconciliation(advice.id, 9, Reconciliation.CONVERGED, "x", now)
    assert not isinstance(info.value, NotFoundError)
    with pytest.raises(NotFoundError):
        client.finish_action("advice/1/g99/release", ActionStatus.SUCCEEDED, now)


def test_client_reports_an_unreachable_api_as_transient() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with MedicApiClient(f"http://127.0.0.1:{port}", timeout=2.0) as client:
        with pytest.raises(TransientError):
            client.list_active_advice(CLUSTER)
        with pytest.raises(TransientError):
            client.get_action("advice/1/g1/release")


def _scripted(handler: Any) -> MedicApiClient:
    return MedicApiClient("http://medic.test", transport=httpx.MockTransport(handler))


def _problem_body(status: int, detail: str) -> httpx.Response:
    body = {"title": "t", "status": status, "code": "c", "detail": detail}
    return httpx.Response(status, json=body, headers={"content-type": PROBLEM_JSON})


@pytest.mark.parametrize(
    ("response", "error", "text"),
    [
        (_problem_body(500, "boom"), TransientError, "500 boom"),
        (httpx.Response(502, text="<html>bad gateway</html>"), TransientError, "bad gateway"),
        (_problem_body(503, "store down"), TransientError, "store down"),
        (_problem_body(400, "what to fix"), PermanentError, "what to fix"),
        (_problem_body(401, "who are you"), TransientError, "who are you"),
        (_problem_body(403, "not a controller"), TransientError, "not a controller"),
        (_problem_body(409, "superseded"), ConflictError, "superseded"),
        (_problem_body(404, "gone"), NotFoundError, "gone"),
        (httpx.Response(200, text="not json"), TransientError, "not JSON"),
        (httpx.Response(200, json={"unexpected": True}), TransientError, "unexpected advice"),
    ],
    ids=["500", "502-html", "503", "400", "401", "403", "409", "404", "not-json", "wrong-shape"],
)
def test_client_maps_http_outcomes(
    response: httpx.Response, error: type[Exception], text: str
) -> None:
    with _scripted(lambda _request: response) as client, pytest.raises(error, match=text):
        client.report_reconciliation(AdviceId(1), 1, Reconciliation.PENDING, "x", datetime.now())


def test_client_sends_its_token_as_a_bearer_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[])

    transport = httpx.MockTransport(handler)
    with MedicApiClient("http://medic.test", token="medic_s3cret", transport=transport) as client:
        assert client.list_active_advice(CLUSTER) == []
    with MedicApiClient("http://medic.test", transport=transport) as client:
        client.list_active_advice(CLUSTER)
    assert seen[0].headers["authorization"] == "Bearer medic_s3cret"
    assert "authorization" not in seen[1].headers


def test_a_token_without_the_controller_role_is_refused(api: Api) -> None:
    viewer = grant(api.services.store, Role.VIEWER, "viewer-of-advice")
    advice = api.publish()
    with MedicApiClient(api.url, timeout=5.0, token=viewer) as client:
        assert client.get_advice(advice.id) == advice, "a viewer reads advice"
        with pytest.raises(TransientError, match="403"):
            client.report_reconciliation(
                advice.id, 1, Reconciliation.CONVERGED, "x", api.clock.now()
            )
    with (
        MedicApiClient(api.url, timeout=5.0) as anonymous,
        pytest.raises(TransientError, match="401"),
    ):
        anonymous.list_active_advice(CLUSTER)
    assert api.services.store.get_advice(advice.id) == advice, "nothing was recorded"


def test_client_passes_retry_after_and_maps_timeouts() -> None:
    busy = httpx.Response(503, json={"detail": "busy"}, headers={"retry-after": "7"})
    with _scripted(lambda _request: busy) as client, pytest.raises(TransientError) as info:
        client.list_active_advice(CLUSTER)
    assert info.value.retry_after == 7.0

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with _scripted(slow) as client, pytest.raises(TransientError, match="ReadTimeout"):
        client.get_advice(AdviceId(1))


def test_client_sends_keys_as_paths_and_no_client_times(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404, json={"detail": "no"})

    with _scripted(handler) as client:
        assert client.get_action("advice/1/g2/exclude_nodes") is None
        with pytest.raises(NotFoundError):
            client.finish_action("advice/1/g2/release", ActionStatus.SUCCEEDED, datetime.now())
    assert seen[0].url.path == "/api/v1/actions/advice/1/g2/exclude_nodes"
    assert seen[1].method == "PUT" and b"time" not in seen[1].content
