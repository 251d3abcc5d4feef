"""API response models, separate from the store's tables and the domain types.

Each ``from_*`` helper converts one domain value; the API never returns a domain object directly,
so the wire format only changes on purpose.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.advice import Advice, Reconciliation
from medic.domain.attempts import Attempt
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import Role, Token
from medic.domain.cluster import Job, Mode, Node
from medic.domain.diagnosis import Detection, Severity, Verdict
from medic.domain.modes import ClusterModes
from medic.domain.repairs import (
    Alert,
    AlertState,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    ValidationResult,
    WaitMode,
)

__all__ = [
    "ActionBeginIn",
    "ActionFinishIn",
    "ActionOut",
    "ActionRecordOut",
    "AdviceOut",
    "AlertIn",
    "AlertOut",
    "AttemptOut",
    "AuditIn",
    "AuditOut",
    "AuditPage",
    "DetectionOut",
    "JobOut",
    "NodeOut",
    "Problem",
    "ReconciliationIn",
    "TimelineOut",
    "VerdictOut",
]


class Problem(BaseModel):
    """RFC 9457 problem details; ``code`` is stable, ``detail`` says what to fix."""

    type: str = "about:blank"
    title: str
    status: int
    code: str
    detail: str


class NodeOut(BaseModel):
    cluster: str
    name: str
    state: str
    partitions: list[str]
    gpus: int
    reason: str | None

    @classmethod
    def of(cls, cluster: str, node: Node) -> NodeOut:
        return cls(
            cluster=cluster,
            name=node.name,
            state=node.state.value,
            partitions=list(node.partitions),
            gpus=node.gpus,
            reason=node.reason,
        )


class AdviceOut(BaseModel):
    id: int
    cluster: str
    job_id: str
    generation: int
    observed_generation: int
    attempt: int
    action: str
    exclude_nodes: list[str]
    reason: str
    rule: str
    mode: str
    status: str
    active: bool
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, advice: Advice) -> AdviceOut:
        return cls(
            id=advice.id,
            cluster=advice.cluster,
            job_id=advice.job_id,
            generation=advice.generation,
            observed_generation=advice.observed_generation,
            attempt=advice.attempt,
            action=advice.action.value,
            exclude_nodes=sorted(advice.exclude_nodes),
            reason=advice.reason,
            rule=advice.rule,
            mode=advice.mode.value,
            status=advice.status.value,
            active=advice.is_active,
            created_at=advice.created_at,
            updated_at=advice.updated_at,
        )


class JobOut(BaseModel):
    cluster: str
    id: str
    name: str
    state: str
    partition: str
    nodes: list[str]
    excluded_nodes: list[str]
    restart_count: int
    held: bool
    advice: AdviceOut | None = None

    @classmethod
    def of(cls, job: Job, advice: Advice | None) -> JobOut:
        return cls(
            cluster=job.cluster,
            id=job.id,
            name=job.name,
            state=job.state.value,
            partition=job.partition,
            nodes=list(job.nodes),
            excluded_nodes=sorted(job.excluded_nodes),
            restart_count=job.restart_count,
            held=job.held,
            advice=AdviceOut.of(advice) if advice else None,
        )


class AttemptOut(BaseModel):
    number: int
    nodes: list[str]
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    first_step: int | None
    last_step: int | None
    last_checkpoint_step: int | None
    loaded_checkpoint_step: int | None

    @classmethod
    def of(cls, attempt: Attempt) -> AttemptOut:
        p = attempt.progress
        return cls(
            number=attempt.number,
            nodes=list(attempt.nodes),
            state=attempt.state.value,
            started_at=attempt.started_at,
            ended_at=attempt.ended_at,
            first_step=p.first_step,
            last_step=p.last_step,
            last_checkpoint_step=p.last_checkpoint_step,
            loaded_checkpoint_step=p.loaded_checkpoint_step,
        )


class DetectionOut(BaseModel):
    attempt: int
    signature_id: str
    domain: str
    role: str
    severity: str
    action: str
    time: datetime
    node: str | None
    rank: int | None
    implicates_node: bool
    text: str
    fields: dict[str, str]

    @classmethod
    def of(cls, d: Detection) -> DetectionOut:
        return cls(
            attempt=d.attempt,
            signature_id=d.signature_id,
            domain=d.domain.value,
            role=d.role.value,
            severity=d.severity.value,
            action=d.action.value,
            time=d.time,
            node=d.node,
            rank=d.rank,
            implicates_node=d.implicates_node,
            text=d.text,
            fields=dict(d.fields),
        )


class VerdictOut(BaseModel):
    attempt: int
    domain: str
    action: str
    implicated_nodes: list[str]
    confidence: float
    root_signature: str | None
    summary: str
    evidence: list[DetectionOut]

    @classmethod
    def of(cls, v: Verdict) -> VerdictOut:
        return cls(
            attempt=v.attempt,
            domain=v.domain.value,
            action=v.action.value,
            implicated_nodes=sorted(v.implicated_nodes),
            confidence=v.confidence,
            root_signature=v.root_signature,
            summary=v.summary,
            evidence=[DetectionOut.of(d) for d in v.evidence],
        )


class ActionOut(BaseModel):
    key: str
    kind: str
    status: str
    job_id: str | None
    node: str | None
    advice_id: int | None
    started_at: datetime
    finished_at: datetime | None
    error: str | None

    @classmethod
    def of(cls, a: ActionRecord) -> ActionOut:
        return cls(
            key=a.key,
            kind=a.kind.value,
            status=a.status.value,
            job_id=a.job_id,
            node=a.node,
            advice_id=a.advice_id,
            started_at=a.started_at,
            finished_at=a.finished_at,
            error=a.error,
        )


class AuditOut(BaseModel):
    id: int | None
    time: datetime
    actor: str
    kind: str
    subject_type: str
    subject_id: str
    cluster: str | None
    signature_id: str | None
    action: str | None
    verdict: str | None
    mode: str | None
    payload: dict[str, Any]

    @classmethod
    def of(cls, e: AuditEvent) -> AuditOut:
        return cls(
            id=e.id,
            time=e.time,
            actor=e.actor,
            kind=e.kind.value,
            subject_type=e.subject_type.value,
            subject_id=e.subject_id,
            cluster=e.cluster,
            signature_id=e.signature_id,
            action=e.action,
            verdict=e.verdict,
            mode=e.mode.value if e.mode else None,
            payload=dict(e.payload),
        )


class AuditPage(BaseModel):
    events: list[AuditOut]
    next_after_id: int | None
    """Pass as ``after_id`` to get the next page; None when this page is the last."""


class TimelineOut(BaseModel):
    job: JobOut
    attempts: list[AttemptOut]
    detections: list[DetectionOut]
    verdicts: list[VerdictOut]
    actions: list[ActionOut]
    events: list[AuditOut]


# --- controller requests (advice API) ------------------------------------------------------
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:@+-]*$")]
"""A cluster, job or node name as schedulers spell them (no spaces, no slashes)."""
ActionKey = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\w.:@+/-]+$")]
"""An idempotency key such as ``advice/12/g1/requeue_hold``."""
Reason = Annotated[str, Field(min_length=1, max_length=1000)]
MAX_PAYLOAD_BYTES = 16_384

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


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReconciliationIn(_Request):
    """A controller's report on one generation of advice (idempotent)."""

    observed_generation: int = Field(ge=1, le=2**31 - 1)
    status: Reconciliation
    reason: Reason


