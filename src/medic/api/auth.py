"""Authentication and roles of the HTTP API.

Every route depends on :func:`require` (or, where signing in is optional, on
:func:`current_principal`), which resolves the caller once per request:

1. ``Authorization: Bearer <token>``: the token whose SHA-256 hash is stored, not revoked. A
   malformed header or an unknown or revoked token is a 401, never a fall-back to the cookie.
2. Else the console's ``medic_session`` cookie: a stored, unexpired session whose token is not
   revoked. A write (POST, PUT, PATCH, DELETE) through a session must echo the session's CSRF
   token in ``X-CSRF-Token`` (403 ``csrf_failed`` otherwise); a bearer request needs none, a
   browser never adds that header by itself.
3. Else nobody: 401 ``unauthenticated`` with ``WWW-Authenticate: Bearer``.

A request that carries a body to a route needing credentials is authenticated before its body is
read (:func:`refuse_before_body`, run by ``medic.api.limits.BodyGuard``): FastAPI reads and parses
a body before it resolves dependencies, so otherwise anyone could make the server read and parse
bodies without a token.

Then the role must be one the route names (``admin`` may do everything): 403 ``forbidden``
otherwise. Every 401 and 403 is audited as ``access-denied`` (see ``medic.api.problems``).

Open without a token: ``/healthz``, ``/readyz``, ``/metrics`` (probes and Prometheus scrapes
carry no secrets and reveal no job data), the OpenAPI document and its docs page (they describe
the API, not its data), ``POST /api/v1/session`` (signing in) and ``DELETE /api/v1/session``
(signing out is always allowed; with a live session it needs the CSRF token).

Tokens are created with ``medic tokens create`` or ``POST /api/v1/tokens`` (admin), shown once and
stored hashed (:mod:`medic.domain.auth`); ``/api/v1/tokens`` lists (no secrets) and revokes them.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, cast

from fastapi import APIRouter, Depends, Path, Request, Security
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Scope

from medic.api.openapi import problems
from medic.api.problems import (
    AccessDenied,
    CsrfFailed,
    Forbidden,
    Unauthenticated,
    denied_response,
)
from medic.api.schemas_auth import (
    TokenCreatedOut,
    TokenIn,
    TokenOut,
)
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import (
    Principal,
    Role,
    Token,
    Via,
    check_token_name,
    hash_secret,
    new_secret,
)
from medic.errors import MedicError, NotFoundError
from medic.ports import AuditLog, TokenStore
from medic.services import Services

__all__ = [
    "CSRF_HEADER",
    "READERS",
    "SESSION_COOKIE",
    "WRITE_METHODS",
    "current_principal",
    "issue_token",
    "refuse_before_body",
    "require",
    "revoke_token",
    "router",
    "startup_notice",
]

logger = logging.getLogger(__name__)

SESSION_COOKIE = "medic_session"
CSRF_HEADER = "X-CSRF-Token"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
READERS = (Role.VIEWER, Role.OPERATOR)
"""Who reads everything (``admin`` too, as always)."""
ENGINE = "medic-engine"
PROTECTED_PREFIX = "/api/v1/"
OPEN_PATHS = frozenset({"/api/v1/session"})
"""The API paths a caller reaches without credentials (signing in and out)."""
_STATE_KEY = "medic_principal"
_UNRESOLVED = object()

# Declared for the OpenAPI document (and its "Authorize" button); the resolution itself is
# :func:`authenticate`, which also refuses what these would silently ignore.
_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="An API token: `medic tokens create --role ROLE --name NAME`.",
)
_COOKIE = APIKeyCookie(
    name=SESSION_COOKIE,
    auto_error=False,
    scheme_name="session",
    description="The console's session (POST /api/v1/session); writes need X-CSRF-Token.",
)


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


# --- resolving the caller ------------------------------------------------------------------------
def authenticate(request: Request) -> Principal | None:
    """The request's principal (None: no credentials at all); raises :class:`Unauthenticated`
    for bad credentials and :class:`CsrfFailed` for a session write without its CSRF token.
    Resolved once per request."""
    cached = getattr(request.state, _STATE_KEY, _UNRESOLVED)
    if cached is not _UNRESOLVED:
        return cast(Principal | None, cached)
    principal = _resolve(request)
    setattr(request.state, _STATE_KEY, principal)
    return principal


def _resolve(request: Request) -> Principal | None:
    services = _services(request)
    header = request.headers.get("authorization")
    if header is not None:
        return _bearer(services.tokens, header)
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        return _session(request, services, session_id)
    return None


def _bearer(store: TokenStore, header: str) -> Principal:
    scheme, _, secret = header.strip().partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise Unauthenticated(
            "malformed Authorization header: send `Authorization: Bearer <token>`",
            why="malformed authorization header",
        )
    token = store.find_token(hash_secret(secret))
    if token is None:
        raise Unauthenticated("unknown API token", why="unknown token")
    if not token.active:
        raise Unauthenticated(
            f"API token {token.name!r} was revoked; ask an admin for a new one",
            why="token revoked",
            principal=token.name,
            role=token.role.value,
        )
    return Principal(token.name, token.role, Via.BEARER)


def _session(request: Request, services: Services, session_id: str) -> Principal:
    store = services.tokens
    session = store.get_session(hash_secret(session_id))
    now = services.clock.now()
    if session is None or session.expired(now):
        if session is not None:
            store.delete_session(session.id_hash)
        raise Unauthenticated(
            "the console session ended or is unknown: sign in again (POST /api/v1/session)",
            why="session expired" if session is not None else "unknown session",
        )
    token = store.get_token(session.token_name)
    if token is None or not token.active:
        raise Unauthenticated(
            "the token this session was opened with was revoked: sign in again",
            why="token revoked",
            principal=session.token_name,
        )
    if request.method in WRITE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
            raise CsrfFailed(
                f"a write through a console session must send the session's {CSRF_HEADER} "
                "header (from POST or GET /api/v1/session)",
                why="csrf token missing" if not sent else "csrf token mismatch",
                principal=token.name,
                role=token.role.value,
            )
    return Principal(token.name, token.role, Via.SESSION, session)


def _no_credentials() -> Unauthenticated:
    return Unauthenticated(
        "sign in: send `Authorization: Bearer <token>` (medic tokens create) or use a "
        "console session",
        why="no credentials",
    )


async def refuse_before_body(scope: Scope) -> ASGIApp | None:
    """The refusal (audited) of a request to a route needing credentials whose caller has none
    that are valid, decided from its headers before its body is read; None to go on. The
    principal found is kept for the route, which does not look it up again."""
    path: str = scope.get("path", "")
    if not path.startswith(PROTECTED_PREFIX) or path in OPEN_PATHS:
        return None
    request = Request(scope)
    try:
        principal = await run_in_threadpool(authenticate, request)
    except AccessDenied as exc:
        return await denied_response(request, exc)
    except MedicError:
        return None  # the store cannot tell now: the route answers as it would have (503)
    if principal is None:
        return await denied_response(request, _no_credentials())
    return None


_Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
_Cookie = Annotated[str | None, Security(_COOKIE)]


def current_principal(
    request: Request, _bearer: _Bearer = None, _cookie: _Cookie = None
) -> Principal | None:
    """Optional authentication: the principal, or None for a request without credentials (bad
    credentials are still a 401)."""
    return authenticate(request)


def require(*roles: Role) -> Callable[..., Principal]:
    """A dependency that answers the request's :class:`Principal` when its role is one of
    ``roles`` or admin; no ``roles``: any signed-in principal. 401/403 otherwise (audited)."""
    allowed = (frozenset(roles) | {Role.ADMIN}) if roles else frozenset(Role)
    names = ", ".join(sorted(r.value for r in allowed))

    def dependency(request: Request, _bearer: _Bearer = None, _cookie: _Cookie = None) -> Principal:
        principal = authenticate(request)
        if principal is None:
            raise _no_credentials()
        if principal.role not in allowed:
            raise Forbidden(
                f"{principal.label} (role {principal.role.value}) may not "
                f"{request.method} {request.url.path}: it needs role {names}",
                why=f"role {principal.role.value} not in {names}",
                principal=principal.name,
                role=principal.role.value,
            )
        return principal

    dependency.__name__ = f"require_{'_'.join(sorted(r.value for r in allowed))}"
    return dependency


# --- tokens --------------------------------------------------------------------------------------
def _token_event(kind: AuditKind, token: Token, now: datetime, by: str) -> AuditEvent:
    return AuditEvent(
        time=now,
        actor=ENGINE,
        kind=kind,
        subject_type=SubjectType.TOKEN,
        subject_id=token.name,
        payload={"name": token.name, "role": token.role.value, "by": by},
    )


def issue_token(
    tokens: TokenStore, audit: AuditLog, name: str, role: Role, now: datetime, by: str
) -> tuple[Token, str]:
    """Create a token and return it with its secret (the only time the secret exists outside
    the caller's hands); audited (``token-created``). ``by``: who asked (``user:alice``,
    ``cli:root``). ``InputError`` for a bad name, ``ConflictError`` for a name in use."""
    secret = new_secret()
    token = Token(
        name=check_token_name(name, role),
        role=role,
        secret_hash=hash_secret(secret),
        created_at=now,
        created_by=by,
    )
    tokens.create_token(token)
    audit.append_audit(_token_event(AuditKind.TOKEN_CREATED, token, now, by))
    return token, secret


def revoke_token(tokens: TokenStore, audit: AuditLog, name: str, now: datetime, by: str) -> Token:
    """Revoke the token ``name`` and end its console sessions; audited (``token-revoked``) when
    it was active. ``NotFoundError`` for an unknown name."""
    before = tokens.get_token(name)
    if before is None:
        raise NotFoundError(f"no token is named {name!r}; list them at /api/v1/tokens")
    revoked = tokens.revoke_token(name, now)
    if before.active:
        audit.append_audit(_token_event(AuditKind.TOKEN_REVOKED, revoked, now, by))
    return revoked


def startup_notice(tokens: TokenStore) -> str | None:
    """What to tell an operator whose medic has no active token yet (None when one exists)."""
    if any(t.active for t in tokens.list_tokens()):
        return None
    return (
        "no API token exists yet: every API request except /healthz, /readyz and /metrics "
        "answers 401. Create an admin token (printed once) with: "
        "medic tokens create --role admin --name NAME"
    )


router = APIRouter(prefix="/api/v1", tags=["auth"], responses=problems(401, 403, 503))
TokenName = Annotated[str, Path(min_length=1, max_length=128, description="Token name")]


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(
    request: Request, _: Annotated[Principal, Depends(require(Role.ADMIN))]
) -> list[TokenOut]:
    """Every token, revoked ones included (never a secret)."""
    return [TokenOut.of(t) for t in _services(request).tokens.list_tokens()]


@router.post(
    "/tokens",
    response_model=TokenCreatedOut,
    status_code=201,
    responses=problems(400, 409, 422),
)
def create_token(
    request: Request,
    body: TokenIn,
    principal: Annotated[Principal, Depends(require(Role.ADMIN))],
) -> TokenCreatedOut:
    """Create a token; the answer holds its secret, which is never shown again."""
    services = _services(request)
    token, secret = issue_token(
        services.tokens, services.store, body.name, body.role, services.clock.now(), principal.label
    )
    return TokenCreatedOut(**TokenOut.of(token).model_dump(), token=secret)


@router.delete("/tokens/{name}", response_model=TokenOut, responses=problems(404, 422))
def delete_token(
    request: Request,
    name: TokenName,
    principal: Annotated[Principal, Depends(require(Role.ADMIN))],
) -> TokenOut:
    """Revoke a token (and end its console sessions); revoking twice changes nothing."""
    services = _services(request)
    revoked = revoke_token(
        services.tokens, services.store, name, services.clock.now(), principal.label
    )
    return TokenOut.of(revoked)
