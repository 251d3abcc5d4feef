"""The engine's audit records: one builder per decision kind, so every record of a kind has the
same shape (docs/audit-events.md documents them; the API and the console read them)."""

from __future__ import annotations

from datetime import datetime

from medic.domain.advice import Advice
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Mode
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.ids import ClusterName, JobId

__all__ = ["ENGINE", "advice_event", "detection_event", "job_event", "verdict_event"]

ENGINE = "medic-engine"
_TEXT_LIMIT = 500


def job_event(
    cluster: ClusterName,
    job_id: JobId,
    kind: AuditKind,
    now: datetime,
    *,
    mode: Mode | None = None,
    payload: dict[str, object] | None = None,
    signature: str | None = None,
    verdict: str | None = None,
    action: str | None = None,
) -> AuditEvent:
    return AuditEvent(
        time=now,
        actor=ENGINE,
        kind=kind,
        subject_type=SubjectType.JOB,
        subject_id=job_id,
        cluster=cluster,
        signature_id=signature,
        verdict=verdict,
        action=action,
        mode=mode,
        payload=payload or {},
    )


def detection_event(
    cluster: ClusterName, job_id: JobId, det: Detection, mode: Mode, now: datetime
) -> AuditEvent:
    payload: dict[str, object] = {
        "attempt": det.attempt,
        "node": det.node,
        "rank": det.rank,
        "text": det.text[:_TEXT_LIMIT],
        "line_time": det.time.isoformat(),
        "fields": det.fields,
    }
    return job_event(
        cluster,
        job_id,
        AuditKind.DETECTION,
        now,
        mode=mode,
        payload=payload,
        signature=det.signature_id,
    )


def verdict_event(cluster: ClusterName, verdict: Verdict, mode: Mode, now: datetime) -> AuditEvent:
    payload: dict[str, object] = {
        "attempt": verdict.attempt,
        "confidence": verdict.confidence,
        "implicated_nodes": sorted(verdict.implicated_nodes),
        "summary": verdict.summary,
        "evidence": [
            {"node": d.node, "signature": d.signature_id, "text": d.text[:300]}
            for d in verdict.evidence[:10]
        ],
    }
    return job_event(
        cluster,
        verdict.job_id,
        AuditKind.VERDICT,
        now,
        mode=mode,
        payload=payload,
        signature=verdict.root_signature,
        verdict=verdict.domain.value,
        action=verdict.action.value,
    )


def advice_event(advice: Advice, verdict: Verdict, now: datetime) -> AuditEvent:
    payload: dict[str, object] = {
        "advice_id": advice.id,
        "generation": advice.generation,
        "attempt": advice.attempt,
        "exclude_nodes": sorted(advice.exclude_nodes),
        "rule": advice.rule,
        "reason": advice.reason,
    }
    return job_event(
        advice.cluster,
        advice.job_id,
        AuditKind.ADVICE,
        now,
        mode=advice.mode,
        payload=payload,
        action=advice.action.value,
        verdict=verdict.domain.value,
    )