class ActionBeginIn(_Request):
    """A controller announces one scheduler step under its idempotency key."""

    key: ActionKey
    cluster: Name
    kind: ActionKind
    job_id: Name | None = None
    node: Name | None = None
    advice_id: int | None = Field(default=None, ge=1)


class ActionFinishIn(_Request):
    """The outcome of a step begun with ``POST /api/v1/actions``."""

    status: ActionStatus
    error: str | None = Field(default=None, max_length=2000)

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


class AuditIn(_Request):
    """One audit event from a controller; the API stamps the time and prefixes the actor."""

    actor: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.:@-]+$")]
    kind: AuditKind
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


# --- node health alerts (agent and detectors) -------------------------------------------------
AlertKey = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-z0-9_.:-]+$")]
"""Stable identity of a signal: ``agent:ecc_dbe``, ``xid:79``, ``sig:<signature id>``."""
DetectorName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.:@+-]+$")]
AGENT_PREFIX = "agent:"


class AlertIn(_Request):
    """One health finding on one node. The source is ``agent`` when ``detector`` starts with
    ``agent:`` (``medic agent``), else ``detector``; the repair engine, not the caller, maps it to
    an action."""

    cluster: Name
    node: Name
    key: AlertKey
    detector: DetectorName
    summary: Annotated[str, Field(min_length=1, max_length=200)]
    description: Annotated[str, Field(max_length=4000)] = ""
    severity: Severity = Severity.WARNING
    evidence: dict[str, Any] = Field(default_factory=dict)
    xid: int | None = Field(default=None, ge=0, le=65535)
    state: AlertState = AlertState.FIRING

    @field_validator("evidence")
    @classmethod
    def _small(cls, evidence: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(evidence, default=str).encode()) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"evidence larger than {MAX_PAYLOAD_BYTES} bytes of JSON")
        return evidence

    @field_validator("xid")
    @classmethod
    def _xid_matches_key(cls, xid: int | None, info: Any) -> int | None:
        key = info.data.get("key")
        xid_key = isinstance(key, str) and key.startswith("xid:")
        if xid is not None and xid_key and key != f"xid:{xid}":
            raise ValueError(f"xid {xid} does not match key {key!r}")
        return xid

    @property
    def key_xid(self) -> int | None:
        """``xid``, or the code of an ``xid:<code>`` key."""
        if self.xid is not None:
            return self.xid
        code = self.key.removeprefix("xid:")
        return int(code) if self.key.startswith("xid:") and code.isdigit() else None


