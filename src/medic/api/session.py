"""Console sessions: sign in with an API token, get a cookie, send a CSRF token with writes.

=======  ======================  ===============================================================
POST     /api/v1/session         ``{"token": "..."}`` -> 200 ``{"name", "role", "csrf_token"}``
                                 and the ``medic_session`` cookie (HttpOnly, SameSite=Strict,
                                 Path=/, Secure when the request came over https; 12 hours)
GET      /api/v1/session         the signed-in principal (cookie or bearer), or 401
DELETE   /api/v1/session         sign out: 204, the cookie cleared (with a live session, the
                                 request needs its X-CSRF-Token like any write)
=======  ======================  ===============================================================

The cookie holds an opaque random session id; the store keeps only its hash, with the token it
was opened with, the CSRF token and the end time (:data:`medic.domain.auth.SESSION_TTL` after
sign-in, not extended by use). Revoking the token ends its sessions at once. Only people's
tokens (viewer, operator, admin) open console sessions; detectors and controllers use their
bearer token. Sign-ins and sign-outs are audited (``session-started``, ``session-ended``); a
refused sign-in is an ``access-denied``.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from medic.api.auth import CSRF_HEADER, SESSION_COOKIE, require
from medic.api.openapi import problems
from medic.api.problems import CsrfFailed, Forbidden, Unauthenticated
from medic.api.schemas_auth import (
    SessionIn,
    SessionOut,
)
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import SESSION_TTL, Principal, Session, hash_secret
from medic.errors import MedicError
from medic.services import Services

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["auth"])

ENGINE = "medic-engine"


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _event(kind: AuditKind, principal: Principal, session: Session, now: datetime) -> AuditEvent:
    return AuditEvent(
        time=now,
        actor=ENGINE,
        kind=kind,
        subject_type=SubjectType.TOKEN,
        subject_id=principal.name,
        payload={
            "by": principal.label,
            "role": principal.role.value,
            "expires_at": session.expires_at.isoformat(),
        },
    )


@router.post("/session", response_model=SessionOut, responses=problems(400, 401, 403, 422, 503))
def sign_in(request: Request, response: Response, body: SessionIn) -> SessionOut:
    """Open a console session with an API token (a viewer's, operator's or admin's)."""
    services = _services(request)
    store = services.tokens
    token = store.find_token(hash_secret(body.token.strip()))
    if token is None or not token.active:
        raise Unauthenticated(
            "that token is unknown or revoked",
            why="sign-in with an unknown token" if token is None else "sign-in, token revoked",
            principal=None if token is None else token.name,
        )
    principal = Principal(token.name, token.role)
    if not principal.is_person:
        raise Forbidden(
            f"{principal.label} is a program's token: console sessions are for people "
            "(viewer, operator, admin)",
            why=f"console sign-in with a {token.role.value} token",
            principal=token.name,
            role=token.role.value,
        )
    now = services.clock.now()
    session_id = secrets.token_urlsafe(32)
    session = Session(
        id_hash=hash_secret(session_id),
        token_name=token.name,
        csrf_token=secrets.token_urlsafe(32),
        created_at=now,
        expires_at=now + SESSION_TTL,
    )
    with contextlib.suppress(MedicError):  # housekeeping only; signing in does not need it
        store.purge_sessions(now)
    store.create_session(session)
    services.store.append_audit(_event(AuditKind.SESSION_STARTED, principal, session, now))
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int(SESSION_TTL.total_seconds()),
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    response.headers["Cache-Control"] = "no-store"
    return SessionOut(name=token.name, role=token.role.value, csrf_token=session.csrf_token)


@router.get("/session", response_model=SessionOut, responses=problems(401, 503))
def who_am_i(response: Response, principal: Annotated[Principal, Depends(require())]) -> SessionOut:
    """The signed-in principal; ``csrf_token`` is the session's (None for a bearer token)."""
    response.headers["Cache-Control"] = "no-store"
    csrf = principal.session.csrf_token if principal.session is not None else None
    return SessionOut(name=principal.name, role=principal.role.value, csrf_token=csrf)


@router.delete("/session", status_code=204, responses=problems(403, 503))
def sign_out(request: Request) -> Response:
    """End the console session (if any) and clear its cookie."""
    services = _services(request)
    response = Response(status_code=204)
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        store = services.tokens
        session = store.get_session(hash_secret(session_id))
        now = services.clock.now()
        if session is not None and not session.expired(now):
            sent = request.headers.get(CSRF_HEADER, "")
            if not sent or not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
                raise CsrfFailed(
                    f"signing out of a console session needs its {CSRF_HEADER} header",
                    why="csrf token missing" if not sent else "csrf token mismatch",
                    principal=session.token_name,
                )
            token = store.get_token(session.token_name)
            store.delete_session(session.id_hash)
            if token is not None:
                principal = Principal(token.name, token.role)
                event = _event(AuditKind.SESSION_ENDED, principal, session, now)
                services.store.append_audit(event)
        elif session is not None:
            store.delete_session(session.id_hash)
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return response
