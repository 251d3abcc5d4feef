"""Alerts, repair policies and circuit breakers of the SQL store (``RepairStore``, part two).

Alerts are deduplicated by the unique key (cluster, node, key): a signal seen again updates its
row with ``count = count + 1`` in the database (so concurrent sightings all count), and the
writer that loses the race to insert the first row updates the winner's instead. The breaker is
a compare-and-set on ``tripped``; a cluster without a row has the default (closed) breaker and
a cluster without a stored policy the default :class:`RepairPolicy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    AlertState,
    Breaker,
    RepairAction,
    RepairPolicy,
    WaitMode,
)
from medic.errors import ConflictError, NotFoundError
from medic.store.db import Database, DuplicateKeyError
from medic.store.tables import alerts, breakers, repair_policies

__all__ = [
    "get_breaker",
    "get_repair_policy",
    "list_alerts",
    "put_repair_policy",
    "resolve_alert",
    "set_breaker",
    "upsert_alert",
]


# --- alerts --------------------------------------------------------------------------------
def upsert_alert(db: Database, alert: Alert, now: datetime) -> Alert:
    try:
        return db.write(lambda conn: _upsert_alert_once(conn, alert, now))
    except DuplicateKeyError:
        # A concurrent writer inserted the alert's first row; this try finds it and updates it
        # (a second DuplicateKeyError would be another constraint and escapes as a StoreError).
        return db.write(lambda conn: _upsert_alert_once(conn, alert, now))


def _upsert_alert_once(conn: Connection, alert: Alert, now: datetime) -> Alert:
    found = conn.execute(
        sa.select(alerts.c.id, alerts.c.state).where(
            alerts.c.cluster == alert.cluster,
            alerts.c.node == alert.node,
            alerts.c.key == alert.key,
        )
    ).first()
    # The latest sighting's description wins; identity, first_seen and count are the store's.
    latest: dict[str, Any] = {
        "source": alert.source.value,
        "detector": alert.detector,
        "summary": alert.summary,
        "description": alert.description,
        "severity": alert.severity.value,
        "evidence": alert.evidence,
        "mapped_action": None if alert.mapped_action is None else alert.mapped_action.value,
        "xid": alert.xid,
        "state": AlertState.FIRING.value,
        "last_seen": now,
    }
    if found is None:
        first = {"cluster": alert.cluster, "node": alert.node, "key": alert.key}
        inserted = conn.execute(
            sa.insert(alerts).values(**first, **latest, first_seen=now, firing_since=now, count=1)
        ).inserted_primary_key
        assert inserted is not None  # an INSERT into a table with an autoincrement key has one
        alert_id = int(inserted[0])
    else:
        alert_id = int(found.id)
        if found.state != AlertState.FIRING.value:  # it had cleared: a new firing episode
            latest["firing_since"] = now
        conn.execute(
            sa.update(alerts)
            .where(alerts.c.id == alert_id)
            .values(**latest, count=alerts.c.count + 1)
        )
    return _read_alert(conn, alert_id)


def resolve_alert(db: Database, alert_id: int, now: datetime) -> Alert:
    # ``last_seen`` keeps the last sighting while firing; the domain has no resolved-at field.
    del now

    def work(conn: Connection) -> Alert:
        conn.execute(
            sa.update(alerts).where(alerts.c.id == alert_id).values(state=AlertState.RESOLVED.value)
        )
        return _read_alert(conn, alert_id)

    return db.write(work)


def get_alert(db: Database, alert_id: int) -> Alert | None:
    def work(conn: Connection) -> Alert | None:
        row = conn.execute(sa.select(alerts).where(alerts.c.id == alert_id)).first()
        return None if row is None else _alert(row._mapping)

    return db.read(work)


def list_alerts(
    db: Database,
    *,
    cluster: ClusterName | None,
    node: NodeName | None,
    state: AlertState | None,
    unmapped_only: bool,
) -> list[Alert]:
    query = sa.select(alerts).order_by(alerts.c.id)
    if cluster is not None:
        query = query.where(alerts.c.cluster == cluster)
    if node is not None:
        query = query.where(alerts.c.node == node)
    if state is not None:
        query = query.where(alerts.c.state == state.value)
    if unmapped_only:
        query = query.where(alerts.c.mapped_action.is_(None))
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_alert(row._mapping) for row in rows]


def _read_alert(conn: Connection, alert_id: int) -> Alert:
    row = conn.execute(sa.select(alerts).where(alerts.c.id == alert_id)).first()
    if row is None:
        raise NotFoundError(f"alert {alert_id} does not exist")
    return _alert(row._mapping)


def _alert(data: RowMapping) -> Alert:
    mapped = data["mapped_action"]
    return Alert(
        id=data["id"],
        cluster=ClusterName(data["cluster"]),
        node=NodeName(data["node"]),
        key=data["key"],
        source=AlertSource(data["source"]),
        summary=data["summary"],
        description=data["description"],
        severity=Severity(data["severity"]),
        evidence=data["evidence"],
        detector=data["detector"],
        mapped_action=None if mapped is None else RepairAction(mapped),
        xid=data["xid"],
        state=AlertState(data["state"]),
        first_seen=data["first_seen"],
        firing_since=data["firing_since"],
        last_seen=data["last_seen"],
        count=data["count"],
    )


# --- repair policy -------------------------------------------------------------------------
_FLOATS = (
    "max_wait_seconds",
    "cooldown_seconds",
    "persistence_seconds",
    "max_concurrent_fraction",
    "breaker_fraction",
    "breaker_window_seconds",
)


def get_repair_policy(db: Database, cluster: ClusterName) -> RepairPolicy:
    query = sa.select(repair_policies.c.policy).where(repair_policies.c.cluster == cluster)
    row = db.read(lambda conn: conn.execute(query).first())
    return RepairPolicy() if row is None else _policy(row.policy)


def put_repair_policy(db: Database, cluster: ClusterName, policy: RepairPolicy) -> None:
    # The port passes no clock; updated_at only tells an operator when the row last changed.
    row = {"cluster": cluster, "policy": _policy_json(policy), "updated_at": datetime.now(UTC)}
    stmt = db.upsert(repair_policies, ["cluster"], ["policy", "updated_at"])
    db.write(lambda conn: conn.execute(stmt, [row]))


def _policy_json(policy: RepairPolicy) -> dict[str, Any]:
    document: dict[str, Any] = {name: float(getattr(policy, name)) for name in _FLOATS}
    document.update(
        auto_actions=sorted(action.value for action in policy.auto_actions),
        auto_xids=sorted(int(xid) for xid in policy.auto_xids),
        wait_mode=policy.wait_mode.value,
        persistence_overrides={
            str(key): float(value) for key, value in policy.persistence_overrides.items()
        },
        detector_cap_per_hour=int(policy.detector_cap_per_hour),
        validate_after=sorted(action.value for action in policy.validate_after),
        trusted_detectors=sorted(policy.trusted_detectors),
        trust_scheduler_requests=bool(policy.trust_scheduler_requests),
    )
    return document


def _policy(document: Mapping[str, Any]) -> RepairPolicy:
    """The stored policy; a field missing from the document (written before the field existed)
    keeps its default."""
    fields: dict[str, Any] = {name: float(document[name]) for name in _FLOATS if name in document}
    if "auto_actions" in document:
        fields["auto_actions"] = frozenset(RepairAction(a) for a in document["auto_actions"])
    if "auto_xids" in document:
        fields["auto_xids"] = frozenset(int(xid) for xid in document["auto_xids"])
    if "wait_mode" in document:
        fields["wait_mode"] = WaitMode(document["wait_mode"])
    if "persistence_overrides" in document:
        overrides = document["persistence_overrides"]
        fields["persistence_overrides"] = {str(k): float(v) for k, v in overrides.items()}
    if "detector_cap_per_hour" in document:
        fields["detector_cap_per_hour"] = int(document["detector_cap_per_hour"])
    if "validate_after" in document:
        fields["validate_after"] = frozenset(RepairAction(a) for a in document["validate_after"])
    if "trusted_detectors" in document:
        fields["trusted_detectors"] = frozenset(str(n) for n in document["trusted_detectors"])
    if "trust_scheduler_requests" in document:
        fields["trust_scheduler_requests"] = bool(document["trust_scheduler_requests"])
    return RepairPolicy(**fields)


# --- circuit breaker -----------------------------------------------------------------------
def get_breaker(db: Database, cluster: ClusterName) -> Breaker:
    query = sa.select(breakers).where(breakers.c.cluster == cluster)
    row = db.read(lambda conn: conn.execute(query).first())
    return Breaker(cluster) if row is None else _breaker(row._mapping)


def set_breaker(db: Database, breaker: Breaker, *, expected_tripped: bool) -> Breaker:
    values: dict[str, Any] = {
        "tripped": breaker.tripped,
        "tripped_at": breaker.tripped_at,
        "reason": breaker.reason,
        "reset_by": breaker.reset_by,
        "reset_at": breaker.reset_at,
    }
    where = breakers.c.cluster == breaker.cluster

    def work(conn: Connection) -> Breaker:
        stmt = sa.update(breakers).where(where, breakers.c.tripped == expected_tripped)
        if conn.execute(stmt.values(values)).rowcount != 1:
            current = conn.execute(sa.select(breakers.c.tripped).where(where)).first()
            # No row yet is the default breaker, which is closed (not tripped).
            if current is not None or expected_tripped:
                actual = current is not None and bool(current.tripped)
                raise ConflictError(
                    f"breaker of {breaker.cluster}: tripped is {actual}, "
                    f"not {expected_tripped}: another writer flipped it first"
                )
            conn.execute(sa.insert(breakers).values(cluster=breaker.cluster, **values))
        row = conn.execute(sa.select(breakers).where(where)).one()
        return _breaker(row._mapping)

    try:
        return db.write(work)
    except DuplicateKeyError:
        # A concurrent writer created the cluster's row first: compare against its value.
        return db.write(work)


def _breaker(data: RowMapping) -> Breaker:
    return Breaker(
        cluster=ClusterName(data["cluster"]),
        tripped=bool(data["tripped"]),
        tripped_at=data["tripped_at"],
        reason=data["reason"],
        reset_by=data["reset_by"],
        reset_at=data["reset_at"],
    )