class AlertOut(BaseModel):
    id: int | None
    cluster: str
    node: str
    key: str
    source: str
    summary: str
    description: str
    severity: str
    evidence: dict[str, Any]
    detector: str
    mapped_action: str | None
    xid: int | None
    state: str
    first_seen: datetime | None
    last_seen: datetime | None
    count: int

    @classmethod
    def of(cls, a: Alert) -> AlertOut:
        return cls(
            id=a.id,
            cluster=a.cluster,
            node=a.node,
            key=a.key,
            source=a.source.value,
            summary=a.summary,
            description=a.description,
            severity=a.severity.value,
            evidence=dict(a.evidence),
            detector=a.detector,
            mapped_action=a.mapped_action.value if a.mapped_action else None,
            xid=a.xid,
            state=a.state.value,
            first_seen=a.first_seen,
            last_seen=a.last_seen,
            count=a.count,
        )


# --- node repairs, repair policy and circuit breaker (repair API) -----------------------------
RequestId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.:@+/-]+$")]
"""A client's idempotency key for one repair request (``ticket-4711``, a UUID)."""
ActorName = Annotated[str, Field(min_length=1, max_length=140, pattern=r"^[\w.:@+-]+$")]
"""``alice``, ``user:alice``, ``detector:nvsentinel`` or a node agent's ``agent:node7``."""
ActorKind = Literal["user", "detector"]
Note = Annotated[str, Field(min_length=1, max_length=1000)]
CheckName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.:-]+$")]


class ActorIn(_Request):
    """Who acts, when not given by the ``X-Medic-Actor`` header (until authentication lands)."""

    actor: ActorName | None = None
    actor_kind: ActorKind | None = None


class RepairIn(_Request):
    """Ask for one repair of one node. A detector names a ``request_id`` (required) and the
    failed ``check``; a repeat of (``requested_by``, ``request_id``) returns the first repair."""

    cluster: Name
    node: Name
    action: RepairAction
    reason: Reason
    request_id: RequestId | None = None
    requested_by: ActorName | None = None
    """Falls back to the ``X-Medic-Actor`` header."""
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


class RepairPolicyIn(ActorIn):
    """A cluster's whole repair policy (a field left out takes its default). Ranges, known
    actions and Xid codes are checked by ``medic.control.repair_decisions.check_policy``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    auto_actions: list[RepairAction] = Field(default_factory=list, max_length=16)
    auto_xids: list[int] = Field(default_factory=list, max_length=256)
    wait_mode: WaitMode = WaitMode.IDLE
    max_wait_seconds: float = 7200.0
    cooldown_seconds: float = 1800.0
    persistence_seconds: float = 0.0
    persistence_overrides: dict[str, float] = Field(default_factory=dict, max_length=256)
    max_concurrent_fraction: float = 0.05
    breaker_fraction: float = 0.10
    breaker_window_seconds: float = 600.0
    detector_cap_per_hour: int = 50
    validate_after: list[RepairAction] = Field(
        default_factory=lambda: [RepairAction.MIGRATE], max_length=16
    )

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
__all__ += [
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


# --- authentication, console sessions and run-time modes --------------------------------------
TokenName = Annotated[str, Field(min_length=1, max_length=128)]
"""Checked by ``medic.domain.auth.check_token_name`` (422 ``invalid_input`` when it fails)."""
PartitionName = Annotated[
    str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:@+-]*$")
]


class TokenIn(_Request):
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


class SessionIn(_Request):
    """Sign in to the console with an API token."""

    token: Annotated[str, Field(min_length=1, max_length=256)]


class SessionOut(BaseModel):
    """The signed-in principal. ``csrf_token``: send it as ``X-CSRF-Token`` with every write made
    through the session cookie (None when the request used a bearer token)."""

    name: str
    role: str
    csrf_token: str | None


class ModesIn(_Request):
    """A cluster's whole set of run-time modes (replaces what is stored): ``mode`` for the
    cluster (null: ``scheduler.mode`` from the settings) and the partitions that differ."""

    mode: Mode | None = None
    partitions: dict[PartitionName, Mode] = Field(default_factory=dict, max_length=256)


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


__all__ += [
    "ModesIn",
    "ModesOut",
    "ReadyOut",
    "SessionIn",
    "SessionOut",
    "TokenCreatedOut",
    "TokenIn",
    "TokenOut",
]
