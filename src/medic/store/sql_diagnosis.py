"""Diagnosis part of the SQL store: detections and verdicts.

A verdict keeps its evidence (the detections it was based on) as a JSON copy rather than as
references, so the verdict reads the same even if detection rows are later pruned.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.store.db import Database
from medic.store.tables import detections, verdicts

__all__ = ["add_detections", "add_verdict", "list_detections", "list_verdicts"]


def add_detections(db: Database, cluster: ClusterName, found: Sequence[Detection]) -> None:
    if not found:
        return
    rows = [{"cluster": cluster, **_detection_dict(d)} for d in found]
    db.write(lambda conn: conn.execute(sa.insert(detections), rows))


def list_detections(
    db: Database, cluster: ClusterName, job_id: JobId, attempt: int | None
) -> list[Detection]:
    query = (
        sa.select(detections)
        .where(detections.c.cluster == cluster, detections.c.job_id == job_id)
        .order_by(detections.c.id)
    )
    if attempt is not None:
        query = query.where(detections.c.attempt == attempt)
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_detection(row._asdict()) for row in rows]


def add_verdict(db: Database, cluster: ClusterName, verdict: Verdict) -> int:
    row = {
        "cluster": cluster,
        "job_id": verdict.job_id,
        "attempt": verdict.attempt,
        "domain": verdict.domain.value,
        "action": verdict.action.value,
        "implicated_nodes": sorted(verdict.implicated_nodes),
        "confidence": verdict.confidence,
        "root_signature": verdict.root_signature,
        "summary": verdict.summary,
        "evidence": [_evidence_json(d) for d in verdict.evidence],
        "time": verdict.time,
    }

    def work(conn: sa.Connection) -> int:
        key = conn.execute(sa.insert(verdicts).values(row)).inserted_primary_key
        assert key is not None  # an INSERT into a table with an autoincrement key has one
        return int(key[0])

    return db.write(work)


def list_verdicts(db: Database, cluster: ClusterName, job_id: JobId) -> list[Verdict]:
    query = (
        sa.select(verdicts)
        .where(verdicts.c.cluster == cluster, verdicts.c.job_id == job_id)
        .order_by(verdicts.c.id)
    )
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_verdict(row) for row in rows]


def _detection_dict(d: Detection) -> dict[str, Any]:
    return {
        "job_id": d.job_id,
        "attempt": d.attempt,
        "signature_id": d.signature_id,
        "domain": d.domain.value,
        "role": d.role.value,
        "severity": d.severity.value,
        "action": d.action.value,
        "time": d.time,
        "node": d.node,
        "rank": d.rank,
        "implicates_node": d.implicates_node,
        "text": d.text,
        "fields": dict(d.fields),
        "seq": d.seq,
    }


def _evidence_json(d: Detection) -> dict[str, Any]:
    data = _detection_dict(d)
    # Evidence is a JSON document, so its times are ISO text (UTC, like the columns).
    data["time"] = (d.time.astimezone(UTC) if d.time.tzinfo else d.time).isoformat()
    return data


def _detection(data: dict[str, Any]) -> Detection:
    when = data["time"]
    return Detection(
        job_id=None if data["job_id"] is None else JobId(data["job_id"]),
        attempt=data["attempt"],
        signature_id=SignatureId(data["signature_id"]),
        domain=FaultDomain(data["domain"]),
        role=Role(data["role"]),
        severity=Severity(data["severity"]),
        action=JobAction(data["action"]),
        time=datetime.fromisoformat(when) if isinstance(when, str) else when,
        node=None if data["node"] is None else NodeName(data["node"]),
        rank=data["rank"],
        implicates_node=bool(data["implicates_node"]),
        text=data["text"],
        fields=dict(data["fields"]),
        seq=data["seq"],
    )


def _verdict(row: Row[Any]) -> Verdict:
    return Verdict(
        job_id=JobId(row.job_id),
        attempt=row.attempt,
        domain=FaultDomain(row.domain),
        action=JobAction(row.action),
        implicated_nodes=frozenset(NodeName(n) for n in row.implicated_nodes),
        confidence=row.confidence,
        root_signature=None if row.root_signature is None else SignatureId(row.root_signature),
        summary=row.summary,
        evidence=tuple(_detection(item) for item in row.evidence),
        time=row.time,
    )
