"""The OpenAPI document's error answers (``medic.api.openapi``) and the 405 answer.

Every error status an operation lists is ``application/problem+json`` with the ``Problem``
schema, and FastAPI's own 422 (``HTTPValidationError``, ``application/json``) is nowhere. Who is
refused is read from the roles table (``test_roles_table.TABLE``): an operation that refuses
anonymous callers lists 401, one that refuses a signed-in role (or is a write, which a console
session without its CSRF token may not make) lists 403. A 405 carries ``Allow`` with every method
of the path (Starlette's names only the first route's), as problem+json.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import pytest

from medic.api.app import create_app
from medic.api.auth import WRITE_METHODS
from medic.services import Services

from .test_roles_table import ANONYMOUS, SIGNED_IN, TABLE

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
APP = create_app(cast(Services, None))
DOCUMENT: dict[str, Any] = APP.openapi()
OPERATIONS = sorted(
    (method.upper(), path, operation)
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
)
_IDS = [f"{method} {path}" for method, path, _ in OPERATIONS]


def _roles_key(method: str, path: str) -> tuple[str, str]:
    """The roles table's key: its paths keep Starlette's converters (``{key:path}``)."""
    converted = {
        "/api/v1/actions/{key}": "/api/v1/actions/{key:path}",
        "/api/v1/leases/{name}": "/api/v1/leases/{name:path}",
    }
    return (method, converted.get(path, path))


@pytest.mark.parametrize(("method", "path", "operation"), OPERATIONS, ids=_IDS)
def test_every_error_answer_is_a_problem(method: str, path: str, operation: Any) -> None:
    errors = {s: r for s, r in operation["responses"].items() if not s.startswith(("2", "3"))}

    for status, answer in errors.items():
        assert answer.get("content") == PROBLEM, f"{method} {path} {status}"
        assert answer.get("description"), f"{method} {path} {status}"
    if "401" in errors:
        assert errors["401"]["headers"]["WWW-Authenticate"]["required"] is True


def test_fastapis_validation_error_is_not_in_the_document() -> None:
    schemas = DOCUMENT["components"]["schemas"]

    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert set(schemas["Problem"]["required"]) == {"title", "status", "code", "detail"}


@pytest.mark.parametrize(("method", "path", "operation"), OPERATIONS, ids=_IDS)
def test_refusals_are_documented_as_the_roles_table_says(
    method: str, path: str, operation: Any
) -> None:
    allowed = TABLE[_roles_key(method, path)]
    statuses = set(operation["responses"])
    api = path.startswith("/api/v1/")

    assert ("401" in statuses) == (ANONYMOUS not in allowed), "401"
    refuses = bool(SIGNED_IN - allowed) or (api and method in WRITE_METHODS)
    assert ("403" in statuses) == refuses, "403"
    assert ("503" in statuses) == (path != "/healthz"), "503: every route but /healthz reads"


@pytest.mark.parametrize(("method", "path", "operation"), OPERATIONS, ids=_IDS)
def test_a_route_with_a_body_lists_400_and_422(method: str, path: str, operation: Any) -> None:
    if "requestBody" in operation:
        assert {"400", "422"} <= set(operation["responses"])
    else:
        assert "400" not in operation["responses"]


@pytest.mark.parametrize(
    ("method", "path", "also"),
    [
        ("POST", "/api/v1/actions", "200"),  # a key begun before
        ("POST", "/api/v1/repairs", "200"),  # a repeated request
        ("POST", "/api/v1/alerts", "200"),  # state: resolved
    ],
)
def test_creations_that_can_find_one_list_200_and_201(method: str, path: str, also: str) -> None:
    responses = DOCUMENT["paths"][path][method.lower()]["responses"]

    assert {"201", also} <= set(responses)
    assert "application/json" in responses[also]["content"]


@pytest.mark.parametrize(
    ("path", "statuses"),
    [
        ("/api/v1/advice/{advice_id}", {"404", "422"}),
        ("/api/v1/jobs/{job_id}/timeline", {"404", "422"}),
        ("/api/v1/repairs/{repair_id}", {"404", "422"}),
        ("/api/v1/clusters/{name}", {"404", "422"}),
        ("/api/v1/goodput", {"404", "422"}),
        ("/api/v1/jobs", set()),
        ("/api/v1/clusters", set()),
    ],
)
def test_reads_list_404_and_422_only_where_they_happen(path: str, statuses: set[str]) -> None:
    responses = set(DOCUMENT["paths"][path]["get"]["responses"])

    assert responses & {"404", "409", "422"} == statuses


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("TRACE", "/healthz", "GET"),
        ("PATCH", "/api/v1/jobs", "GET"),
        ("OPTIONS", "/api/v1/alerts", "GET, POST"),
        ("DELETE", "/api/v1/audit", "GET, POST"),
        ("POST", "/api/v1/actions/advice/1/g1/release", "GET, PUT"),
        ("PATCH", "/api/v1/session", "DELETE, GET, POST"),
    ],
)
def test_a_405_is_a_problem_naming_every_method_of_the_path(
    method: str, path: str, allow: str
) -> None:
    response = TestClient(APP).request(method, path)

    assert response.status_code == 405, response.text
    assert response.headers["allow"] == allow
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "method_not_allowed"
