"""Diagnosis part of the SQL store: detections and verdicts.

Repeated evidence is counted, not stored once per line: 100,000 identical matching lines were
100,000 rows for one attempt. Identical detections (same job, attempt, signature, node, rank and
fields) share one row, within a write and across writes (the row's ``dedupe_key``, unique per
cluster): the first line stays as the evidence, ``count`` adds up, ``last_seen`` moves on. Rows
written before revision 0006 have no key and stay as they were.

A verdict keeps its evidence (the detections it was based on) as a JSON copy rather than as
references, so the verdict reads the same even if detection rows are later pruned.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Sequence
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
    rows = _counted_rows(cluster, found)
    stmt = db.upsert(
        detections, keys=("cluster", "dedupe_key"), update=("last_seen",), add=("count",)
    )
    db.write(lambda conn: conn.execute(stmt, rows))


def _counted_rows(cluster: ClusterName, found: Sequence[Detection]) -> list[dict[str, Any]]:
    """One row per distinct detection, in the order of first appearance, with its count."""
    rows: dict[Hashable, dict[str, Any]] = {}
    for d in found:
        key = (d.job_id, d.attempt, d.signature_id, d.node, d.rank, tuple(sorted(d.fields.items())))
        seen = d.last_seen or d.time
        row = rows.get(key)
        if row is None:
            rows[key] = {"cluster": cluster, **_detection_dict(d), "dedupe_key": _digest(key)}
        else:
            row["count"] += d.count
            row["last_seen"] = max(row["last_seen"], seen)
    return list(rows.values())


def _digest(key: Hashable) -> str:
    # A fixed-size key for the unique index, whatever the fields hold.
    return hashlib.sha256(json.dumps(key, ensure_ascii=True).encode()).hexdigest()


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
        "count": d.count,
        "last_seen": d.last_seen or d.time,
    }


def _iso(when: datetime) -> str:
    return (when.astimezone(UTC) if when.tzinfo else when).isoformat()


def _evidence_json(d: Detection) -> dict[str, Any]:
    data = _detection_dict(d)
    # Evidence is a JSON document, so its times are ISO text (UTC, like the columns).
    data["time"] = _iso(d.time)
    data["last_seen"] = _iso(data["last_seen"])
    return data


def _when(value: datetime | str | None) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


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
        # Evidence copied into a verdict before revision 0006, and old rows, hold one line each.
        count=data.get("count") or 1,
        last_seen=_when(data.get("last_seen")),
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
