"""Bad input that broke the API by only being sent: a lone surrogate in free JSON (stored, then a
500 on every read), a body of any size read and parsed before authentication, and a refusal
flood from many addresses writing one audit row per refusal."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.audit import AuditKind
from medic.domain.auth import Role
from medic.services import Services
from medic.testing import FakeClock
from medic.wiring import build

from .auth_kit import bearer, grant

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

LIMIT = 4096
JSON = {"content-type": "application/json"}


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    overrides = {"store.url": f"sqlite:///{tmp_path / 'm.db'}", "api.max_body_bytes": LIMIT}
    built = build(load_settings(env={}, overrides=overrides), clock=FakeClock())
    yield built
    built.close()


def _alert_body(evidence: str) -> str:
    # Raw text: the escapes must reach the server as written (json.dumps would double them).
    return (
        '{"cluster": "sim", "node": "node001", "key": "k1", "detector": "agent", '
        f'"summary": "s\\udfff", "severity": "warning", "evidence": {evidence}}}'
    )


# --- 1. a lone surrogate in free JSON ----------------------------------------------------------
def test_a_lone_surrogate_in_alert_evidence_is_stored_as_a_replacement(
    services: Services,
) -> None:
    agent = bearer(grant(services.store, Role.DETECTOR, "agent"))
    viewer = bearer(grant(services.store, Role.VIEWER))
    client = TestClient(create_app(services), raise_server_exceptions=False)
    body = _alert_body('{"x": "\\udfff", "\\ud800": ["\\u0000", "\\ud83d\\ude00"]}')
    posted = client.post("/api/v1/alerts", content=body, headers={**agent, **JSON})
    assert posted.status_code == 201, posted.text

    listed = client.get("/api/v1/alerts", headers=viewer)  # a 500 on every read before
    assert listed.status_code == 200, listed.text
    [alert] = listed.json()
    assert alert["evidence"] == {"x": "\ufffd", "\ufffd": ["\ufffd", "\U0001f600"]}
    assert alert["summary"] == "s\ufffd"
    assert client.get("/api/v1/audit", headers=viewer).status_code == 200


def test_a_lone_surrogate_in_a_controller_audit_payload_is_stored_as_a_replacement(
    services: Services,
) -> None:
    controller = bearer(grant(services.store, Role.CONTROLLER, "ctl"))
    viewer = bearer(grant(services.store, Role.VIEWER))
    client = TestClient(create_app(services), raise_server_exceptions=False)
    body = (
        '{"actor": "ctl", "kind": "action-started", "subject_type": "job", "subject_id": "7",'
        ' "payload": {"note": "\\udfff", "\\udc00": {"deep": ["\\ud83d"]}}}'
    )
    posted = client.post("/api/v1/audit", content=body, headers={**controller, **JSON})
    assert posted.status_code == 201, posted.text

    page = client.get("/api/v1/audit", headers=viewer)  # audit pages answered 500 before
    assert page.status_code == 200, page.text
    [event] = [e for e in page.json()["events"] if e["kind"] == "action-started"]
    assert event["payload"] == {"note": "\ufffd", "\ufffd": {"deep": ["\ufffd"]}}


# --- 3. bounded bodies, authentication before the body -----------------------------------------
def _call(app: ASGIApp, headers: dict[str, str], chunks: Iterator[bytes] | None) -> dict[str, Any]:
    """One POST to /api/v1/alerts straight through ASGI; ``chunks`` None: reading the body fails
    the test. The response's status and body, and how many bytes the app read."""
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        assert chunks is not None, "the body was read"
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/alerts",
        "raw_path": b"/api/v1/alerts",
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("10.9.9.9", 4000),
        "server": ("testserver", 80),
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {"status": start["status"], "body": json.loads(body), "read": read}


