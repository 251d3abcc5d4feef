"""API models for node repair: repairs, the repair policy and the circuit breaker (alerts are
``medic.api.schemas_alerts``). Separate from the store's tables and the domain types.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from medic.api.jsonschema import keys_by_pattern, only
from medic.api.schemas import (
    MAX_PAYLOAD_BYTES,
    Name,
    Reason,
    Request,
)
from medic.api.schemas_alerts import AlertKey
from medic.domain.auth import TOKEN_NAME_PATTERN
from medic.domain.diagnosis import Severity
from medic.domain.repairs import (
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    ValidationResult,
    WaitMode,
)
from medic.repair.rules.waiting import MAX_WAIT_CAP_SECONDS
from medic.repair.rules.xid_classes import XID_CLASSES

# --- node repairs, repair policy and circuit breaker (repair API) -----------------------------
RequestId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.:@+/-]+$")]
"""A client's idempotency key for one repair request (``ticket-4711``, a UUID)."""
ActorName = Annotated[str, Field(min_length=1, max_length=140, pattern=r"^[\w.:@+-]+$")]
"""``alice``, ``user:alice``, ``detector:nvsentinel`` or a node agent's ``agent:node7``."""
ActorKind = Literal["user", "detector"]
Note = Annotated[str, Field(min_length=1, max_length=1000)]
CheckName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.:-]+$")]
OverrideKey = Annotated[str, Field(pattern=r"^[a-z0-9_.:*-]{1,128}$")]
"""An alert key or family (``xid:*``) with a persistence of its own."""
AUTO_ACTIONS = frozenset(RepairAction) - {RepairAction.REMOVE}
"""What a policy may approve automatically: removal for RMA never is."""
_DAY = 86_400.0


class ActorIn(Request):
    """Who acts: optional, and when given it must be the authenticated principal."""

    actor: ActorName | None = None
    actor_kind: ActorKind | None = None


class RepairIn(Request):
    """Ask for one repair of one node. A detector names a ``request_id`` (required) and the
    failed ``check``; a repeat of (``requested_by``, ``request_id``) returns the first repair."""

    cluster: Name
    node: Name
    action: RepairAction
    reason: Reason
    request_id: RequestId | None = None
    requested_by: ActorName | None = None
    """Optional; when given it must be the authenticated principal."""
    requester_kind: ActorKind | None = None
    alert_keys: list[AlertKey] = Field(default_factory=list, max_length=32)
    """Evidence: alerts firing on the node that this repair answers."""
    check: CheckName | None = None
    """A detector's failed check (its alert key is ``detector:<name>:<check>``)."""
    severity: Severity | None = None
    xid: int | None = Field(default=None, ge=0, le=65535)
    evidence: dict[str, Any] = Field(default_factory=dict)
    """Evidence refs (log excerpts, URLs, test output), stored with the alert and the repair."""

    @field_validator("evidence")
    @classmethod
    def _small_evidence(cls, evidence: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(evidence, default=str).encode()) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"evidence larger than {MAX_PAYLOAD_BYTES} bytes of JSON")
        return evidence


class ApproveIn(ActorIn):
    action: RepairAction | None = None
    """Approve with this action instead of the requested one (removal included)."""
    reason: Note | None = None


class DecisionIn(ActorIn):
    reason: Note | None = None


class ActionChangeIn(ActorIn):
    action: RepairAction
    reason: Note | None = None


class ValidationOut(BaseModel):
    outcome: str
    time: datetime
    ticket: str | None
    tests: list[dict[str, Any]]
    """``{"name", "passed", "log"}`` for each validation command."""

    @classmethod
    def of(cls, v: ValidationResult) -> ValidationOut:
        return cls(
            outcome=v.outcome.value,
            time=v.time,
            ticket=v.ticket,
            tests=[{"name": n, "passed": p, "log": log} for n, p, log in v.tests],
        )


class RepairOut(BaseModel):
    id: int
    cluster: str
    node: str
    action: str
    state: str
    requested_by: str
    requester_kind: str
    request_id: str | None
    reason: str
    alert_keys: list[str]
    xid: int | None
    rule: str | None
    approved_by: str | None
    approved_at: datetime | None
    wait_deadline: datetime | None
    interrupted_jobs: list[str]
    escalated_from: str | None
    error: str | None
    evidence: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, r: Repair) -> RepairOut:
        return cls(
            id=r.id,
            cluster=r.cluster,
            node=r.node,
            action=r.action.value,
            state=r.state.value,
            requested_by=r.requested_by,
            requester_kind=r.requester_kind.value,
            request_id=r.request_id,
            reason=r.reason,
            alert_keys=list(r.alert_keys),
            xid=r.xid,
            rule=r.rule,
            approved_by=r.approved_by,
            approved_at=r.approved_at,
            wait_deadline=r.wait_deadline,
            interrupted_jobs=list(r.interrupted_jobs),
            escalated_from=r.escalated_from.value if r.escalated_from else None,
            error=r.error,
            evidence=dict(r.evidence),
            created_at=r.created_at,
            updated_at=r.updated_at,
        )


class RepairDetailOut(RepairOut):
    validations: list[ValidationOut]

    @classmethod
    def with_validations(cls, r: Repair, vs: list[ValidationResult]) -> RepairDetailOut:
        return cls(**RepairOut.of(r).model_dump(), validations=[ValidationOut.of(v) for v in vs])


TrustedDetector = Annotated[str, Field(max_length=128, pattern=TOKEN_NAME_PATTERN)]
"""A detector as its API token is named (``medic.domain.auth.check_token_name``; the reserved
names, out of the generators' reach, are not stated)."""


