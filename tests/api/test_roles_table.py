"""Who may call what: every route of the app, enumerated from ``app.routes``, against every kind
of caller (anonymous, viewer, operator, detector, controller, admin), per the table below.

A caller is *allowed* when the answer is neither 401 nor 403 (a 404 for an id that does not exist
or a 422 for a body the route refuses still means the caller got past authentication and roles),
and *denied* when it is 401 (anonymous) or 403; every denied attempt is in the audit trail as an
``access-denied`` event naming the method, the path and the caller. A route without an entry
fails the test: adding an endpoint means deciding who may call it, here.
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from starlette.routing import Mount, Route

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

ANONYMOUS = "anonymous"
CALLERS = (ANONYMOUS, *(role.value for role in Role))
"""``anonymous`` and one token per role, named after its role."""

EVERYONE = frozenset(CALLERS)
SIGNED_IN = EVERYONE - {ANONYMOUS}
READERS = frozenset({"viewer", "operator", "admin"})
ADVICE_READERS = READERS | {"controller"}
CONTROLLER = frozenset({"controller", "admin"})
DETECTOR = frozenset({"detector", "admin"})
REQUESTERS = frozenset({"detector", "operator", "admin"})
OPERATOR = frozenset({"operator", "admin"})
ADMIN = frozenset({"admin"})
PEOPLE = frozenset({"viewer", "operator", "admin"})

TABLE: dict[tuple[str, str], frozenset[str]] = {
    # open: probes, metrics, the API's own description, signing in and out
    ("GET", "/healthz"): EVERYONE,
    ("GET", "/readyz"): EVERYONE,
    ("GET", "/metrics"): EVERYONE,
    ("GET", "/api/openapi.json"): EVERYONE,
    ("GET", "/api/docs"): EVERYONE,
    ("GET", "/docs/oauth2-redirect"): EVERYONE,
    ("POST", "/api/v1/session"): PEOPLE,  # with the caller's own token in the body
    ("GET", "/api/v1/session"): SIGNED_IN,
    ("DELETE", "/api/v1/session"): EVERYONE,
    # reads
    ("GET", "/api/v1/jobs"): READERS,
    ("GET", "/api/v1/jobs/{job_id}/timeline"): READERS,
    ("GET", "/api/v1/nodes"): READERS,
    ("GET", "/api/v1/audit"): READERS,
    ("GET", "/api/v1/alerts"): READERS,
    ("GET", "/api/v1/repairs"): READERS,
    ("GET", "/api/v1/repairs/{repair_id}"): READERS,
    ("GET", "/api/v1/policy/repair"): READERS,
    ("GET", "/api/v1/policy/modes"): READERS,
    ("GET", "/api/v1/breaker"): READERS,
    ("GET", "/api/v1/clusters"): READERS,
    ("GET", "/api/v1/clusters/{name}"): READERS,
    ("GET", "/api/v1/goodput"): READERS,
    ("GET", "/api/v1/advice"): ADVICE_READERS,
    ("GET", "/api/v1/advice/{advice_id}"): ADVICE_READERS,
    ("GET", "/api/v1/actions/{key:path}"): ADVICE_READERS,
    ("GET", "/api/v1/leases"): ADVICE_READERS,
    # a controller's writes
    ("PUT", "/api/v1/advice/{advice_id}/reconciliation"): CONTROLLER,
    ("POST", "/api/v1/actions"): CONTROLLER,
    ("PUT", "/api/v1/actions/{key:path}"): CONTROLLER,
    ("POST", "/api/v1/audit"): CONTROLLER,
    ("PUT", "/api/v1/leases/{name:path}"): CONTROLLER,
    ("DELETE", "/api/v1/leases/{name:path}"): CONTROLLER,
    # detectors' intake (and a person's repair request)
    ("POST", "/api/v1/alerts"): DETECTOR,
    ("POST", "/api/v1/repairs"): REQUESTERS,
    # operators' decisions
    ("POST", "/api/v1/alerts/{alert_id}/resolve"): OPERATOR,
    ("POST", "/api/v1/repairs/{repair_id}/approve"): OPERATOR,
    ("POST", "/api/v1/repairs/{repair_id}/reject"): OPERATOR,
    ("POST", "/api/v1/repairs/{repair_id}/cancel"): OPERATOR,
    ("PUT", "/api/v1/repairs/{repair_id}/action"): OPERATOR,
    ("POST", "/api/v1/breaker/reset"): OPERATOR,
    ("PUT", "/api/v1/policy/modes"): OPERATOR,
    # admins only
    ("PUT", "/api/v1/policy/repair"): ADMIN,
    ("GET", "/api/v1/tokens"): ADMIN,
    ("POST", "/api/v1/tokens"): ADMIN,
    ("DELETE", "/api/v1/tokens/{name}"): ADMIN,
}

OPTIONAL: dict[tuple[str, str], frozenset[str]] = {
    # the web console, once mounted beside the API: a static page that signs in by itself
    ("GET", "/"): EVERYONE,
    ("GET", "/console/static"): EVERYONE,
}
"""Checked when the app has them, not required."""

PATH_VALUES = {"job_id": "1", "advice_id": "1", "key:path": "roles/k1", "repair_id": "1"}
PATH_VALUES["name"] = "nobody"
_PARAM = re.compile(r"\{([^}]+)\}")
_COUNTER = itertools.count(1)


def app_routes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every route and mount of ``app`` (HEAD answers like GET: left out)."""
    return sorted(set(_walk(app.routes)))


