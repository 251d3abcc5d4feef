"""API models for authentication: tokens, console sessions, run-time modes and readiness."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from medic.api.jsonschema import keys_by_pattern
from medic.api.schemas import (
    Request,
)
from medic.domain.auth import TOKEN_NAME_PATTERN, Role, Token
from medic.domain.cluster import Mode
from medic.domain.modes import ClusterModes

# --- authentication, console sessions and run-time modes --------------------------------------
TokenName = Annotated[
    str, Field(min_length=1, max_length=128, json_schema_extra={"pattern": TOKEN_NAME_PATTERN})
]
"""Checked by ``medic.domain.auth.check_token_name`` (422 ``invalid_input`` when it fails), whose
pattern the schema states; not in it: the reserved names (``medic``, ``user:...``) and that an
``agent:`` name is a detector's."""
PartitionName = Annotated[
    str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:@+-]*$")
]


class TokenIn(Request):
    """A new API token: its name (the identity it acts under) and its role."""

    name: TokenName
    role: Role


class TokenOut(BaseModel):
    name: str
    role: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None
    active: bool

    @classmethod
    def of(cls, t: Token) -> TokenOut:
        return cls(
            name=t.name,
            role=t.role.value,
            created_at=t.created_at,
            created_by=t.created_by,
            revoked_at=t.revoked_at,
            active=t.active,
        )


class TokenCreatedOut(TokenOut):
    token: str
    """The secret: send it as ``Authorization: Bearer <token>``. Shown this once only."""


class SessionIn(Request):
    """Sign in to the console with an API token."""

    token: Annotated[str, Field(min_length=1, max_length=256)]


class SessionOut(BaseModel):
    """The signed-in principal. ``csrf_token``: send it as ``X-CSRF-Token`` with every write made
    through the session cookie (None when the request used a bearer token)."""

    name: str
    role: str
    csrf_token: str | None


class ModesIn(Request):
    """A cluster's whole set of run-time modes (replaces what is stored): ``mode`` for the
    cluster (null: ``scheduler.mode`` from the settings) and the partitions that differ."""

    mode: Mode | None = None
    partitions: dict[PartitionName, Mode] = Field(
        default_factory=dict, max_length=256, json_schema_extra=keys_by_pattern
    )


class ModesOut(BaseModel):
    cluster: str
    mode: str | None
    """The stored cluster mode (null: none stored, ``default_mode`` applies)."""
    partitions: dict[str, str]
    default_mode: str
    """``scheduler.mode`` from the settings."""
    effective_mode: str
    """The mode of a job in a partition without its own mode and without a comment override."""

    @classmethod
    def of(cls, modes: ClusterModes, default: Mode) -> ModesOut:
        return cls(
            cluster=modes.cluster,
            mode=None if modes.mode is None else modes.mode.value,
            partitions={p: m.value for p, m in sorted(modes.partitions.items())},
            default_mode=default.value,
            effective_mode=modes.for_partition(None, default).value,
        )


class ReadyOut(BaseModel):
    status: str
    holder: str | None = None
    """This process's name as a lease holder (null: it runs no control loop)."""
    leases: dict[str, bool] = {}
    """The leases this process takes, and whether it holds each now: a replica that holds none
    stands by (it serves the API; another replica does the control work)."""


__all__ = [
    "ModesIn",
    "ModesOut",
    "ReadyOut",
    "SessionIn",
    "SessionOut",
    "TokenCreatedOut",
    "TokenIn",
    "TokenOut",
]
