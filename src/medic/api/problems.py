"""Maps medic errors and request validation failures to problem+json responses.

Every error response has a stable ``code`` and a ``detail`` saying what to fix; no traceback or
internal message leaks for unexpected errors.

Refused access has its own errors (raised by ``medic.api.auth``): :class:`Unauthenticated` (401
``unauthenticated``, with ``WWW-Authenticate: Bearer``), :class:`Forbidden` (403 ``forbidden``)
and :class:`CsrfFailed` (403 ``csrf_failed``). Each one is audited (``access-denied``: method,
path, principal or ``anonymous``, why) before it is answered, within a per-caller rate: past it,
refusals are counted and the count rides on the caller's next event; past the rate shared by
all callers, they are counted and written as one summary event a minute (``medic.api.denials``).
A failing audit write is logged and never turns the refusal into a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount

from medic.api.denials import DenialLimiter, Summary
from medic.api.schemas import (
    Problem,
)
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.errors import (
    ConfigError,
    ConflictError,
    InputError,
    MedicError,
    NotFoundError,
    PolicyViolation,
    SafetyBudgetExceeded,
    StoreError,
    TransientError,
)
from medic.services import Services

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "AccessDenied",
    "CsrfFailed",
    "Forbidden",
    "Unauthenticated",
    "denied_response",
    "flush_denials",
    "install_problem_handlers",
    "problem",
]

logger = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
PROBLEM_MEDIA_TYPE = "application/problem+json"
_AUDIT_ACTOR = "medic-engine"
_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
_MAX_SUBJECT = 255


class AccessDenied(MedicError):
    """The request may not do this. ``why`` is a short reason for the audit trail, ``principal``
    the name of who asked (None: nobody authenticated)."""

    status = 403
    code = "forbidden"

    def __init__(
        self, detail: str, *, why: str, principal: str | None = None, role: str | None = None
    ) -> None:
        super().__init__(detail)
        self.why = why
        self.principal = principal
        self.role = role


class Unauthenticated(AccessDenied):
    """No usable credentials: none, malformed, unknown, revoked or expired (401)."""

    status = 401
    code = "unauthenticated"


class Forbidden(AccessDenied):
    """Authenticated, but the role (or identity) does not allow this request (403)."""


class CsrfFailed(AccessDenied):
    """A write through a console session without the session's ``X-CSRF-Token`` (403)."""

    code = "csrf_failed"


_STATUS: list[tuple[type[MedicError], int, str]] = [
    (NotFoundError, 404, "not_found"),
    (ConflictError, 409, "conflict"),
    (InputError, 422, "invalid_input"),
    (ConfigError, 422, "invalid_setting"),
    (TransientError, 503, "unavailable"),
    (StoreError, 503, "store_unavailable"),
    (SafetyBudgetExceeded, 409, "budget_exceeded"),
    (PolicyViolation, 403, "policy_violation"),
]