def _many(size: int = 1024) -> Iterator[bytes]:
    """Far more than the limit (bounded: without the limit the app would read it all)."""
    for _ in range(64 * LIMIT // size):
        yield b" " * size


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(services: Services) -> None:
    agent = bearer(grant(services.store, Role.DETECTOR, "agent"))
    answer = _call(create_app(services), {**agent, **JSON, "content-length": "200000000"}, None)
    assert answer["status"] == 413
    assert answer["body"]["code"] == "body_too_large"
    assert f"{LIMIT} bytes" in answer["body"]["detail"]
    assert "api.max_body_bytes" in answer["body"]["detail"]


def test_a_chunked_body_is_refused_once_it_grows_past_the_limit(services: Services) -> None:
    agent = bearer(grant(services.store, Role.DETECTOR, "agent"))
    headers = {**agent, **JSON, "transfer-encoding": "chunked"}
    answer = _call(create_app(services), headers, _many())
    assert answer["status"] == 413
    assert LIMIT < answer["read"] <= LIMIT + 1024, "read up to the limit, never the rest"


def test_no_body_is_read_for_a_caller_without_valid_credentials(services: Services) -> None:
    grant(services.store, Role.DETECTOR, "agent")
    app = create_app(services)
    for headers in ({}, bearer("not-a-token")):
        for framing in ({"content-length": "4000"}, {"transfer-encoding": "chunked"}):
            answer = _call(app, {**headers, **JSON, **framing}, None)
            assert answer["status"] == 401, (headers, framing)
            assert answer["body"]["code"] == "unauthenticated"
    denied = services.store.query_audit(kind=AuditKind.ACCESS_DENIED)
    assert len(denied) == 4, "refused before the body, audited as always"
    assert {e.payload["path"] for e in denied} == {"/api/v1/alerts"}


def test_a_body_within_the_limit_is_read_and_answered(services: Services) -> None:
    agent = bearer(grant(services.store, Role.DETECTOR, "agent"))
    body = _alert_body('{"pad": "' + "x" * (LIMIT - 300) + '"}').encode()
    assert len(body) <= LIMIT
    chunks = iter([body[: len(body) // 2], body[len(body) // 2 :]])
    answer = _call(create_app(services), {**agent, **JSON, "transfer-encoding": "chunked"}, chunks)
    assert answer["status"] == 201, answer
    assert answer["read"] == len(body)


# --- 5. a refusal flood from many addresses ------------------------------------------------------
def _from_header(app: ASGIApp) -> ASGIApp:
    """The client address from ``x-test-client`` (the test client has a single one)."""

    async def shim(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            scope = {**scope, "client": (headers[b"x-test-client"].decode(), 4000)}
        await app(scope, receive, send)

    return shim


def test_a_refusal_flood_from_many_addresses_writes_a_bounded_trail(services: Services) -> None:
    clock = services.clock
    assert isinstance(clock, FakeClock)
    addresses, tokens = 100, 5
    with TestClient(_from_header(create_app(services))) as client:
        for n in range(tokens):
            for a in range(addresses):
                clock.advance(0.01)
                headers = {"x-test-client": f"10.0.{a // 250}.{a % 250}", **bearer(f"bad-{n}")}
                assert client.get("/api/v1/jobs", headers=headers).status_code == 401
    events = services.store.query_audit(kind=AuditKind.ACCESS_DENIED, limit=10_000)

    answered = [e for e in events if "method" in e.payload]
    summaries = [e for e in events if e.payload.get("principal") == "*"]
    assert len(events) <= 120, f"{len(events)} rows for 500 refusals: the global rate is 100 + 1/s"
    assert summaries, "the refusals past the global rate are summarised"
    assert all(0 < e.payload["callers"] <= addresses for e in summaries)
    counted = sum(1 + e.payload["suppressed"] for e in answered)
    counted += sum(e.payload["suppressed"] for e in events if "method" not in e.payload)
    assert counted == addresses * tokens, "every refusal is accounted for"
