"""Repairs and validation results of the SQL store (``medic.ports.RepairStore``, part one).

Several control-loop replicas, the API and detectors write here at once, so nothing reads,
decides and writes without a guard: a repair request with a request id is protected by the
unique key (cluster, requested_by, request_id) (the loser re-reads and returns the winner's
repair), and every state change is ``UPDATE ... WHERE id = :id AND state = :expected`` that must
change exactly one row. Which engine works on a repair is a lease taken the same way
(:func:`claim_repair`: free, expired or already the claimant's), and a repair's checkpoint
baseline grows by compare-and-set on its stored value (:func:`note_checkpoint_baseline`).
Alerts, the policy and the breaker live in ``sql_repair_state``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    TRANSITIONS,
    Repair,
    RepairAction,
    RepairRequest,
    RepairState,
    RepairUpdate,
    RequesterKind,
    ValidationOutcome,
    ValidationResult,
)
from medic.errors import ConflictError, InputError, NotFoundError
from medic.store.db import Database, DuplicateKeyError
from medic.store.tables import repairs, validations

__all__ = [
    "add_validation",
    "claim_repair",
    "create_repair",
    "get_repair",
    "list_repairs",
    "list_validations",
    "note_checkpoint_baseline",
    "transition_repair",
]


# --- repairs -------------------------------------------------------------------------------
def create_repair(
    db: Database,
    request: RepairRequest,
    *,
    state: RepairState,
    now: datetime,
    approved_by: str | None,
    rule: str | None,
) -> tuple[Repair, bool]:
    row: dict[str, Any] = {
        "cluster": request.cluster,
        "node": request.node,
        "action": request.action.value,
        "state": state.value,
        "requested_by": request.requested_by,
        "requester_kind": request.requester_kind.value,
        "request_id": request.request_id,
        "reason": request.reason,
        "alert_keys": list(request.alert_keys),
        "xid": request.xid,
        "approved_by": approved_by,
        "rule": rule,
        # Approved on creation (by the policy, or a user's own request): approved now.
        "approved_at": None if approved_by is None else now,
        "wait_deadline": None,
        "interrupted_jobs": [],
        "escalated_from": None,
        "boot_id": None,
        "error": None,
        "evidence": request.evidence,
        "created_at": now,
        "updated_at": now,
    }

    def work(conn: Connection) -> tuple[Repair, bool]:
        existing = _find_request(conn, request)
        if existing is not None:
            return existing, False
        key = conn.execute(sa.insert(repairs).values(row)).inserted_primary_key
        assert key is not None  # an INSERT into a table with an autoincrement key has one
        return _read_repair(conn, int(key[0])), True

    try:
        return db.write(work)
    except DuplicateKeyError:
        # A concurrent writer inserted the same (requested_by, request_id) first: theirs stands.
        existing = db.read(lambda conn: _find_request(conn, request))
        if existing is None:
            raise  # some other constraint failed; the key is still free
        return existing, False


def _find_request(conn: Connection, request: RepairRequest) -> Repair | None:
    if request.request_id is None:
        return None  # no idempotency key: every request is a new repair
    row = conn.execute(
        sa.select(repairs).where(
            repairs.c.cluster == request.cluster,
            repairs.c.requested_by == request.requested_by,
            repairs.c.request_id == request.request_id,
        )
    ).first()
    return None if row is None else _repair(row._mapping)


def get_repair(db: Database, repair_id: int) -> Repair | None:
    query = sa.select(repairs).where(repairs.c.id == repair_id)
    row = db.read(lambda conn: conn.execute(query).first())
    return None if row is None else _repair(row._mapping)


def find_repair(
    db: Database, cluster: ClusterName, requested_by: str, request_id: str
) -> Repair | None:
    query = sa.select(repairs).where(  # the idempotency key's unique index answers it
        repairs.c.cluster == cluster,
        repairs.c.requested_by == requested_by,
        repairs.c.request_id == request_id,
    )
    row = db.read(lambda conn: conn.execute(query).first())
    return None if row is None else _repair(row._mapping)


def list_repairs(
    db: Database,
    *,
    cluster: ClusterName | None,
    node: NodeName | None,
    states: frozenset[RepairState] | None,
    since: datetime | None,
) -> list[Repair]:
    query = sa.select(repairs).order_by(repairs.c.created_at, repairs.c.id)
    if cluster is not None:
        query = query.where(repairs.c.cluster == cluster)
    if node is not None:
        query = query.where(repairs.c.node == node)
    if states is not None:
        query = query.where(repairs.c.state.in_(sorted(s.value for s in states)))
    if since is not None:
        query = query.where(repairs.c.created_at >= since)
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_repair(row._mapping) for row in rows]


def transition_repair(
    db: Database,
    repair_id: int,
    expected: RepairState,
    new: RepairState,
    now: datetime,
    update: RepairUpdate | None,
) -> Repair:
    if new not in TRANSITIONS[expected]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[expected])) or "none"
        raise InputError(
            f"repair {repair_id}",
            f"transition {expected.value} -> {new.value} is not allowed (allowed: {allowed})",
        )
    values: dict[str, Any] = {**_update_values(update), "state": new.value, "updated_at": now}
    stmt = (
        sa.update(repairs)
        .where(repairs.c.id == repair_id, repairs.c.state == expected.value)
        .values(values)
    )

    def work(conn: Connection) -> Repair:
        changed = conn.execute(stmt).rowcount
        row = conn.execute(sa.select(repairs).where(repairs.c.id == repair_id)).first()
        if row is None:
            raise NotFoundError(f"repair {repair_id} does not exist")
        if changed != 1:
            raise ConflictError(
                f"repair {repair_id} is {row.state}, not {expected.value}: "
                "another writer moved it first"
            )
        return _repair(row._mapping)

    return db.write(work)


def claim_repair(
    db: Database,
    repair_id: int,
    state: RepairState,
    owner: str,
    now: datetime,
    until: datetime,
) -> Repair:
    # One statement: the lease is free (never taken, or ended at or before ``now``) or already
    # ``owner``'s, and the repair is still in ``state``. ``updated_at`` stays: it dates the state.
    free = sa.or_(
        repairs.c.owner.is_(None),
        repairs.c.owner == owner,
        repairs.c.lease_until.is_(None),
        repairs.c.lease_until <= now,
    )
    stmt = (
        sa.update(repairs)
        .where(repairs.c.id == repair_id, repairs.c.state == state.value, free)
        .values(owner=owner, lease_until=until)
    )

    def work(conn: Connection) -> Repair:
        changed = conn.execute(stmt).rowcount
        row = conn.execute(sa.select(repairs).where(repairs.c.id == repair_id)).first()
        if row is None:
            raise NotFoundError(f"repair {repair_id} does not exist")
        if changed != 1 and row.state != state.value:
            raise ConflictError(
                f"repair {repair_id} is {row.state}, not {state.value}: another writer moved it"
            )
        if changed != 1:
            until_text = row.lease_until.isoformat() if row.lease_until else "?"
            raise ConflictError(
                f"repair {repair_id} is held by {row.owner} until {until_text}: "
                "its engine still works on it"
            )
        return _repair(row._mapping)

    return db.write(work)


def note_checkpoint_baseline(
    db: Database, repair_id: int, state: RepairState, baseline: Mapping[str, int | None]
) -> Repair:
    def work(conn: Connection) -> Repair | None:
        row = conn.execute(sa.select(repairs).where(repairs.c.id == repair_id)).first()
        if row is None:
            raise NotFoundError(f"repair {repair_id} does not exist")
        if row.state != state.value:
            raise ConflictError(
                f"repair {repair_id} is {row.state}, not {state.value}: another writer moved it"
            )
        stored = row.checkpoint_baseline
        merged = {**baseline, **(stored or {})}  # a job's first baseline stays
        if merged == stored:
            return _repair(row._mapping)
        same = (
            repairs.c.checkpoint_baseline.is_(None)
            if stored is None
            else repairs.c.checkpoint_baseline == stored
        )
        stmt = (
            sa.update(repairs)
            .where(repairs.c.id == repair_id, repairs.c.state == state.value, same)
            .values(checkpoint_baseline=merged)
        )
        if conn.execute(stmt).rowcount != 1:
            return None  # another engine wrote first: merge again into what it wrote
        return _read_repair(conn, repair_id)

    for _ in range(_BASELINE_RETRIES):
        noted = db.write(work)
        if noted is not None:
            return noted
    raise ConflictError(f"repair {repair_id}: lost {_BASELINE_RETRIES} races on its baseline")


_BASELINE_RETRIES = 5


def _update_values(update: RepairUpdate | None) -> dict[str, Any]:
    """The update's non-None fields as column values (the field names are the column names)."""
    if update is None:
        return {}
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(update):
        value = getattr(update, spec.name)
        if value is None:
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        values[spec.name] = value
    return values


