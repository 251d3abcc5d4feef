"""Authentication of the HTTP API: API tokens (created, hashed, listed, revoked; from the CLI and
the API), bearer requests, console sessions (cookie flags, CSRF on cookie writes only, expiry,
sign-out), detectors acting as themselves only, and what is audited along the way."""

from __future__ import annotations

import hashlib
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import typer
from typer.testing import CliRunner

from medic.api.app import create_app
from medic.api.auth import issue_token, revoke_token
from medic.cli import tokens as tokens_cli
from medic.cli.common import State
from medic.config.loading import load_settings
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.auth import SESSION_TTL, Role, check_token_name, hash_secret
from medic.errors import ConflictError, InputError, NotFoundError
from medic.services import Services
from medic.testing import FakeClock
from medic.wiring import build

from .auth_kit import bearer, grant

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

PROBLEM_JSON = "application/problem+json"


@dataclass
class Rig:
    services: Services
    clock: FakeClock
    url: str

    def client(self, *, https: bool = False) -> TestClient:
        base = "https://testserver" if https else "http://testserver"
        return TestClient(create_app(self.services), base_url=base)

    def events(self, kind: AuditKind) -> list[AuditEvent]:
        return self.services.store.query_audit(kind=kind, limit=10_000)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    url = f"sqlite:///{tmp_path / 'medic.db'}"
    clock = FakeClock()
    overrides: dict[str, object] = {"store.url": url, "sim.nodes": 4, "sim.nodes_per_job": 1}
    services = build(load_settings(env={}, overrides=overrides), clock=clock)
    services.loop.run_once()
    try:
        yield Rig(services, clock, url)
    finally:
        services.close()


def _problem(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body = response.json()
    assert body["code"] == code and body["status"] == status
    detail: str = body["detail"]
    return detail


# --- tokens ----------------------------------------------------------------------------------
def test_a_token_is_random_shown_once_and_stored_as_its_hash(rig: Rig) -> None:
    token, secret = issue_token(
        rig.services.tokens, rig.services.store, "alice", Role.OPERATOR, rig.clock.now(), "cli:root"
    )
    _, other = issue_token(
        rig.services.tokens, rig.services.store, "bob", Role.OPERATOR, rig.clock.now(), "cli:root"
    )

    assert re.fullmatch(r"medic_[A-Za-z0-9_-]{43}", secret), "32 random bytes, URL-safe"
    assert secret != other
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest() == hash_secret(secret)
    engine = sa.create_engine(rig.url)
    try:
        with engine.connect() as conn:
            rows = [
                tuple(str(v) for v in row)
                for row in conn.execute(sa.text("SELECT * FROM api_tokens"))
            ]
    finally:
        engine.dispose()
    assert rows and not any(secret in value for row in rows for value in row), "no secret stored"
    [event, _] = rig.events(AuditKind.TOKEN_CREATED)
    assert (event.subject_id, event.payload) == (
        "alice",
        {"name": "alice", "role": "operator", "by": "cli:root"},
    )
    assert secret not in str(event.payload)


def test_a_bearer_token_signs_requests_in_and_revoking_it_signs_them_out(rig: Rig) -> None:
    _, secret = issue_token(
        rig.services.tokens, rig.services.store, "alice", Role.VIEWER, rig.clock.now(), "test"
    )
    client = rig.client()

    assert client.get("/api/v1/nodes", headers=bearer(secret)).status_code == 200
    revoked = revoke_token(
        rig.services.tokens, rig.services.store, "alice", rig.clock.now(), "cli:root"
    )
    again = revoke_token(
        rig.services.tokens, rig.services.store, "alice", rig.clock.now(), "cli:root"
    )

    assert revoked.revoked_at == rig.clock.now() and again == revoked
    detail = _problem(client.get("/api/v1/nodes", headers=bearer(secret)), 401, "unauthenticated")
    assert "revoked" in detail
    assert len(rig.events(AuditKind.TOKEN_REVOKED)) == 1, "revoking twice is audited once"
    [denied] = rig.events(AuditKind.ACCESS_DENIED)
    assert (denied.payload["principal"], denied.payload["why"]) == ("alice", "token revoked")
    with pytest.raises(NotFoundError):
        revoke_token(rig.services.tokens, rig.services.store, "nobody", rig.clock.now(), "cli:root")


def test_a_revoked_name_can_be_given_to_a_new_token_but_an_active_one_cannot(rig: Rig) -> None:
    store = rig.services.store
    _, old = issue_token(store, store, "nvsentinel", Role.DETECTOR, rig.clock.now(), "test")
    with pytest.raises(ConflictError, match="exists"):
        issue_token(store, store, "nvsentinel", Role.DETECTOR, rig.clock.now(), "test")
    revoke_token(store, store, "nvsentinel", rig.clock.now(), "test")

    token, new = issue_token(store, store, "nvsentinel", Role.DETECTOR, rig.clock.now(), "test")

    assert token.active
    client = rig.client()
    _problem(client.get("/api/v1/session", headers=bearer(old)), 401, "unauthenticated")
    assert client.get("/api/v1/session", headers=bearer(new)).json()["name"] == "nvsentinel"


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("", Role.VIEWER),
        ("has space", Role.VIEWER),
        ("-leading", Role.VIEWER),
        ("a" * 65, Role.VIEWER),
        ("a:b:c", Role.VIEWER),
        ("auto", Role.OPERATOR),
        ("medic", Role.DETECTOR),
        ("Anonymous", Role.VIEWER),
        ("medic-engine", Role.ADMIN),
        ("user:alice", Role.OPERATOR),
        ("detector:x", Role.DETECTOR),
        ("controller:x", Role.CONTROLLER),
        ("agent:n1", Role.OPERATOR),
    ],
)
def test_bad_token_names_are_refused(name: str, role: Role) -> None:
    with pytest.raises(InputError):
        check_token_name(name, role)


