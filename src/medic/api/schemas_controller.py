"""API models of the advice API's controller requests: reconciliation reports, ledger steps and
the audit events a controller may write."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator

from medic.api.jsonschema import only
from medic.api.schemas import MAX_PAYLOAD_BYTES, ActionOut, Name, Reason, Request
from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.advice import Reconciliation
from medic.domain.audit import AuditKind, SubjectType
from medic.domain.cluster import Mode
from medic.domain.leases import Lease

__all__ = [
    "CONTROLLER_AUDIT_KINDS",
    "ActionBeginIn",
    "ActionFinishIn",
    "ActionRecordOut",
    "AuditIn",
    "LeaseIn",
    "LeaseOut",
    "ReconciliationIn",
]

ActionKey = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\w.:@+/-]+$")]
"""An idempotency key such as ``advice/12/g1/requeue_hold``."""
LeaseName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[\w.:@+/-]+$")]
"""A lease such as ``controller/alpha``."""
Holder = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[\w.:@+-]+$")]
"""A lease holder such as ``host:pid:nonce``."""
Token = Annotated[int, Field(ge=1, le=2**31 - 1)]


class BegunByIn(Request):
    """Which try of a step an outcome is for: the holder that began it and its fencing token."""

    holder: Holder
    token: Token


class FenceIn(BegunByIn):
    """What a fenced step is recorded under: a lease, its holder and its fencing token."""

    lease: LeaseName


CONTROLLER_AUDIT_KINDS = frozenset(
    {
        AuditKind.ACTION_STARTED,
        AuditKind.ACTION_SUCCEEDED,
        AuditKind.ACTION_FAILED,
        AuditKind.ACTION_SKIPPED,
        AuditKind.RECONCILIATION,
    }
)
"""What a controller may write to the audit trail; the rest is the engine's to say."""
FINISHED = frozenset(ActionStatus) - {ActionStatus.STARTED}
"""How a step can end."""


class ReconciliationIn(Request):
    """A controller's report on one generation of advice (idempotent)."""

    observed_generation: int = Field(ge=1, le=2**31 - 1)
    status: Reconciliation
    reason: Reason


class ActionBeginIn(Request):
    """A controller announces one scheduler step under its idempotency key."""

    key: ActionKey
    cluster: Name
    kind: ActionKind
    job_id: Name | None = None
    node: Name | None = None
    advice_id: int | None = Field(default=None, ge=1)
    fence: FenceIn | None = None
    """A fenced step: refused (409) unless ``fence`` is the lease's current holder and token and
    the lease has not run out, checked in the transaction that records it; a step whose last try
    failed is then begun again (201)."""


class ActionFinishIn(Request):
    """The outcome of a step begun with ``POST /api/v1/actions``."""

    status: Annotated[ActionStatus, only(*FINISHED)]
    error: str | None = Field(default=None, max_length=2000)
    begun_by: BegunByIn | None = None
    """Record the outcome only of the try this holder began under this token (409 when another
    holder took the step over since)."""

    @field_validator("status")
    @classmethod
    def _final(cls, status: ActionStatus) -> ActionStatus:
        if status is ActionStatus.STARTED:
            raise ValueError("a finished step is succeeded, failed or skipped")
        return status


class ActionRecordOut(ActionOut):
    """One step of the ledger, with the cluster it ran on."""

    cluster: str

    @classmethod
    def of(cls, a: ActionRecord) -> ActionRecordOut:
        return cls(cluster=a.cluster, **ActionOut.of(a).model_dump())


class AuditIn(Request):
    """One audit event from a controller; the API stamps the time and prefixes the actor."""

    actor: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.:@-]+$")]
    kind: Annotated[AuditKind, only(*CONTROLLER_AUDIT_KINDS)]
    subject_type: SubjectType
    subject_id: Annotated[str, Field(min_length=1, max_length=256)]
    cluster: Name | None = None
    action: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    mode: Mode | None = None
    payload: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kind")
    @classmethod
    def _controller_kind(cls, kind: AuditKind) -> AuditKind:
        if kind not in CONTROLLER_AUDIT_KINDS:
            allowed = ", ".join(sorted(k.value for k in CONTROLLER_AUDIT_KINDS))
            raise ValueError(f"a controller writes only {allowed}")
        return kind

    @field_validator("payload")
    @classmethod
    def _small(cls, payload: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(payload, default=str)) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload larger than {MAX_PAYLOAD_BYTES} bytes of JSON")
        return payload


class LeaseIn(Request):
    """Take or renew a lease for ``holder`` (``PUT /api/v1/leases/{name}``)."""

    holder: Holder
    ttl_seconds: float = Field(ge=1.0, le=3600.0)


class LeaseOut(BaseModel):
    """A lease as it stands: the caller's when ``holder`` is the caller, else the live holder's."""

    name: str
    holder: str
    token: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime

    @classmethod
    def of(cls, lease: Lease) -> LeaseOut:
        return cls(
            name=lease.name,
            holder=lease.holder,
            token=lease.token,
            acquired_at=lease.acquired_at,
            renewed_at=lease.renewed_at,
            expires_at=lease.expires_at,
        )