class RepairPolicyIn(ActorIn):
    """A cluster's whole repair policy (a field left out takes its default). Ranges, known
    actions and Xid codes are checked by ``medic.repair.policy_changes.check_policy``; the
    fields state the same bounds for the OpenAPI document (``tests/api/test_request_schemas.py``
    holds the two together)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    auto_actions: list[Annotated[RepairAction, only(*AUTO_ACTIONS)]] = Field(
        default_factory=list, max_length=16
    )
    auto_xids: list[Annotated[int, only(*XID_CLASSES)]] = Field(
        default_factory=list, max_length=256
    )
    wait_mode: WaitMode = WaitMode.IDLE
    max_wait_seconds: float = Field(default=7200.0, ge=0, le=MAX_WAIT_CAP_SECONDS)
    cooldown_seconds: float = Field(default=1800.0, ge=0, le=30 * _DAY)
    persistence_seconds: float = Field(default=0.0, ge=0, le=7 * _DAY)
    persistence_overrides: dict[OverrideKey, Annotated[float, Field(ge=0, le=7 * _DAY)]] = Field(
        default_factory=dict, max_length=256, json_schema_extra=keys_by_pattern
    )
    max_concurrent_fraction: float = Field(default=0.05, gt=0, le=1)
    """Repairs at work at once: each pool's share, max(1, ceil(fraction x pool nodes)), and
    for the cluster max(1, floor(fraction x nodes)); a repair waiting for a busy node holds a
    waiting slot, not a working one."""
    breaker_fraction: float = Field(default=0.10, gt=0, le=1)
    """Trip the breaker when this fraction of the cluster's nodes, or of one pool's, began
    firing a repairable alert (or had a repair approved automatically) within the window."""
    breaker_window_seconds: float = Field(default=600.0, gt=0, le=7 * _DAY)
    detector_cap_per_hour: int = Field(default=50, ge=0, le=10_000)
    validate_after: list[RepairAction] = Field(
        default_factory=lambda: [RepairAction.MIGRATE], max_length=16
    )
    trusted_detectors: list[TrustedDetector] = Field(default_factory=list, max_length=256)
    """Detectors (API token names) whose requests are approved automatically; ``agent`` trusts
    every node agent. Default: none, every detector's request waits for a person."""
    trust_scheduler_requests: bool = False
    """Whether a trusted name in a Slurm ``medic-request:`` drain reason or node comment counts
    (anyone who may drain a node writes any name there). Default: never."""

    def to_policy(self) -> RepairPolicy:
        return RepairPolicy(
            auto_actions=frozenset(self.auto_actions),
            auto_xids=frozenset(self.auto_xids),
            wait_mode=self.wait_mode,
            max_wait_seconds=self.max_wait_seconds,
            cooldown_seconds=self.cooldown_seconds,
            persistence_seconds=self.persistence_seconds,
            persistence_overrides=dict(self.persistence_overrides),
            max_concurrent_fraction=self.max_concurrent_fraction,
            breaker_fraction=self.breaker_fraction,
            breaker_window_seconds=self.breaker_window_seconds,
            detector_cap_per_hour=self.detector_cap_per_hour,
            validate_after=frozenset(self.validate_after),
            trusted_detectors=frozenset(self.trusted_detectors),
            trust_scheduler_requests=self.trust_scheduler_requests,
        )


class RepairPolicyOut(BaseModel):
    cluster: str
    auto_actions: list[str]
    auto_xids: list[int]
    wait_mode: str
    max_wait_seconds: float
    cooldown_seconds: float
    persistence_seconds: float
    persistence_overrides: dict[str, float]
    max_concurrent_fraction: float
    breaker_fraction: float
    breaker_window_seconds: float
    detector_cap_per_hour: int
    validate_after: list[str]
    trusted_detectors: list[str]
    trust_scheduler_requests: bool

    @classmethod
    def of(cls, cluster: str, p: RepairPolicy) -> RepairPolicyOut:
        return cls(
            cluster=cluster,
            auto_actions=sorted(a.value for a in p.auto_actions),
            auto_xids=sorted(p.auto_xids),
            wait_mode=p.wait_mode.value,
            max_wait_seconds=p.max_wait_seconds,
            cooldown_seconds=p.cooldown_seconds,
            persistence_seconds=p.persistence_seconds,
            persistence_overrides=dict(sorted(p.persistence_overrides.items())),
            max_concurrent_fraction=p.max_concurrent_fraction,
            breaker_fraction=p.breaker_fraction,
            breaker_window_seconds=p.breaker_window_seconds,
            detector_cap_per_hour=p.detector_cap_per_hour,
            validate_after=sorted(a.value for a in p.validate_after),
            trusted_detectors=sorted(p.trusted_detectors),
            trust_scheduler_requests=p.trust_scheduler_requests,
        )


class BreakerOut(BaseModel):
    cluster: str
    tripped: bool
    tripped_at: datetime | None
    reason: str | None
    reset_by: str | None
    reset_at: datetime | None

    @classmethod
    def of(cls, b: Breaker) -> BreakerOut:
        return cls(
            cluster=b.cluster,
            tripped=b.tripped,
            tripped_at=b.tripped_at,
            reason=b.reason,
            reset_by=b.reset_by,
            reset_at=b.reset_at,
        )


class BreakerResetIn(ActorIn):
    cluster: Name | None = None
    """Default: the cluster this medic watches."""
    reason: Note | None = None


# The repair API's names, appended apart from the list above.
__all__ = [
    "ActionChangeIn",
    "ActorIn",
    "ApproveIn",
    "BreakerOut",
    "BreakerResetIn",
    "DecisionIn",
    "RepairDetailOut",
    "RepairIn",
    "RepairOut",
    "RepairPolicyIn",
    "RepairPolicyOut",
    "ValidationOut",
]