def test_good_token_names() -> None:
    for name, role in [
        ("alice", Role.ADMIN),
        ("agent", Role.DETECTOR),
        ("agent:gpu-node-017", Role.DETECTOR),
        ("slurm-a", Role.CONTROLLER),
        ("a" * 64 + ":" + "b" * 63, Role.VIEWER),
    ]:
        assert check_token_name(name, role) == name


def test_malformed_and_unknown_credentials_are_401_with_a_bearer_challenge(rig: Rig) -> None:
    client = rig.client()
    for headers in (
        {},
        {"Authorization": "Basic YWxpY2U6cHc="},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer medic_not-a-token"},
        {"Authorization": "medic_no_scheme"},
    ):
        response = client.get("/api/v1/jobs", headers=headers)
        _problem(response, 401, "unauthenticated")
        assert response.headers["www-authenticate"] == 'Bearer realm="medic"'
    whys = [e.payload["why"] for e in rig.events(AuditKind.ACCESS_DENIED)]
    assert whys == [
        "no credentials",
        "malformed authorization header",
        "malformed authorization header",
        "unknown token",
        "malformed authorization header",
    ]
    assert {e.payload["principal"] for e in rig.events(AuditKind.ACCESS_DENIED)} == {"anonymous"}


def test_probes_and_metrics_stay_open(rig: Rig) -> None:
    client = rig.client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").json()["status"] == "ready"
    assert client.get("/metrics").status_code == 200
    assert client.get("/api/openapi.json").status_code == 200
    assert rig.events(AuditKind.ACCESS_DENIED) == []


