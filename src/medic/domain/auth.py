"""Who may use the HTTP API: roles, API tokens, console sessions and the principal of a request.

A token is a high-entropy secret (``medic_`` + 32 random bytes, URL-safe base64) that is shown
once, when it is created, and stored only as its SHA-256 hash; a plain hash is enough because the
secret cannot be guessed, so the hash needs no salt or slow key derivation. A token has a unique
``name``, which is the identity it acts under (a detector's name, a person's login, a
controller's), and one :class:`Role`:

=============  ==================================================================================
viewer         every read
operator       approve, reject, cancel, change a repair's action, ask for a repair as a person,
               switch observe/act modes, reset the circuit breaker; plus every read
detector       post alerts and repair requests as itself only (its name is its detector identity);
               nothing else, not even reads
controller     the advice feed and one advice, reconciliation reports, the step ledger
               (``/api/v1/actions``) and the controller's audit events
admin          everything, including tokens and the repair policy
=============  ==================================================================================

A console session is opened with a token and lives :data:`SESSION_TTL` at most; the browser holds
an opaque session id (only its hash is stored) and sends a CSRF token with every write.
"""

from __future__ import annotations

import enum
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from medic.errors import InputError

__all__ = [
    "RESERVED_TOKEN_NAMES",
    "SESSION_TTL",
    "TOKEN_NAME_PATTERN",
    "TOKEN_PREFIX",
    "Principal",
    "Role",
    "Session",
    "Token",
    "Via",
    "check_token_name",
    "hash_secret",
    "new_secret",
]

TOKEN_PREFIX = "medic_"
"""Every token starts with it, so a leaked one is easy to recognise (and to scan for)."""
SESSION_TTL = timedelta(hours=12)
"""A console session ends this long after sign-in, whatever happens in between."""

TOKEN_NAME_PATTERN = r"^[A-Za-z0-9][\w.@+-]{0,63}(?::[A-Za-z0-9][\w.@+-]{0,62})?$"
"""What :func:`check_token_name` matches (reserved names aside): at most 64, one ``:part``."""
_NAME = re.compile(TOKEN_NAME_PATTERN)
RESERVED_TOKEN_NAMES = frozenset(
    {
        "anonymous",
        "auto",
        "medic",
        "medic-engine",
        "medic-controller",
        "medic-watchdog",
    }
)
"""Names medic itself writes under (audit actors, approvals); no token may take one."""
_RESERVED_PREFIXES = ("user:", "detector:", "controller:", "cli:")


class Role(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    DETECTOR = "detector"
    CONTROLLER = "controller"
    ADMIN = "admin"


class Via(enum.StrEnum):
    """How a request proved who it is."""

    BEARER = "bearer"
    SESSION = "session"


@dataclass(frozen=True, slots=True)
class Token:
    """A stored API token (never the secret itself)."""

    name: str
    role: Role
    secret_hash: str
    """SHA-256 of the secret, hex."""
    created_at: datetime
    created_by: str
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class Session:
    """A console session: the hash of the cookie's session id, the token it was opened with, the
    CSRF token the browser must echo on writes, and when it ends."""

    id_hash: str
    token_name: str
    csrf_token: str
    created_at: datetime
    expires_at: datetime

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller of one request."""

    name: str
    role: Role
    via: Via = Via.BEARER
    session: Session | None = None

    @property
    def is_person(self) -> bool:
        """Viewers, operators and admins are people; detectors and controllers are programs."""
        return self.role in (Role.VIEWER, Role.OPERATOR, Role.ADMIN)

    @property
    def label(self) -> str:
        """``user:alice``, ``detector:nvsentinel`` or ``controller:slurm-a`` (audit payloads)."""
        kind = "user" if self.is_person else self.role.value
        return f"{kind}:{self.name}"


def new_secret() -> str:
    """A fresh token secret: ``medic_`` and 32 random bytes (URL-safe base64)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    """What the store keeps of a secret (a token's, or a session id): SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def check_token_name(name: str, role: Role) -> str:
    """``name`` when it can name a token of ``role``; ``InputError`` otherwise.

    Letters, digits and ``_.@+-`` (at most 64), optionally one ``:``-separated part of at most
    63 (a node agent's ``agent:gpu-node-017``); never one of medic's own names or a ``user:``,
    ``detector:``, ``controller:`` or ``cli:`` prefix (the API adds those itself); ``agent:``
    names are detectors'.
    """
    if not _NAME.fullmatch(name):
        raise InputError(
            "name",
            f"{name!r} is not a valid token name (letters, digits and _.@+-, at most 64, starting "
            "with a letter or digit, optionally one ':part')",
        )
    if name.lower() in RESERVED_TOKEN_NAMES or name.lower().startswith(_RESERVED_PREFIXES):
        raise InputError("name", f"{name!r} is reserved for medic's own use")
    if name.startswith("agent:") and role is not Role.DETECTOR:
        raise InputError("name", f"{name!r}: agent: names are node agents, role detector")
    return name
