"""Audit trail and log-source cursors of the SQL store.

The audit trail is append-only: this module has an INSERT and SELECTs and nothing else, and the
migration installs triggers that reject UPDATE and DELETE on ``audit_events`` in the database.
Pages are read by id, oldest first (``after_id``) or newest first (``before_id``), which is
stable while new events keep arriving.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from medic.domain.audit import AuditEvent, AuditKind, AuditOrder, SubjectType
from medic.domain.cluster import Mode
from medic.domain.ids import ClusterName, JobId
from medic.errors import InputError
from medic.store.db import Database
from medic.store.tables import audit_events, cursors

__all__ = ["append_audit", "get_cursor", "insert_audit", "query_audit", "set_cursor"]


def append_audit(db: Database, event: AuditEvent) -> int:
    return db.write(lambda conn: insert_audit(conn, event))


def insert_audit(conn: Connection, event: AuditEvent) -> int:
    """Append ``event`` in the caller's transaction (a step and its audit event: both or
    neither); its id."""
    row = {
        "time": event.time,
        "actor": event.actor,
        "kind": event.kind.value,
        "subject_type": event.subject_type.value,
        "subject_id": event.subject_id,
        "cluster": event.cluster,
        "signature_id": event.signature_id,
        "action": event.action,
        "verdict": event.verdict,
        "mode": None if event.mode is None else event.mode.value,
        "payload": event.payload,
    }
    key = conn.execute(sa.insert(audit_events).values(row)).inserted_primary_key
    assert key is not None  # an INSERT into a table with an autoincrement key has one
    return int(key[0])


def query_audit(
    db: Database,
    *,
    cluster: ClusterName | None = None,
    job_id: JobId | None = None,
    subject_type: str | None = None,
    subject_id: str | None = None,
    kind: AuditKind | None = None,
    actor: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after_id: int | None = None,
    before_id: int | None = None,
    order: AuditOrder = "asc",
    limit: int = 100,
) -> list[AuditEvent]:
    if limit < 1:
        raise InputError("limit", f"must be at least 1, got {limit}")
    if order not in ("asc", "desc"):
        raise InputError("order", f"must be asc or desc, got {order!r}")
    c = audit_events.c
    conditions: list[sa.ColumnElement[bool]] = []
    if job_id is not None:
        conditions += [c.subject_type == SubjectType.JOB.value, c.subject_id == job_id]
    equal_to: dict[str, str | None] = {
        "cluster": cluster,
        "subject_type": subject_type,
        "subject_id": subject_id,
        "kind": None if kind is None else str(kind),
        "actor": actor,
    }
    conditions += [c[name] == value for name, value in equal_to.items() if value is not None]
    if since is not None:
        conditions.append(c.time >= since)
    if until is not None:
        conditions.append(c.time <= until)
    if after_id is not None:
        conditions.append(c.id > after_id)
    if before_id is not None:
        conditions.append(c.id < before_id)
    # The subject, kind, cluster and actor indexes end in ``id``: desc walks them backwards.
    by_id = c.id.desc() if order == "desc" else c.id.asc()
    query = sa.select(audit_events).where(*conditions).order_by(by_id).limit(limit)
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_event(row) for row in rows]


def _event(row: Row[Any]) -> AuditEvent:
    return AuditEvent(
        id=row.id,
        time=row.time,
        actor=row.actor,
        kind=AuditKind(row.kind),
        subject_type=SubjectType(row.subject_type),
        subject_id=row.subject_id,
        cluster=row.cluster,
        signature_id=row.signature_id,
        action=row.action,
        verdict=row.verdict,
        mode=None if row.mode is None else Mode(row.mode),
        payload=dict(row.payload),
    )


def get_cursor(db: Database, source: str) -> str | None:
    query = sa.select(cursors.c.value).where(cursors.c.source == source)
    value = db.read(lambda conn: conn.execute(query).scalar_one_or_none())
    return None if value is None else str(value)


def set_cursor(db: Database, source: str, value: str) -> None:
    stmt = db.upsert(cursors, keys=("source",), update=("value",))
    db.write(lambda conn: conn.execute(stmt, {"source": source, "value": value}))
