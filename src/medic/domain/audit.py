"""Audit vocabulary: every decision and action becomes one append-only audit event."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from medic.domain.cluster import Mode

__all__ = ["AuditEvent", "AuditKind", "SubjectType"]


class AuditKind(enum.StrEnum):
    """Every kind of audit record medic writes. docs/audit-events.md documents each (tested)."""

    DETECTION = "detection"
    VERDICT = "verdict"
    ADVICE = "advice"
    ACTION_STARTED = "action-started"
    ACTION_SUCCEEDED = "action-succeeded"
    ACTION_FAILED = "action-failed"
    ACTION_SKIPPED = "action-skipped"
    RECONCILIATION = "reconciliation"
    JOB_OPTIONS_INVALID = "job-options-invalid"
    LOOP_ERROR = "loop-error"


class SubjectType(enum.StrEnum):
    JOB = "job"
    NODE = "node"
    CLUSTER = "cluster"


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