def test_tokens_through_the_api_for_admins_only(rig: Rig) -> None:
    admin = grant(rig.services.store, Role.ADMIN, "root")
    viewer = grant(rig.services.store, Role.VIEWER, "watcher")
    client = rig.client()

    created = client.post(
        "/api/v1/tokens", json={"name": "nvsentinel", "role": "detector"}, headers=bearer(admin)
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["name"] == "nvsentinel" and body["role"] == "detector" and body["active"]
    assert body["created_by"] == "user:root" and body["token"].startswith("medic_")
    listed = client.get("/api/v1/tokens", headers=bearer(admin)).json()
    assert [t["name"] for t in listed] == ["nvsentinel", "root", "watcher"]
    assert all("token" not in t and "secret_hash" not in t for t in listed)
    _problem(client.get("/api/v1/tokens", headers=bearer(viewer)), 403, "forbidden")
    _problem(
        client.post("/api/v1/tokens", json={"name": "x", "role": "admin"}, headers=bearer(viewer)),
        403,
        "forbidden",
    )
    _problem(
        client.post(
            "/api/v1/tokens", json={"name": "auto", "role": "viewer"}, headers=bearer(admin)
        ),
        422,
        "invalid_input",
    )
    _problem(
        client.post(
            "/api/v1/tokens", json={"name": "nvsentinel", "role": "viewer"}, headers=bearer(admin)
        ),
        409,
        "conflict",
    )

    revoked = client.delete("/api/v1/tokens/nvsentinel", headers=bearer(admin))
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    _problem(client.get("/api/v1/session", headers=bearer(body["token"])), 401, "unauthenticated")
    _problem(client.delete("/api/v1/tokens/nobody", headers=bearer(admin)), 404, "not_found")
    [event] = rig.events(AuditKind.TOKEN_REVOKED)
    assert event.payload["by"] == "user:root"


def test_the_first_start_without_tokens_says_how_to_make_one(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="medic.api.app"), rig.client():
        pass
    assert "medic tokens create --role admin --name NAME" in caplog.text
    caplog.clear()

    grant(rig.services.store, Role.ADMIN, "root")
    with caplog.at_level(logging.WARNING, logger="medic.api.app"), rig.client():
        pass
    assert "medic tokens create" not in caplog.text


# --- console sessions ------------------------------------------------------------------------
def _sign_in(client: TestClient, secret: str) -> tuple[Any, str]:
    response = client.post("/api/v1/session", json={"token": secret})
    assert response.status_code == 200, response.text
    csrf: str = response.json()["csrf_token"]
    return response, csrf


def test_signing_in_sets_a_strict_http_only_cookie(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.OPERATOR, "alice")
    client = rig.client()

    response, csrf = _sign_in(client, secret)

    assert response.json() == {"name": "alice", "role": "operator", "csrf_token": csrf}
    assert len(csrf) >= 32 and csrf not in secret
    cookie = response.headers["set-cookie"]
    session_id = client.cookies["medic_session"]
    assert cookie.startswith(f"medic_session={session_id};")
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "path", "samesite", "max-age"} <= attributes
    assert "samesite=strict" in cookie.lower() and "path=/" in cookie.lower()
    assert "secure" not in attributes, "plain http: a Secure cookie would never come back"
    assert f"Max-Age={int(SESSION_TTL.total_seconds())}" in cookie
    assert response.headers["cache-control"] == "no-store"
    assert session_id != secret and session_id not in secret
    stored = rig.services.store.get_session(hash_secret(session_id))  # type: ignore[attr-defined]
    assert stored is not None and stored.token_name == "alice"
    assert stored.expires_at == rig.clock.now() + timedelta(hours=12)
    [event] = rig.events(AuditKind.SESSION_STARTED)
    assert event.payload["by"] == "user:alice"

    secure = rig.client(https=True).post("/api/v1/session", json={"token": secret})
    assert "secure" in secure.headers["set-cookie"].lower()


def test_the_session_answers_who_is_signed_in(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.VIEWER, "victor")
    client = rig.client()
    _problem(client.get("/api/v1/session"), 401, "unauthenticated")
    _, csrf = _sign_in(client, secret)

    assert client.get("/api/v1/session").json() == {
        "name": "victor",
        "role": "viewer",
        "csrf_token": csrf,
    }
    assert client.get("/api/v1/nodes").status_code == 200, "reads need no CSRF token"
    bearer_only = rig.client().get("/api/v1/session", headers=bearer(secret)).json()
    assert bearer_only == {"name": "victor", "role": "viewer", "csrf_token": None}


def test_cookie_writes_need_the_csrf_token_bearer_writes_do_not(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.OPERATOR, "alice")
    client = rig.client()
    _, csrf = _sign_in(client, secret)
    modes = {"mode": "act", "partitions": {}}

    missing = client.put("/api/v1/policy/modes", json=modes)
    wrong = client.put("/api/v1/policy/modes", json=modes, headers={"X-CSRF-Token": "nope"})
    right = client.put("/api/v1/policy/modes", json=modes, headers={"X-CSRF-Token": csrf})
    by_bearer = rig.client().put(
        "/api/v1/policy/modes", json={"mode": "observe"}, headers=bearer(secret)
    )

    assert "X-CSRF-Token" in _problem(missing, 403, "csrf_failed")
    _problem(wrong, 403, "csrf_failed")
    assert right.status_code == 200 and right.json()["mode"] == "act"
    assert by_bearer.status_code == 200 and by_bearer.json()["mode"] == "observe"
    denied = rig.events(AuditKind.ACCESS_DENIED)
    assert [(e.payload["code"], e.payload["why"], e.payload["principal"]) for e in denied] == [
        ("csrf_failed", "csrf token missing", "alice"),
        ("csrf_failed", "csrf token mismatch", "alice"),
    ]


