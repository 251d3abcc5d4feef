"""SQLAlchemy Core tables of medic's database.

The Alembic migrations create these tables; ``tests/contract/test_store.py`` checks that the
migrated schema and this metadata agree, so a change here needs a new migration.

Columns hold plain values (enum values as strings, sets and tuples as JSON lists); the store
modules convert rows to domain objects. There are few foreign keys on purpose: detections,
progress and advice may arrive for a job before the inventory has synced it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from medic.store.columns import BigId, JsonText, LongText, UtcDateTime

__all__ = [
    "MEDIC_TABLES",
    "actions",
    "advice",
    "alerts",
    "api_sessions",
    "api_tokens",
    "attempts",
    "audit_events",
    "breakers",
    "clusters",
    "cursors",
    "detections",
    "jobs",
    "metadata",
    "modes",
    "node_health",
    "nodes",
    "repair_policies",
    "repairs",
    "validations",
    "verdicts",
]

# Explicit constraint names: the same name on every engine, so migrations can refer to them.
metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# utf8mb4 holds any log text; the binary collation makes keys case- and accent-sensitive, as on
# the other engines (node "gpu-01" and "GPU-01" are two nodes).
MYSQL_TABLE_ARGS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}

CLUSTER = 128
NAME = 255
JOB_ID = 128
SHORT = 32

clusters = sa.Table(
    "clusters",
    metadata,
    sa.Column("name", sa.String(CLUSTER), primary_key=True),
    sa.Column("scheduler", sa.String(64), nullable=False),
    **MYSQL_TABLE_ARGS,
)

nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("cluster", sa.String(CLUSTER), sa.ForeignKey("clusters.name"), primary_key=True),
    sa.Column("name", sa.String(NAME), primary_key=True),
    sa.Column("state", sa.String(SHORT), nullable=False),
    sa.Column("partitions", JsonText(), nullable=False),
    sa.Column("gpus", sa.Integer(), nullable=False),
    sa.Column("reason", LongText(), nullable=True),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    **MYSQL_TABLE_ARGS,
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("cluster", sa.String(CLUSTER), sa.ForeignKey("clusters.name"), primary_key=True),
    sa.Column("job_id", sa.String(JOB_ID), primary_key=True),
    sa.Column("name", LongText(), nullable=False),
    sa.Column("state", sa.String(SHORT), nullable=False),
    sa.Column("partition", sa.String(NAME), nullable=False),
    sa.Column("nodes", JsonText(), nullable=False),
    sa.Column("excluded_nodes", JsonText(), nullable=False),
    sa.Column("restart_count", sa.Integer(), nullable=False),
    sa.Column("held", sa.Boolean(), nullable=False),
    sa.Column("num_nodes", sa.Integer(), nullable=False),
    sa.Column("submit_time", UtcDateTime(), nullable=True),
    sa.Column("start_time", UtcDateTime(), nullable=True),
    sa.Column("end_time", UtcDateTime(), nullable=True),
    sa.Column("exit_code", sa.Integer(), nullable=True),
    sa.Column("comment", LongText(), nullable=True),
    sa.Column("log_paths", JsonText(), nullable=False),
    sa.Column("options", JsonText(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    **MYSQL_TABLE_ARGS,
)

attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("cluster", sa.String(CLUSTER), nullable=False),
    sa.Column("job_id", sa.String(JOB_ID), nullable=False),
    sa.Column("number", sa.Integer(), nullable=False),
    sa.Column("nodes", JsonText(), nullable=False),
    sa.Column("state", sa.String(SHORT), nullable=False),
    sa.Column("started_at", UtcDateTime(), nullable=True),
    sa.Column("ended_at", UtcDateTime(), nullable=True),
    sa.Column("first_step", sa.BigInteger(), nullable=True),
    sa.Column("last_step", sa.BigInteger(), nullable=True),
    sa.Column("last_checkpoint_step", sa.BigInteger(), nullable=True),
    sa.Column("loaded_checkpoint_step", sa.BigInteger(), nullable=True),
    sa.Column("last_progress_at", UtcDateTime(), nullable=True),
    sa.UniqueConstraint("cluster", "job_id", "number"),
    **MYSQL_TABLE_ARGS,
)

detections = sa.Table(
    "detections",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("cluster", sa.String(CLUSTER), nullable=False),
    sa.Column("job_id", sa.String(JOB_ID), nullable=True),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("signature_id", sa.String(128), nullable=False),
    sa.Column("domain", sa.String(SHORT), nullable=False),
    sa.Column("role", sa.String(SHORT), nullable=False),
    sa.Column("severity", sa.String(SHORT), nullable=False),
    sa.Column("action", sa.String(SHORT), nullable=False),
    sa.Column("time", UtcDateTime(), nullable=False),
    sa.Column("node", sa.String(NAME), nullable=True),
    sa.Column("rank", sa.Integer(), nullable=True),
    sa.Column("implicates_node", sa.Boolean(), nullable=False),
    sa.Column("text", LongText(), nullable=False),
    sa.Column("fields", JsonText(), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    # Identical detections (same job, attempt, signature, node, rank and fields) share one row:
    # the first line is the evidence, ``count`` how many there were, ``last_seen`` when the last
    # was. ``dedupe_key`` is their digest; NULL on rows from before revision 0006.
    sa.Column("count", sa.BigInteger(), nullable=False),
    sa.Column("last_seen", UtcDateTime(), nullable=False),
    sa.Column("dedupe_key", sa.String(64), nullable=True),
    sa.Index(None, "cluster", "job_id", "attempt"),
    sa.UniqueConstraint("cluster", "dedupe_key"),
    **MYSQL_TABLE_ARGS,
)

verdicts = sa.Table(
    "verdicts",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("cluster", sa.String(CLUSTER), nullable=False),
    sa.Column("job_id", sa.String(JOB_ID), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("domain", sa.String(SHORT), nullable=False),
    sa.Column("action", sa.String(SHORT), nullable=False),
    sa.Column("implicated_nodes", JsonText(), nullable=False),
    sa.Column("confidence", sa.Double(), nullable=False),
    sa.Column("root_signature", sa.String(128), nullable=True),
    sa.Column("summary", LongText(), nullable=False),
    sa.Column("evidence", JsonText(), nullable=False),
    sa.Column("time", UtcDateTime(), nullable=True),
    sa.Index(None, "cluster", "job_id"),
    **MYSQL_TABLE_ARGS,
)

advice = sa.Table(
    "advice",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("cluster", sa.String(CLUSTER), nullable=False),
    sa.Column("job_id", sa.String(JOB_ID), nullable=False),
    sa.Column("generation", sa.Integer(), nullable=False),
    sa.Column("observed_generation", sa.Integer(), nullable=False),
    sa.Column("status", sa.String(SHORT), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("action", sa.String(SHORT), nullable=False),
    sa.Column("exclude_nodes", JsonText(), nullable=False),
    sa.Column("reason", LongText(), nullable=False),
    sa.Column("mode", sa.String(SHORT), nullable=False),
    sa.Column("rule", sa.String(128), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    # The node repair that moves the job off its node; NULL: job recovery's own (revision 0008).
    sa.Column("repair_id", sa.Integer(), nullable=True),
    # One advice row per job: concurrent first publications collide here instead of doubling.
    sa.UniqueConstraint("cluster", "job_id"),
    **MYSQL_TABLE_ARGS,
)

actions = sa.Table(
    "scheduler_actions",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    # The idempotency key: a second attempt at the same step fails on this constraint.
    sa.Column("key", sa.String(NAME), nullable=False, unique=True),
    sa.Column("cluster", sa.String(CLUSTER), nullable=False),
    sa.Column("kind", sa.String(SHORT), nullable=False),
    sa.Column("status", sa.String(SHORT), nullable=False),
    sa.Column("job_id", sa.String(JOB_ID), nullable=True),
    sa.Column("node", sa.String(NAME), nullable=True),
    sa.Column("advice_id", sa.Integer(), nullable=True),
    sa.Column("started_at", UtcDateTime(), nullable=False),
    sa.Column("finished_at", UtcDateTime(), nullable=True),
    sa.Column("error", LongText(), nullable=True),
    sa.Index(None, "cluster", "job_id"),
    **MYSQL_TABLE_ARGS,
)

audit_events = sa.Table(
    "audit_events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("time", UtcDateTime(), nullable=False),
    sa.Column("actor", sa.String(NAME), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("subject_type", sa.String(SHORT), nullable=False),
    sa.Column("subject_id", sa.String(NAME), nullable=False),
    sa.Column("cluster", sa.String(CLUSTER), nullable=True),
    sa.Column("signature_id", sa.String(128), nullable=True),
    sa.Column("action", sa.String(64), nullable=True),
    sa.Column("verdict", sa.String(NAME), nullable=True),
    sa.Column("mode", sa.String(SHORT), nullable=True),
    sa.Column("payload", JsonText(), nullable=False),
    # Queries filter by one of these and page by id, hence id as the trailing column.
    sa.Index(None, "subject_type", "subject_id", "id"),
    sa.Index(None, "kind", "id"),
    sa.Index(None, "cluster", "id"),
    sa.Index(None, "actor", "id"),
    sa.Index(None, "time"),
    **MYSQL_TABLE_ARGS,
)

cursors = sa.Table(
    "cursors",
    metadata,
    sa.Column("source", sa.String(NAME), primary_key=True),
    sa.Column("value", LongText(), nullable=False),
    **MYSQL_TABLE_ARGS,
)

# --- node auto-repair ----------------------------------------------------------------------
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

# --- the HTTP API: tokens, console sessions, run-time modes ----------------------------------
HASH = 64
"""A SHA-256 hex digest."""
TOKEN_NAME = 128

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("name", sa.String(TOKEN_NAME), primary_key=True),
    sa.Column("role", sa.String(SHORT), nullable=False),
    # Only the hash of the secret: a stolen database gives no usable token.
    sa.Column("secret_hash", sa.String(HASH), nullable=False, unique=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("created_by", sa.String(NAME), nullable=False),
    sa.Column("revoked_at", UtcDateTime(), nullable=True),
    **MYSQL_TABLE_ARGS,
)

api_sessions = sa.Table(
    "api_sessions",
    metadata,
    # The hash of the cookie's session id, never the id itself.
    sa.Column("id_hash", sa.String(HASH), primary_key=True),
    sa.Column("token_name", sa.String(TOKEN_NAME), nullable=False),
    sa.Column("csrf_token", sa.String(HASH), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
    sa.Index(None, "token_name"),
    sa.Index(None, "expires_at"),
    **MYSQL_TABLE_ARGS,
)

modes = sa.Table(
    "modes",
    metadata,
    sa.Column("cluster", sa.String(CLUSTER), primary_key=True),
    # "" is the whole cluster; any other value names a partition.
    sa.Column("partition", sa.String(NAME), primary_key=True),
    sa.Column("mode", sa.String(SHORT), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("updated_by", sa.String(NAME), nullable=False),
    **MYSQL_TABLE_ARGS,
)

MEDIC_TABLES: tuple[str, ...] = tuple(table.name for table in metadata.sorted_tables)
"""Every table medic owns, parents first (drop in reverse order)."""
