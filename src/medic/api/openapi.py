"""What the OpenAPI document says about errors: each route lists the error statuses it can
answer, and every one of them is ``application/problem+json`` (:class:`~medic.api.schemas.Problem`,
written by ``medic.api.problems``).

A router or a route passes ``responses=problems(401, 403, 503)``. The statuses and what each one
means here:

===  ==================================================================================
400  the body cannot be read (not UTF-8): routes with a body
401  no usable credentials: every route that needs a token or a console session
403  the role, the identity a body claims, a console write without ``X-CSRF-Token``
404  an id or a name that names nothing
409  the stored state says no: a name in use, a repair no longer pending, a guardrail
422  the parameters or the body are invalid, or break a rule of medic's
503  the store does not answer (or keeps no such thing): every route that reads it
===  ==================================================================================

FastAPI documents a 422 of its own (``HTTPValidationError``, ``application/json``) on every route
with parameters that declares none; :func:`install_openapi` takes those out (a route that can
answer 422 declares it, as problem+json) and adds ``Problem`` to the document's schemas.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from medic.api.problems import PROBLEM_MEDIA_TYPE
from medic.api.schemas import Problem

__all__ = ["install_openapi", "problems"]

REF = "#/components/schemas/{model}"
WHY = {
    400: "The body cannot be read (not UTF-8): `http_error`",
    401: "No usable credentials (none, unknown, revoked or expired): `unauthenticated`",
    403: (
        "Not allowed: the role, the identity the body claims or a console write without "
        "X-CSRF-Token (`forbidden`, `csrf_failed`, `policy_violation`)"
    ),
    404: "No such thing: `not_found`",
    409: "The stored state refuses it: `conflict`, `budget_exceeded`",
    422: (
        "Invalid parameters or body (`invalid_request`) or a rule they break "
        "(`invalid_input`, `invalid_setting`)"
    ),
    503: "The store does not answer or keeps no such thing: `store_unavailable`, `unavailable`",
}
_CHALLENGE = {
    "WWW-Authenticate": {
        "description": 'Always `Bearer realm="medic"`',
        "required": True,
        "schema": {"type": "string"},
    }
}
_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, each a problem+json ``Problem``."""
    found: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        answer: dict[str, Any] = {
            "description": WHY[status],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": REF.format(model="Problem")}}},
        }
        if status == 401:
            answer["headers"] = _CHALLENGE
        found[status] = answer
    return found


def install_openapi(app: FastAPI) -> None:
    """Serve ``app``'s document with ``Problem`` in it and without FastAPI's default 422s."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _problems_only(build())
        assert app.openapi_schema is not None  # set by build()
        return app.openapi_schema

    setattr(app, "openapi", openapi)  # noqa: B010 (mypy refuses assigning to a method)


def _problems_only(document: dict[str, Any]) -> None:
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            if _fastapi_default(responses.get("422")):
                del responses["422"]
            operation["responses"] = dict(sorted(responses.items()))
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    for name in _VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    schemas["Problem"] = Problem.model_json_schema(ref_template=REF, mode="serialization")
    document["components"]["schemas"] = dict(sorted(schemas.items()))


def _fastapi_default(answer: dict[str, Any] | None) -> bool:
    if answer is None:
        return False
    schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref") == REF.format(model="HTTPValidationError"))
