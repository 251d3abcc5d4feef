"""The node auto-repair tables: alerts, repairs and their validations, per-cluster repair policy,
alert-storm breakers, node health (see :mod:`medic.store.tables`)."""

from __future__ import annotations

import sqlalchemy as sa

from medic.store.columns import BigId, JsonText, LongText, UtcDateTime
from medic.store.schema import CLUSTER, MYSQL_TABLE_ARGS, NAME, SHORT, metadata

alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("cluster", sa.String(CLUSTER), nullable=False),
    sa.Column("node", sa.String(NAME), nullable=False),
    sa.Column("key", sa.String(NAME), nullable=False),
    sa.Column("source", sa.String(SHORT), nullable=False),
    sa.Column("detector", sa.String(NAME), nullable=False),
    sa.Column("summary", LongText(), nullable=False),
    sa.Column("description", LongText(), nullable=False),
    sa.Column("severity", sa.String(SHORT), nullable=False),
    sa.Column("evidence", JsonText(), nullable=False),
    sa.Column("mapped_action", sa.String(SHORT), nullable=True),
    sa.Column("xid", sa.Integer(), nullable=True),
    sa.Column("state", sa.String(SHORT), nullable=False),
    sa.Column("first_seen", UtcDateTime(), nullable=False),
    sa.Column("firing_since", UtcDateTime(), nullable=True),
    sa.Column("last_seen", UtcDateTime(), nullable=False),
    sa.Column("count", sa.Integer(), nullable=False),
    # Deduplication: a signal seen again on the same node updates its row instead of adding one.
    sa.UniqueConstraint("cluster", "node", "key"),
    **MYSQL_TABLE_ARGS,
)

repairs = sa.Table(
    "repairs",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("cluster", sa.String(CLUSTER), nullable=False),
    # One target node per repair, enforced by the schema: a single value, never a list.
    sa.Column("node", sa.String(NAME), nullable=False),
    sa.Column("action", sa.String(SHORT), nullable=False),
    sa.Column("state", sa.String(SHORT), nullable=False),
    sa.Column("requested_by", sa.String(NAME), nullable=False),
    sa.Column("requester_kind", sa.String(SHORT), nullable=False),
    sa.Column("request_id", sa.String(NAME), nullable=True),
    sa.Column("reason", LongText(), nullable=False),
    sa.Column("alert_keys", JsonText(), nullable=False),
    sa.Column("xid", sa.Integer(), nullable=True),
    sa.Column("approved_by", sa.String(NAME), nullable=True),
    sa.Column("rule", sa.String(NAME), nullable=True),
    sa.Column("approved_at", UtcDateTime(), nullable=True),
    sa.Column("wait_deadline", UtcDateTime(), nullable=True),
    sa.Column("interrupted_jobs", JsonText(), nullable=False),
    sa.Column("escalated_from", sa.String(SHORT), nullable=True),
    sa.Column("boot_id", sa.String(NAME), nullable=True),
    sa.Column("error", LongText(), nullable=True),
    sa.Column("evidence", JsonText(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    # Which engine carries the repair's current state out, until when (revision 0005).
    sa.Column("owner", sa.String(NAME), nullable=True),
    sa.Column("lease_until", UtcDateTime(), nullable=True),
    # "job/attempt" -> checkpoint step when the wait began (checkpoint mode; revision 0008).
    sa.Column("checkpoint_baseline", JsonText(), nullable=True),
    # The idempotency key of repair requests. Rows without a request id hold NULL here, and a
    # UNIQUE constraint lets NULLs repeat on every engine, so those never collide.
    sa.UniqueConstraint("cluster", "requested_by", "request_id"),
    sa.Index(None, "cluster", "node", "state"),
    sa.Index(None, "cluster", "created_at"),
    **MYSQL_TABLE_ARGS,
)

repair_policies = sa.Table(
    "repair_policies",
    metadata,
    sa.Column("cluster", sa.String(CLUSTER), primary_key=True),
    sa.Column("policy", JsonText(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    **MYSQL_TABLE_ARGS,
)

breakers = sa.Table(
    "breakers",
    metadata,
    sa.Column("cluster", sa.String(CLUSTER), primary_key=True),
    sa.Column("tripped", sa.Boolean(), nullable=False),
    sa.Column("tripped_at", UtcDateTime(), nullable=True),
    sa.Column("reason", LongText(), nullable=True),
    sa.Column("reset_by", sa.String(NAME), nullable=True),
    sa.Column("reset_at", UtcDateTime(), nullable=True),
    **MYSQL_TABLE_ARGS,
)

node_health = sa.Table(
    # The read model of node health, written by the repair engine each pass it changes: one row
    # per node that is not healthy (no row: healthy), with when it entered that health.
    "node_health",
    metadata,
    sa.Column("cluster", sa.String(CLUSTER), primary_key=True),
    sa.Column("node", sa.String(NAME), primary_key=True),
    sa.Column("health", sa.String(SHORT), nullable=False),
    sa.Column("since", UtcDateTime(), nullable=False),
    **MYSQL_TABLE_ARGS,
)

validations = sa.Table(
    "validations",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("repair_id", sa.Integer(), sa.ForeignKey("repairs.id"), nullable=False),
    sa.Column("node", sa.String(NAME), nullable=False),
    sa.Column("outcome", sa.String(SHORT), nullable=False),
    sa.Column("tests", JsonText(), nullable=False),
    sa.Column("time", UtcDateTime(), nullable=False),
    sa.Column("ticket", sa.String(NAME), nullable=True),
    sa.Index(None, "repair_id"),
    **MYSQL_TABLE_ARGS,
)