def test_a_session_ends_after_12_hours(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.VIEWER, "victor")
    client = rig.client()
    _sign_in(client, secret)

    rig.clock.advance(SESSION_TTL.total_seconds() - 1)
    assert client.get("/api/v1/nodes").status_code == 200
    rig.clock.advance(1)

    assert "sign in again" in _problem(client.get("/api/v1/nodes"), 401, "unauthenticated")
    assert rig.events(AuditKind.ACCESS_DENIED)[-1].payload["why"] == "session expired"
    _sign_in(client, secret)
    assert client.get("/api/v1/nodes").status_code == 200, "signing in again works"


def test_revoking_the_token_ends_its_sessions(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.VIEWER, "victor")
    client = rig.client()
    _sign_in(client, secret)

    revoke_token(rig.services.tokens, rig.services.store, "victor", rig.clock.now(), "cli:root")

    _problem(client.get("/api/v1/nodes"), 401, "unauthenticated")


def test_signing_out(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.OPERATOR, "alice")
    client = rig.client()
    _, csrf = _sign_in(client, secret)
    session_id = client.cookies["medic_session"]

    _problem(client.delete("/api/v1/session"), 403, "csrf_failed")
    out = client.delete("/api/v1/session", headers={"X-CSRF-Token": csrf})

    assert out.status_code == 204
    assert (
        'medic_session=""' in out.headers["set-cookie"] or "Max-Age=0" in out.headers["set-cookie"]
    )
    assert rig.services.store.get_session(hash_secret(session_id)) is None  # type: ignore[attr-defined]
    client.cookies.set("medic_session", session_id)  # a stolen copy of the cookie is dead too
    _problem(client.get("/api/v1/session"), 401, "unauthenticated")
    assert rig.client().delete("/api/v1/session").status_code == 204, "signing out is idempotent"
    [event] = rig.events(AuditKind.SESSION_ENDED)
    assert event.payload["by"] == "user:alice"


def test_only_people_sign_in_to_the_console(rig: Rig) -> None:
    client = rig.client()
    for role in (Role.DETECTOR, Role.CONTROLLER):
        secret = grant(rig.services.store, role, f"program-{role.value}")
        response = client.post("/api/v1/session", json={"token": secret})
        assert "console sessions are for people" in _problem(response, 403, "forbidden")
    _problem(client.post("/api/v1/session", json={"token": "medic_guess"}), 401, "unauthenticated")
    assert "medic_session" not in client.cookies
    whys = [e.payload["why"] for e in rig.events(AuditKind.ACCESS_DENIED)]
    assert whys == [
        "console sign-in with a detector token",
        "console sign-in with a controller token",
        "sign-in with an unknown token",
    ]


def test_a_stale_cookie_does_not_stop_signing_in_again(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.VIEWER, "victor")
    client = rig.client()
    client.cookies.set("medic_session", "stale-session-id")

    _sign_in(client, secret)

    assert client.get("/api/v1/session").json()["name"] == "victor"


def test_a_bearer_token_wins_over_a_session_cookie(rig: Rig) -> None:
    viewer = grant(rig.services.store, Role.VIEWER, "victor")
    operator = grant(rig.services.store, Role.OPERATOR, "alice")
    client = rig.client()
    _sign_in(client, viewer)

    who = client.get("/api/v1/session", headers=bearer(operator)).json()
    write = client.put("/api/v1/policy/modes", json={}, headers=bearer(operator))

    assert who["name"] == "alice" and who["csrf_token"] is None
    assert write.status_code == 200, "a bearer request needs no CSRF token"


