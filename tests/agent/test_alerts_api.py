"""``POST /api/v1/alerts`` and ``GET /api/v1/alerts`` over real HTTP with a SQLite store:
upsert and resolve, the source from the detector's name, filters, and validation errors."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest

from medic.api.alerts import router as alerts_router
from medic.api.app import create_app
from medic.domain.audit import AuditKind
from medic.errors import StoreError

from .conftest import CLUSTER, Api, Server

PROBLEM_JSON = "application/problem+json"


def _alert(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "cluster": CLUSTER,
        "node": "gpu-node-017",
        "key": "xid:79",
        "detector": "agent:gpu-node-017",
        "summary": "GPU has fallen off the bus (Xid 79)",
        "description": "The kernel logged Xid 79 for 0000:18:00.",
        "severity": "critical",
        "evidence": {"xid": 79, "mnemonic": "GPU_HAS_FALLEN_OFF_THE_BUS", "pci": "0000:18:00"},
    }
    body.update(overrides)
    return body


def _problem(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body = response.json()
    assert body["code"] == code and body["status"] == status
    detail: str = body["detail"]
    return detail


def test_a_firing_alert_is_stored_and_returned(api: Api) -> None:
    response = api.http.post("/api/v1/alerts", json=_alert())

    assert response.status_code == 201, response.text
    body = response.json()
    assert body["id"] >= 1 and body["state"] == "firing" and body["count"] == 1
    assert (body["source"], body["detector"]) == ("agent", "agent:gpu-node-017")
    assert body["xid"] == 79, "the code of an xid:<code> key"
    assert body["mapped_action"] == "reboot", "the lightest repair for Xid 79, stored with it"
    assert body["evidence"]["mnemonic"] == "GPU_HAS_FALLEN_OFF_THE_BUS"
    assert body["first_seen"] == body["last_seen"]


def test_the_same_alert_again_counts_and_keeps_first_seen(api: Api) -> None:
    first = api.http.post("/api/v1/alerts", json=_alert()).json()
    api.clock.advance(60)
    again = api.http.post("/api/v1/alerts", json=_alert(summary="Xid 79 again")).json()

    assert again["id"] == first["id"] and again["count"] == 2
    assert again["first_seen"] == first["first_seen"] and again["last_seen"] > first["last_seen"]
    assert again["summary"] == "Xid 79 again"


def test_a_detector_that_is_not_the_agent_is_a_detector(api: Api) -> None:
    body = _alert(key="detector:nvsentinel:gpu_mem", detector="nvsentinel", xid=None)
    stored = api.http.post("/api/v1/alerts", json=body, headers=api.as_("nvsentinel")).json()

    assert stored["source"] == "detector" and stored["xid"] is None


def test_resolve_then_fire_again(api: Api) -> None:
    fired = api.http.post("/api/v1/alerts", json=_alert(key="agent:ecc_dbe")).json()
    api.clock.advance(30)
    resolved = api.http.post("/api/v1/alerts", json=_alert(key="agent:ecc_dbe", state="resolved"))
    twice = api.http.post("/api/v1/alerts", json=_alert(key="agent:ecc_dbe", state="resolved"))
    refired = api.http.post("/api/v1/alerts", json=_alert(key="agent:ecc_dbe"))

    assert resolved.status_code == twice.status_code == 200
    assert resolved.json()["state"] == "resolved" and resolved.json()["id"] == fired["id"]
    assert twice.json() == resolved.json(), "resolving twice changes nothing"
    assert refired.status_code == 201
    assert refired.json()["state"] == "firing" and refired.json()["count"] == 2
    assert refired.json()["first_seen"] == fired["first_seen"]
    assert refired.json()["firing_since"] > fired["firing_since"], "a new firing episode"


def test_resolving_an_unknown_alert_is_not_found(api: Api) -> None:
    response = api.http.post("/api/v1/alerts", json=_alert(key="agent:thermal", state="resolved"))

    assert "agent:thermal" in _problem(response, 404, "not_found")


def test_list_filters(api: Api) -> None:
    api.http.post("/api/v1/alerts", json=_alert())
    api.http.post("/api/v1/alerts", json=_alert(node="gpu-node-018", key="agent:fs_full"))
    api.http.post("/api/v1/alerts", json=_alert(cluster="c2", key="agent:thermal"))
    api.http.post(
        "/api/v1/alerts", json=_alert(node="gpu-node-018", key="agent:fs_full", state="resolved")
    )

    assert len(api.alerts()) == 3
    assert [a["key"] for a in api.alerts(cluster=CLUSTER)] == ["xid:79", "agent:fs_full"]
    assert [a["key"] for a in api.alerts(node="gpu-node-018")] == ["agent:fs_full"]
    assert [a["key"] for a in api.alerts(state="firing", cluster=CLUSTER)] == ["xid:79"]
    # Xid 79 maps to a repair; a full disk (no repair frees a byte) and thermal (cooling) do not.
    assert [a["mapped_action"] for a in api.alerts(cluster=CLUSTER)] == ["reboot", None]
    assert [a["key"] for a in api.alerts(unmapped="true")] == ["agent:fs_full", "agent:thermal"]
    response = api.http.get(
        "/api/v1/alerts", params={"state": "burning"}, headers=api.as_("viewer")
    )
    _problem(response, 422, "invalid_request")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"key": "Agent:ECC"}, "body.key"),
        ({"key": "agent ecc"}, "body.key"),
        ({"key": ""}, "body.key"),
        ({"node": "bad node/1"}, "body.node"),
        ({"detector": "agent gpu"}, "body.detector"),
        ({"summary": ""}, "body.summary"),
        ({"summary": "x" * 201}, "body.summary"),
        ({"severity": "fatal"}, "body.severity"),
        ({"state": "flapping"}, "body.state"),
        ({"evidence": {"blob": "x" * 17_000}}, "body.evidence"),
        ({"evidence": ["not", "an", "object"]}, "body.evidence"),
        ({"xid": 48}, "body.xid"),
        ({"xid": -1}, "body.xid"),
        ({"mapped_action": "reboot"}, "body.mapped_action"),
        ({"source": "signature"}, "body.source"),
    ],
)
def test_validation_errors(api: Api, overrides: dict[str, Any], field: str) -> None:
    response = api.http.post("/api/v1/alerts", json=_alert(**overrides))

    assert field in _problem(response, 422, "invalid_request")
    assert api.alerts() == []


def test_missing_fields_are_named(api: Api) -> None:
    body = _alert()
    del body["summary"], body["detector"]
    detail = _problem(api.http.post("/api/v1/alerts", json=body), 422, "invalid_request")

    assert "body.summary" in detail and "body.detector" in detail


class _DownStore:
    """A repair store whose database does not answer."""

    def __getattr__(self, name: str) -> Any:
        def down(*args: Any, **kwargs: Any) -> Any:
            raise StoreError("the database does not answer (test)")

        return down


def test_an_alert_store_that_does_not_answer_answers_503(api: Api) -> None:
    services = dataclasses.replace(api.services, repair_store=_DownStore())  # type: ignore[arg-type]
    app = create_app(services)
    if not any(getattr(r, "path", None) == "/api/v1/alerts" for r in app.routes):
        app.include_router(alerts_router)
    server = Server(app)
    server.start()
    try:
        response = httpx.post(
            f"{server.url}/api/v1/alerts", json=_alert(), headers=api.as_("agent"), timeout=5
        )
    finally:
        server.stop()

    _problem(response, 503, "store_unavailable")


# --- who may post --------------------------------------------------------------------------------
def test_a_detector_posts_only_as_itself(api: Api) -> None:
    own = api.http.post("/api/v1/alerts", json=_alert(detector="agent:gpu-node-017"))
    named = api.http.post(
        "/api/v1/alerts",
        json=_alert(key="detector:nvsentinel:x", detector="nvsentinel"),
        headers=api.as_("nvsentinel"),
    )
    as_other = api.http.post(
        "/api/v1/alerts", json=_alert(detector="nvsentinel"), headers=api.as_("agent")
    )
    prefix_only = api.http.post("/api/v1/alerts", json=_alert(detector="agentx"))
    as_agent = api.http.post(
        "/api/v1/alerts", json=_alert(detector="agent:gpu-node-017"), headers=api.as_("nvsentinel")
    )

    assert own.status_code == named.status_code == 201, (own.text, named.text)
    for response in (as_other, prefix_only, as_agent):
        assert "only as itself" in _problem(response, 403, "forbidden")
    denied = api.services.store.query_audit(kind=AuditKind.ACCESS_DENIED)
    assert [(e.payload["principal"], e.payload["method"]) for e in denied] == [
        ("agent", "POST"),
        ("agent", "POST"),
        ("nvsentinel", "POST"),
    ]


def test_only_who_raised_an_alert_resolves_it(api: Api) -> None:
    api.http.post("/api/v1/alerts", json=_alert(key="agent:thermal"))

    other = api.http.post(
        "/api/v1/alerts",
        json=_alert(key="agent:thermal", detector="nvsentinel", state="resolved"),
        headers=api.as_("nvsentinel"),
    )
    own = api.http.post("/api/v1/alerts", json=_alert(key="agent:thermal", state="resolved"))

    assert "resolve" in _problem(other, 403, "forbidden")
    assert own.status_code == 200 and own.json()["state"] == "resolved"


def test_posting_needs_a_detector_token_and_reading_a_viewer_token(api: Api) -> None:
    anonymous = httpx.post(f"{api.url}/api/v1/alerts", json=_alert(), timeout=5)
    viewer = api.http.post("/api/v1/alerts", json=_alert(), headers=api.as_("viewer"))
    reading = api.http.get("/api/v1/alerts")

    _problem(anonymous, 401, "unauthenticated")
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    _problem(viewer, 403, "forbidden")
    _problem(reading, 403, "forbidden")
    assert api.alerts() == []


def test_a_person_resolves_any_alert_audited_as_them(api: Api) -> None:
    from medic.domain.audit import AuditKind

    alert = api.http.post("/api/v1/alerts", json=_alert(key="agent:thermal")).json()
    path = f"/api/v1/alerts/{alert['id']}/resolve"

    viewer = api.http.post(path, json={"reason": "x"}, headers=api.as_("viewer"))
    detector = api.http.post(path, headers=api.as_("nvsentinel"))
    done = api.http.post(path, json={"reason": "fan replaced"}, headers=api.as_("alice"))
    again = api.http.post(path, headers=api.as_("alice"))
    unknown = api.http.post("/api/v1/alerts/9999/resolve", headers=api.as_("alice"))
    blank = api.http.post(path, json={"reason": ""}, headers=api.as_("alice"))

    _problem(viewer, 403, "forbidden")
    _problem(detector, 403, "forbidden")
    assert done.status_code == 200 and done.json()["state"] == "resolved"
    assert again.status_code == 200 and again.json()["state"] == "resolved"
    assert "alert 9999 does not exist" in _problem(unknown, 404, "not_found")
    assert blank.status_code == 422
    events = api.services.store.query_audit(kind=AuditKind.ALERT_RESOLVED, limit=10)
    assert [(e.actor, e.payload["why"]) for e in events] == [
        ("user:alice", "resolved by user:alice: fan replaced")
    ]
