"""API response models, separate from the store's tables and the domain types.

Each ``from_*`` helper converts one domain value; the API never returns a domain object directly,
so the wire format only changes on purpose.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from medic.domain.actions import ActionRecord
from medic.domain.advice import Advice
from medic.domain.attempts import Attempt
from medic.domain.audit import AuditEvent
from medic.domain.cluster import Job, Node
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.ids import ClusterName
from medic.domain.repairs import NodeHealth, NodeHealthEntry
from medic.ports import Inventory, RepairStore

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "ActionOut",
    "AdviceOut",
    "AttemptOut",
    "AuditOut",
    "AuditPage",
    "DetectionOut",
    "JobOut",
    "Name",
    "NodeOut",
    "Problem",
    "Reason",
    "Request",
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
    health: NodeHealth
    """medic's node health, as the repair engine last computed it (one read model for the API,
    the CLI and the console): healthy, degraded (an alert firing), under_repair,
    out_of_service."""
    health_since: datetime | None
    """When the node entered that health (None: healthy)."""

    @classmethod
    def of(cls, cluster: str, node: Node, health: NodeHealthEntry | None = None) -> NodeOut:
        return cls(
            cluster=cluster,
            name=node.name,
            state=node.state.value,
            partitions=list(node.partitions),
            gpus=node.gpus,
            reason=node.reason,
            health=health.health if health else NodeHealth.HEALTHY,
            health_since=health.since if health else None,
        )

    @classmethod
    def listing(
        cls, inventory: Inventory, health: RepairStore, cluster: ClusterName
    ) -> list[NodeOut]:
        """The cluster's nodes with their health from the repair engine's read model (no entry:
        healthy)."""
        by_node = {e.node: e for e in health.list_node_health(cluster)}
        return [cls.of(cluster, n, by_node.get(n.name)) for n in inventory.list_nodes(cluster)]


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
    repair_id: int | None = Field(
        default=None,
        description="The node repair that moves the job off its node (an evacuation); "
        "null: job recovery's own advice.",
    )

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
            repair_id=advice.repair_id,
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
    count: int = Field(1, description="Identical lines this one stands for (the first is shown)")
    last_seen: datetime | None = None

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
            count=d.count,
            last_seen=d.last_seen,
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
    holder: str | None = None
    """The process that began the latest try (a lease holder; null: unfenced)."""
    token: int | None = None
    """The fencing token that try was begun under."""

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
            holder=a.holder,
            token=a.token,
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
    """Oldest first (``order=asc``): pass as ``after_id`` to get the next page; None when this
    page is the last (and always newest first)."""
    next_before_id: int | None = None
    """Newest first (``order=desc``): pass as ``before_id`` to get the next (older) page; None
    when this page is the last (and always oldest first)."""


class TimelineOut(BaseModel):
    job: JobOut
    attempts: list[AttemptOut]
    detections: list[DetectionOut]
    verdicts: list[VerdictOut]
    actions: list[ActionOut]
    events: list[AuditOut]


# --- request basics (every API's request models) ------------------------------------------
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:@+-]*$")]
"""A cluster, job or node name as schedulers spell them (no spaces, no slashes)."""
Reason = Annotated[str, Field(min_length=1, max_length=1000)]
MAX_PAYLOAD_BYTES = 16_384


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
