"""Maps medic errors and request validation failures to problem+json responses.

Every error response has a stable ``code`` and a ``detail`` saying what to fix; no traceback or
internal message leaks for unexpected errors.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from medic.api.schemas import Problem
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

__all__ = ["install_problem_handlers", "problem"]

logger = logging.getLogger(__name__)

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


def problem(status: int, code: str, detail: str, title: str | None = None) -> JSONResponse:
    body = Problem(title=title or code.replace("_", " "), status=status, code=code, detail=detail)
    return JSONResponse(
        body.model_dump(), status_code=status, media_type="application/problem+json"
    )


def install_problem_handlers(app: FastAPI) -> None:
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

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return problem(exc.status_code, code, str(exc.detail))

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error in API request", exc_info=exc)
        return problem(500, "internal_error", "medic failed to handle the request; see its log")

    app.add_exception_handler(MedicError, on_medic_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
