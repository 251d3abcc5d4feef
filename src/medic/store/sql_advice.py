"""Advice part of the SQL store: the compare-and-set heart of recovery (steps: ``sql_actions``).

Several control-loop replicas and remote controllers may write at once, so nothing here reads,
decides and writes without a guard: the first advice row of a job and every action row are
protected by unique constraints (the loser re-reads), and a new generation of advice is written
with ``UPDATE ... WHERE id = :id AND generation = :seen`` that must change exactly one row.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from medic.domain.advice import Advice, AdviceAction, AdviceRequest, Reconciliation
from medic.domain.cluster import Mode
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.errors import ConflictError, InputError, NotFoundError
from medic.store.db import Database, DuplicateKeyError
from medic.store.tables import advice

__all__ = [
    "advice_for_job",
    "get_advice",
    "list_advice",
    "publish_advice",
    "report_reconciliation",
]

CAS_RETRIES = 5
"""Re-reads after losing a race to another writer before giving up with ConflictError."""


# --- advice --------------------------------------------------------------------------------
def publish_advice(db: Database, request: AdviceRequest, now: datetime) -> Advice:
    lost_insert = False
    for _ in range(CAS_RETRIES):
        try:
            published = db.write(lambda conn: _publish_once(conn, request, now))
        except DuplicateKeyError:
            if lost_insert:
                # Twice no row to read yet the insert fails: not a race, a real constraint error.
                raise
            lost_insert = True  # another writer inserted the job's first advice; re-read it
            continue
        if published is not None:
            return published
        lost_insert = False  # lost the compare-and-set; decide again on the fresh row
    raise ConflictError(
        f"advice for {request.cluster}/{request.job_id}: lost {CAS_RETRIES} races to other writers"
    )


def _publish_once(conn: Connection, request: AdviceRequest, now: datetime) -> Advice | None:
    """One try: the stored or new advice, or None when a concurrent writer won the CAS."""
    row = conn.execute(
        sa.select(advice).where(
            advice.c.cluster == request.cluster, advice.c.job_id == request.job_id
        )
    ).first()
    decision: dict[str, Any] = {
        "attempt": request.attempt,
        "action": request.action.value,
        "exclude_nodes": sorted(request.exclude_nodes),
        "reason": request.reason,
        "mode": request.mode.value,
        "rule": request.rule,
        "repair_id": request.repair_id,
        "status": Reconciliation.PENDING.value,
        "updated_at": now,
    }
    if row is None:
        first = {
            "cluster": request.cluster,
            "job_id": request.job_id,
            "generation": 1,
            "observed_generation": 0,
            "created_at": now,
            **decision,
        }
        key = conn.execute(sa.insert(advice).values(first)).inserted_primary_key
        assert key is not None  # an INSERT into a table with an autoincrement key has one
        return _advice({"id": key[0], **first})
    stored = _advice(row._asdict())
    if (
        stored.attempt == request.attempt
        and stored.action is request.action
        and stored.exclude_nodes == request.exclude_nodes
        and stored.repair_id == request.repair_id  # a new owner decided anew (a repair's move)
    ):
        return stored
    generation = stored.generation + 1
    changed = conn.execute(
        sa.update(advice)
        .where(advice.c.id == stored.id, advice.c.generation == stored.generation)
        .values(generation=generation, **decision)
    ).rowcount
    if changed != 1:
        return None
    return _advice({**row._asdict(), **decision, "generation": generation})


def get_advice(db: Database, advice_id: AdviceId) -> Advice | None:
    query = sa.select(advice).where(advice.c.id == advice_id)
    row = db.read(lambda conn: conn.execute(query).first())
    return None if row is None else _advice(row._asdict())


def advice_for_job(db: Database, cluster: ClusterName, job_id: JobId) -> Advice | None:
    query = sa.select(advice).where(advice.c.cluster == cluster, advice.c.job_id == job_id)
    row = db.read(lambda conn: conn.execute(query).first())
    return None if row is None else _advice(row._asdict())


def list_advice(db: Database, cluster: ClusterName | None, active_only: bool) -> list[Advice]:
    query = sa.select(advice).order_by(advice.c.id)
    if cluster is not None:
        query = query.where(advice.c.cluster == cluster)
    if active_only:
        # Same rule as Advice.is_active, in SQL.
        query = query.where(
            advice.c.action != AdviceAction.NONE.value,
            sa.or_(
                advice.c.observed_generation != advice.c.generation,
                advice.c.status == Reconciliation.PENDING.value,
            ),
        )
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_advice(row._asdict()) for row in rows]


def report_reconciliation(
    db: Database,
    advice_id: AdviceId,
    observed_generation: int,
    status: Reconciliation,
    now: datetime,
) -> Advice:
    def work(conn: Connection) -> Advice:
        row = conn.execute(sa.select(advice).where(advice.c.id == advice_id)).first()
        if row is None:
            raise NotFoundError(f"advice {advice_id} does not exist")
        current = _advice(row._asdict())
        _check_generation(current, observed_generation)
        report = {"status": status.value, "observed_generation": observed_generation}
        changed = conn.execute(
            sa.update(advice)
            .where(advice.c.id == advice_id, advice.c.generation == observed_generation)
            .values(updated_at=now, **report)
        ).rowcount
        if changed != 1:
            raise ConflictError(
                f"advice {advice_id}: generation {observed_generation} was superseded meanwhile"
            )
        return dataclasses.replace(
            current, status=status, observed_generation=observed_generation, updated_at=now
        )

    return db.write(work)


def _check_generation(current: Advice, observed: int) -> None:
    if observed < 1 or observed > current.generation:
        raise InputError(
            f"advice {current.id}",
            f"generation {observed} was never published (current is {current.generation})",
        )
    if observed < current.generation:
        raise ConflictError(
            f"advice {current.id}: generation {observed} is superseded by {current.generation}"
        )


def _advice(data: dict[str, Any]) -> Advice:
    return Advice(
        id=AdviceId(data["id"]),
        cluster=ClusterName(data["cluster"]),
        job_id=JobId(data["job_id"]),
        generation=data["generation"],
        attempt=data["attempt"],
        action=AdviceAction(data["action"]),
        exclude_nodes=frozenset(NodeName(n) for n in data["exclude_nodes"]),
        reason=data["reason"],
        mode=Mode(data["mode"]),
        rule=data["rule"],
        status=Reconciliation(data["status"]),
        observed_generation=data["observed_generation"],
        created_at=data["created_at"],
        updated_at=data["updated_at"],
        repair_id=data.get("repair_id"),
    )
