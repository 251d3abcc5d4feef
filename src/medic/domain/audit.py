"""Audit vocabulary: every decision and action becomes one append-only audit event."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from medic.domain.cluster import Mode

__all__ = ["AuditEvent", "AuditKind", "AuditOrder", "SubjectType"]

AuditOrder = Literal["asc", "desc"]
"""Pages of the audit trail: oldest first (``asc``, by id) or newest first (``desc``)."""


class AuditKind(enum.StrEnum):
    """Every kind of audit record medic writes. docs/audit-events.md documents each (tested)."""

    DETECTION = "detection"
    VERDICT = "verdict"
    EXTERNAL_VERDICT = "external-verdict"
    ADVICE = "advice"
    ACTION_STARTED = "action-started"
    ACTION_SUCCEEDED = "action-succeeded"
    ACTION_FAILED = "action-failed"
    ACTION_SKIPPED = "action-skipped"
    RECONCILIATION = "reconciliation"
    JOB_OPTIONS_INVALID = "job-options-invalid"
    LOOP_ERROR = "loop-error"
    # node repair: requests (API, Slurm drain reasons) and people's decisions on them
    REPAIR_REQUESTED = "repair-requested"
    REPAIR_REQUEST_REPEATED = "repair-request-repeated"
    REPAIR_REQUEST_REFUSED = "repair-request-refused"
    REPAIR_REQUEST_INVALID = "repair-request-invalid"
    REPAIR_APPROVED = "repair-approved"
    REPAIR_REJECTED = "repair-rejected"
    REPAIR_CANCELLED = "repair-cancelled"
    REPAIR_ACTION_CHANGED = "repair-action-changed"
    REPAIR_POLICY_CHANGED = "repair-policy-changed"
    BREAKER_RESET = "breaker-reset"
    # node repair: alerts, medic's recommendations and the lifecycle of a repair
    ALERT_FIRING = "alert-firing"
    ALERT_RESOLVED = "alert-resolved"
    REPAIR_RECOMMENDED = "repair-recommended"
    REPAIR_SKIPPED = "repair-skipped"
    REPAIR_TRANSITION = "repair-transition"
    REPAIR_STEP_STARTED = "repair-step-started"
    REPAIR_STEP_SUCCEEDED = "repair-step-succeeded"
    REPAIR_STEP_FAILED = "repair-step-failed"
    REPAIR_TAKEN_OVER = "repair-taken-over"
    REPAIR_RECOVERED = "repair-recovered"
    REPAIR_JOB_INTERRUPTED = "repair-job-interrupted"
    REPAIR_VALIDATION = "repair-validation"
    BREAKER_TRIPPED = "breaker-tripped"
    NODE_CORDONED = "node-cordoned"
    NODE_RETURNED = "node-returned"
    EXCLUSION_RETURNED = "exclusion-returned"
    # the HTTP API: refused requests, API tokens, console sessions, run-time modes
    ACCESS_DENIED = "access-denied"
    TOKEN_CREATED = "token-created"
    TOKEN_REVOKED = "token-revoked"
    SESSION_STARTED = "session-started"
    SESSION_ENDED = "session-ended"
    MODE_CHANGED = "mode-changed"


class SubjectType(enum.StrEnum):
    JOB = "job"
    NODE = "node"
    CLUSTER = "cluster"
    API = "api"
    """An HTTP request (subject id: its path), e.g. one that was refused."""
    TOKEN = "token"
    """An API token (subject id: its name)."""


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audit record. ``id`` is assigned by the store; records are never updated or deleted."""

    time: datetime
    actor: str
    kind: AuditKind
    subject_type: SubjectType
    subject_id: str
    cluster: str | None = None
    signature_id: str | None = None
    action: str | None = None
    verdict: str | None = None
    mode: Mode | None = None
    payload: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    id: int | None = None