def _walk(routes: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    for route in routes:
        if hasattr(route, "effective_candidates"):
            # FastAPI resolves an included router lazily: its routes, with their full paths.
            yield from _walk(route.effective_candidates(), prefix)
        elif hasattr(route, "original_route"):  # one route of an included router
            methods = getattr(route.original_route, "methods", None) or {"GET"}
            yield from ((m, prefix + route.path) for m in sorted(set(methods) - {"HEAD"}))
        elif isinstance(route, Mount):
            yield ("GET", prefix + route.path)
        elif isinstance(route, Route):
            yield from (
                (m, prefix + route.path) for m in sorted((route.methods or {"GET"}) - {"HEAD"})
            )
        else:  # a websocket, or a kind of route nobody decided on yet
            yield ("?", prefix + str(getattr(route, "path", repr(route))))


# The routes, read from an app built over nothing: only the routing table is looked at.
ROUTES = app_routes(create_app(cast(Services, None)))


@dataclass
class Rig:
    services: Services
    client: TestClient
    tokens: dict[str, str]
    clock: FakeClock


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    db = tmp_path_factory.mktemp("roles") / "medic.db"
    clock = FakeClock()
    overrides: dict[str, object] = {
        "store.url": f"sqlite:///{db}",
        "sim.nodes": 4,
        "sim.jobs": 1,
        "sim.nodes_per_job": 1,
    }
    services = build(load_settings(env={}, overrides=overrides), clock=clock, start_workload=True)
    services.loop.run_once()
    tokens = {role.value: grant(services.store, role) for role in Role}
    try:
        yield Rig(services, TestClient(create_app(services)), tokens, clock)
    finally:
        services.close()


def _url(path: str) -> str:
    return _PARAM.sub(lambda m: PATH_VALUES.get(m.group(1), "x"), path)


def _body(method: str, path: str, caller: str, rig: Rig) -> Any:
    """A body the route takes from a caller it allows (what it does then does not matter here)."""
    n = next(_COUNTER)
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/api/v1/session"): {"token": rig.tokens.get(caller, "medic_not-a-token")},
        ("POST", "/api/v1/actions"): {"key": f"roles/{n}", "cluster": "sim", "kind": "release"},
        ("PUT", "/api/v1/actions/{key:path}"): {"status": "succeeded"},
        ("PUT", "/api/v1/leases/{name:path}"): {"holder": f"roles-{n}", "ttl_seconds": 5},
        ("PUT", "/api/v1/advice/{advice_id}/reconciliation"): {
            "observed_generation": 1,
            "status": "converged",
            "reason": "roles",
        },
        ("POST", "/api/v1/audit"): {
            "actor": "medic-controller",
            "kind": "action-started",
            "subject_type": "job",
            "subject_id": "1",
        },
        ("POST", "/api/v1/alerts"): {
            "cluster": "sim",
            "node": "node001",
            "key": f"agent:roles_{n}",
            "detector": caller,
            "summary": "roles table",
        },
        ("POST", "/api/v1/repairs"): {
            "cluster": "sim",
            "node": "node001",
            "action": "reboot",
            "reason": "roles table",
            "request_id": f"roles-{n}",
        },
        ("PUT", "/api/v1/repairs/{repair_id}/action"): {"action": "reboot"},
        ("PUT", "/api/v1/policy/repair"): {},
        ("PUT", "/api/v1/policy/modes"): {"mode": None, "partitions": {}},
        ("POST", "/api/v1/tokens"): {"name": f"made-by-{caller}-{n}", "role": "viewer"},
    }
    return bodies.get((method, path))


def _call(rig: Rig, method: str, path: str, caller: str) -> Any:
    headers = bearer(rig.tokens[caller]) if caller != ANONYMOUS else {}
    body = _body(method, path, caller, rig)
    rig.client.cookies.clear()  # a session from an earlier sign-in must not speak for anyone
    # one caller's refusals are written one by one up to a rate (medic.api.denials): space the
    # calls so that each refusal here is its own event
    rig.clock.advance(10.0)
    return rig.client.request(method, _url(path), headers=headers, json=body)


def test_every_route_has_an_entry() -> None:
    missing = [route for route in ROUTES if route not in TABLE and route not in OPTIONAL]
    assert missing == [], f"decide who may call these and add them to TABLE: {missing}"
    stale = [route for route in TABLE if route not in ROUTES]
    assert stale == [], f"TABLE names routes the app does not have: {stale}"


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_route_allows_exactly_the_callers_in_the_table(
    rig: Rig, method: str, path: str, caller: str
) -> None:
    allowed = {**TABLE, **OPTIONAL}.get((method, path))
    assert allowed is not None, f"{method} {path} has no entry in TABLE"
    before = rig.services.store.query_audit(kind=AuditKind.ACCESS_DENIED, limit=100_000)
    after_id = before[-1].id if before else None

    response = _call(rig, method, path, caller)

    denied = rig.services.store.query_audit(
        kind=AuditKind.ACCESS_DENIED, after_id=after_id, limit=100
    )
    if caller in allowed:
        assert response.status_code not in (401, 403), (caller, response.text)
        assert denied == []
        return
    assert response.status_code in (401, 403), (caller, response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    expected = "unauthenticated" if response.status_code == 401 else "forbidden"
    assert response.json()["code"] == expected
    if response.status_code == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert [(e.payload["method"], e.payload["path"], e.payload["principal"]) for e in denied] == [
        (method, _url(path), caller)
    ]
    assert denied[0].payload["status"] == response.status_code and denied[0].payload["why"]