# --- acting as oneself -----------------------------------------------------------------------
def test_a_detector_requests_repairs_as_itself_only(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.DETECTOR, "nvsentinel")
    client = rig.client()
    body = {
        "cluster": "sim",
        "node": "node001",
        "action": "reboot",
        "reason": "dcgm level 3 failed",
        "request_id": "r-1",
        "check": "dcgm",
    }

    as_other = client.post(
        "/api/v1/repairs", json={**body, "requested_by": "other"}, headers=bearer(secret)
    )
    as_person = client.post(
        "/api/v1/repairs",
        json={**body, "requested_by": "nvsentinel", "requester_kind": "user"},
        headers=bearer(secret),
    )
    as_itself = client.post(
        "/api/v1/repairs",
        json={**body, "requested_by": "detector:nvsentinel"},
        headers=bearer(secret),
    )
    implicit = client.post(
        "/api/v1/repairs", json={**body, "request_id": "r-1"}, headers=bearer(secret)
    )

    assert "acts only as its own token" in _problem(as_other, 403, "forbidden")
    _problem(as_person, 403, "forbidden")
    assert as_itself.status_code == 201, as_itself.text
    assert (as_itself.json()["requested_by"], as_itself.json()["requester_kind"]) == (
        "nvsentinel",
        "detector",
    )
    assert implicit.status_code == 200 and implicit.json()["id"] == as_itself.json()["id"]
    denied = rig.events(AuditKind.ACCESS_DENIED)
    assert [e.payload["principal"] for e in denied] == ["nvsentinel", "nvsentinel"]
    assert all(e.payload["path"] == "/api/v1/repairs" for e in denied)


def test_a_detector_posts_alerts_as_itself_only(rig: Rig) -> None:
    secret = grant(rig.services.store, Role.DETECTOR, "nvsentinel")
    client = rig.client()
    alert = {"cluster": "sim", "node": "node001", "key": "detector:nvsentinel:x", "summary": "x"}

    other = client.post(
        "/api/v1/alerts", json={**alert, "detector": "dcgm"}, headers=bearer(secret)
    )
    own = client.post(
        "/api/v1/alerts", json={**alert, "detector": "nvsentinel"}, headers=bearer(secret)
    )

    _problem(other, 403, "forbidden")
    assert own.status_code == 201 and own.json()["detector"] == "nvsentinel"


# --- the CLI -----------------------------------------------------------------------------------
def _cli(rig: Rig) -> Any:
    app = typer.Typer()

    @app.callback()
    def _root(ctx: typer.Context) -> None:
        ctx.obj = State(config_path=None, log_level="warning")

    tokens_cli.register(app)
    runner = CliRunner()
    env = {"MEDIC_STORE_URL": rig.url}

    def invoke(*args: str) -> Any:
        return runner.invoke(app, list(args), env=env)

    return invoke


def test_cli_creates_lists_and_revokes_tokens(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIC_CONFIG", raising=False)
    invoke = _cli(rig)

    created = invoke("tokens", "create", "--role", "admin", "--name", "root")
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip()
    assert re.fullmatch(r"medic_[A-Za-z0-9_-]{43}", secret), created.stdout
    assert "shown this once" in created.stderr
    assert rig.client().get("/api/v1/tokens", headers=bearer(secret)).status_code == 200

    listed = invoke("tokens", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert secret not in listed.stdout and "secret" not in listed.stdout
    assert '"name": "root"' in listed.stdout and '"role": "admin"' in listed.stdout

    again = invoke("tokens", "create", "--role", "viewer", "--name", "root")
    assert again.exit_code == 1 and "exists" in again.stderr
    bad = invoke("tokens", "create", "--role", "viewer", "--name", "auto")
    assert bad.exit_code == 1 and "reserved" in bad.stderr
    assert invoke("tokens", "create", "--role", "king", "--name", "x").exit_code == 2

    revoked = invoke("tokens", "revoke", "root")
    assert revoked.exit_code == 0 and "revoked" in revoked.stdout
    _problem(rig.client().get("/api/v1/tokens", headers=bearer(secret)), 401, "unauthenticated")
    assert invoke("tokens", "revoke", "nobody").exit_code == 1
    [created_event] = rig.events(AuditKind.TOKEN_CREATED)
    assert created_event.payload["by"].startswith("cli:")