def problem(
    status: int,
    code: str,
    detail: str,
    title: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = Problem(title=title or code.replace("_", " "), status=status, code=code, detail=detail)
    return JSONResponse(
        body.model_dump(),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(headers) if headers else None,
    )


def _audit_denied(request: Request, exc: AccessDenied) -> None:
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:
        return
    client = request.client.host if request.client else None
    principal = exc.principal or ANONYMOUS
    now = services.clock.now()
    limiter: DenialLimiter = request.app.state.denials
    suppressed = limiter.admit((client or "-", principal), now)
    summary = limiter.summary(now)
    if summary is not None:
        _write_summary(services, now, summary)
    if suppressed is None:
        return  # counted; written with a later event (see medic.api.denials)
    payload = {
        "method": request.method,
        "path": request.url.path,
        "principal": principal,
        "role": exc.role,
        "status": exc.status,
        "code": exc.code,
        "why": exc.why,
        "client": client,
        "suppressed": suppressed,
    }
    _write_denied(services, now, request.url.path[:_MAX_SUBJECT], payload)


def flush_denials(app: FastAPI) -> None:
    """One ``access-denied`` event per caller whose refusals were counted and not yet written
    (called when the API stops, so the trail accounts for every refusal)."""
    services: Services | None = getattr(app.state, "services", None)
    limiter: DenialLimiter | None = getattr(app.state, "denials", None)
    if services is None or limiter is None:
        return
    now = services.clock.now()
    for (client, principal), count in limiter.drain().items():
        payload = {
            "principal": principal,
            "client": None if client == "-" else client,
            "why": "refusals counted and not written one by one (rate limit)",
            "suppressed": count,
        }
        _write_denied(services, now, "-", payload)
    summary = limiter.drain_global()
    if summary is not None:
        _write_summary(services, now, summary)


def _write_summary(services: Services, now: datetime, summary: Summary) -> None:
    """One event for the refusals past the rate shared by all callers (a many-address flood)."""
    payload = {
        "principal": "*",
        "client": "*",
        "why": "refusals past the audit rate of all callers together, counted and not written "
        "one by one (global rate limit)",
        "suppressed": summary.suppressed,
        "callers": summary.callers,
    }
    _write_denied(services, now, "*", payload)


def _write_denied(services: Services, now: datetime, path: str, payload: dict[str, Any]) -> None:
    event = AuditEvent(
        time=now,
        actor=_AUDIT_ACTOR,
        kind=AuditKind.ACCESS_DENIED,
        subject_type=SubjectType.API,
        subject_id=path,
        payload=payload,
    )
    try:
        services.store.append_audit(event)
    except Exception:  # the refusal stands even when it cannot be recorded
        logger.exception("could not audit a refused request to %s", path)


def _allowed(request: Request) -> str | None:
    """Every method some route takes on the request's path (None: no route there takes one),
    found by routing the path once per method as the app would."""
    allowed = []
    for method in _METHODS:
        probe: dict[str, Any] = {
            "type": "http",
            "method": method,
            "path": request.scope["path"],
            "root_path": request.scope.get("root_path", ""),
            "headers": [],
            "query_string": b"",
        }
        for route in request.app.router.routes:
            # A mount (the console) takes every method, then answers only some.
            if not isinstance(route, Mount) and route.matches(probe)[0] is Match.FULL:
                allowed.append(method)
                break
    return ", ".join(allowed) or None


async def denied_response(request: Request, exc: AccessDenied) -> JSONResponse:
    """The refusal's problem response, audited first (within the rates of ``medic.api.denials``);
    also used for a refusal decided before the app reads the body (``medic.api.limits``)."""
    # The audit write is blocking I/O: keep it off the event loop.
    await run_in_threadpool(_audit_denied, request, exc)
    response = problem(exc.status, exc.code, str(exc))
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="medic"'
    return response


def install_problem_handlers(app: FastAPI) -> None:
    app.state.denials = DenialLimiter()

    async def on_access_denied(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AccessDenied)
        return await denied_response(request, exc)

    async def on_medic_error(_: Request, exc: Exception) -> JSONResponse:
        for cls, status, code in _STATUS:
            if isinstance(exc, cls):
                return problem(status, code, str(exc))
        logger.error("unmapped medic error: %r", exc)
        return problem(500, "internal_error", "medic failed to handle the request; see its log")

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return problem(422, "invalid_request", "; ".join(parts) or "invalid request")

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = dict(exc.headers or {})
        allowed = _allowed(request) if exc.status_code == 405 else None
        if allowed:
            # Starlette's ``Allow`` names the methods of the first route on the path only.
            headers = {k: v for k, v in headers.items() if k.lower() != "allow"}
            headers["Allow"] = allowed
        return problem(exc.status_code, code, str(exc.detail), headers=headers)

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error in API request", exc_info=exc)
        return problem(500, "internal_error", "medic failed to handle the request; see its log")

    app.add_exception_handler(AccessDenied, on_access_denied)
    app.add_exception_handler(MedicError, on_medic_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