def _read_repair(conn: Connection, repair_id: int) -> Repair:
    row = conn.execute(sa.select(repairs).where(repairs.c.id == repair_id)).one()
    return _repair(row._mapping)


def _repair(data: RowMapping) -> Repair:
    escalated_from = data["escalated_from"]
    return Repair(
        id=data["id"],
        cluster=ClusterName(data["cluster"]),
        node=NodeName(data["node"]),
        action=RepairAction(data["action"]),
        state=RepairState(data["state"]),
        requested_by=data["requested_by"],
        requester_kind=RequesterKind(data["requester_kind"]),
        reason=data["reason"],
        alert_keys=tuple(data["alert_keys"]),
        created_at=data["created_at"],
        updated_at=data["updated_at"],
        request_id=data["request_id"],
        xid=data["xid"],
        approved_by=data["approved_by"],
        rule=data["rule"],
        approved_at=data["approved_at"],
        wait_deadline=data["wait_deadline"],
        interrupted_jobs=tuple(data["interrupted_jobs"]),
        escalated_from=None if escalated_from is None else RepairAction(escalated_from),
        boot_id=data["boot_id"],
        error=data["error"],
        evidence=data["evidence"],
        owner=data["owner"],
        lease_until=data["lease_until"],
        checkpoint_baseline=dict(data["checkpoint_baseline"] or {}),
    )


# --- validation results --------------------------------------------------------------------
def add_validation(db: Database, result: ValidationResult) -> None:
    row = {
        "repair_id": result.repair_id,
        "node": result.node,
        "outcome": result.outcome.value,
        "tests": [list(test) for test in result.tests],
        "time": result.time,
        "ticket": result.ticket,
    }

    def work(conn: Connection) -> None:
        known = conn.execute(sa.select(repairs.c.id).where(repairs.c.id == result.repair_id))
        if known.first() is None:
            raise NotFoundError(f"repair {result.repair_id} does not exist")
        conn.execute(sa.insert(validations).values(row))

    db.write(work)


def list_validations(db: Database, repair_id: int) -> list[ValidationResult]:
    query = (
        sa.select(validations)
        .where(validations.c.repair_id == repair_id)
        .order_by(validations.c.time, validations.c.id)
    )
    rows = db.read(lambda conn: conn.execute(query).all())
    return [
        ValidationResult(
            repair_id=row.repair_id,
            node=NodeName(row.node),
            outcome=ValidationOutcome(row.outcome),
            tests=tuple((str(name), bool(passed), str(log)) for name, passed, log in row.tests),
            time=row.time,
            ticket=row.ticket,
        )
        for row in rows
    ]
