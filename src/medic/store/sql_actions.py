"""The step ledger of scheduler actions in the SQL store: one row per idempotency key.

A row is inserted when a step is begun and updated with its outcome. Two processes beginning the
same key meet on its unique constraint (the loser re-reads). A fenced begin (a lease holder's,
see :mod:`medic.store.sql_leases`) is refused in its own transaction when the lease changed hands
or ran out, and may begin again a step whose last try failed; a fenced finish only records the
outcome of a try that the given holder and token began, so a process that lost its lease cannot
overwrite what its successor found.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.audit import AuditEvent
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.domain.leases import Fence
from medic.errors import ConflictError, NotFoundError
from medic.store.db import Database, DuplicateKeyError
from medic.store.sql_audit import insert_audit
from medic.store.sql_leases import check_fence
from medic.store.tables import actions

__all__ = ["begin_action", "finish_action", "get_action", "list_actions"]


def begin_action(
    db: Database,
    record: ActionRecord,
    fence: Fence | None = None,
    event: AuditEvent | None = None,
) -> bool:
    """Insert the step; False when its key exists. With ``fence``: refused (``FencedError``)
    unless the fence is the lease's, and a step whose last try failed is begun again (True).
    ``event`` is appended to the audit trail in the same transaction when the step is begun."""
    row = {
        "key": record.key,
        "cluster": record.cluster,
        "kind": record.kind.value,
        "status": record.status.value,
        "job_id": record.job_id,
        "node": record.node,
        "advice_id": record.advice_id,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "error": record.error,
        "holder": None if fence is None else fence.holder,
        "token": None if fence is None else fence.token,
    }

    def work(conn: Connection) -> bool:
        begun = _begin(conn)
        if begun and event is not None:
            insert_audit(conn, event)
        return begun

    def _begin(conn: Connection) -> bool:
        if fence is None:
            conn.execute(sa.insert(actions).values(row))
            return True
        check_fence(conn, fence, record.started_at)
        existing = conn.execute(
            sa.select(actions.c.status).where(actions.c.key == record.key).with_for_update()
        ).first()
        if existing is None:
            conn.execute(sa.insert(actions).values(row))
            return True
        if existing.status != ActionStatus.FAILED.value:
            return False
        again = {k: row[k] for k in ("status", "started_at", "holder", "token")}
        conn.execute(
            sa.update(actions)
            .where(actions.c.key == record.key, actions.c.status == ActionStatus.FAILED.value)
            .values(**again, finished_at=None, error=None)
        )
        return True

    for _ in range(2):  # a concurrent insert of the same key: the second run sees its row
        try:
            return db.write(work)
        except DuplicateKeyError:
            if get_action(db, record.key) is None:
                raise  # some other constraint failed; the key is still free
            if fence is None:
                return False
    return db.write(work)


def get_action(db: Database, key: str) -> ActionRecord | None:
    query = sa.select(actions).where(actions.c.key == key)
    row = db.read(lambda conn: conn.execute(query).first())
    return None if row is None else _action(row)


def finish_action(
    db: Database,
    key: str,
    status: ActionStatus,
    now: datetime,
    error: str | None,
    begun_by: tuple[str, int] | None = None,
    event: AuditEvent | None = None,
) -> None:
    """Record the outcome, and append ``event`` in the same transaction. With ``begun_by``
    (holder, token): only of a try still started by them (``ConflictError`` otherwise: another
    holder took the step over; ``event`` is then not appended)."""
    stmt = (
        sa.update(actions)
        .where(actions.c.key == key)
        .values(status=status.value, finished_at=now, error=error)
    )
    if begun_by is not None:
        stmt = stmt.where(
            actions.c.status == ActionStatus.STARTED.value,
            actions.c.holder == begun_by[0],
            actions.c.token == begun_by[1],
        )

    def work(conn: Connection) -> int:
        changed = int(conn.execute(stmt).rowcount)
        if changed == 1 and event is not None:
            insert_audit(conn, event)
        return changed

    if db.write(work) == 1:
        return
    found = get_action(db, key)
    if found is None:
        raise NotFoundError(f"scheduler action {key!r} was never begun")
    if begun_by is not None:
        raise ConflictError(
            f"scheduler action {key!r} is {found.status.value}, begun by {found.holder} (token"
            f" {found.token}), no longer by {begun_by[0]} (token {begun_by[1]})"
        )


def list_actions(
    db: Database, cluster: ClusterName | None, job_id: JobId | None
) -> list[ActionRecord]:
    query = sa.select(actions).order_by(actions.c.id)
    if cluster is not None:
        query = query.where(actions.c.cluster == cluster)
    if job_id is not None:
        query = query.where(actions.c.job_id == job_id)
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_action(row) for row in rows]


def _action(row: Row[Any]) -> ActionRecord:
    return ActionRecord(
        key=row._mapping["key"],
        cluster=ClusterName(row.cluster),
        kind=ActionKind(row.kind),
        status=ActionStatus(row.status),
        job_id=None if row.job_id is None else JobId(row.job_id),
        node=None if row.node is None else NodeName(row.node),
        advice_id=None if row.advice_id is None else AdviceId(row.advice_id),
        started_at=row.started_at,
        finished_at=row.finished_at,
        error=row.error,
        holder=row.holder,
        token=row.token,
    )
