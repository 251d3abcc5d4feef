"""SQLAlchemy Core tables of medic's database: the control loop's here, node repair's in
:mod:`medic.store.repair_tables`, the API's in :mod:`medic.store.api_tables`, all on the one
:data:`~medic.store.schema.metadata` (re-exported here).

The Alembic migrations create these tables; ``tests/contract/test_store.py`` checks that the
migrated schema and this metadata agree, so a change here needs a new migration.

Columns hold plain values (enum values as strings, sets and tuples as JSON lists); the store
modules convert rows to domain objects. There are few foreign keys on purpose: detections,
progress and advice may arrive for a job before the inventory has synced it.
"""

from __future__ import annotations

import sqlalchemy as sa

from medic.store.api_tables import api_sessions, api_tokens, modes
from medic.store.columns import BigId, JsonText, LongText, UtcDateTime
from medic.store.repair_tables import (
    alerts,
    breakers,
    node_health,
    repair_policies,
    repairs,
    validations,
)
from medic.store.schema import CLUSTER, JOB_ID, MYSQL_TABLE_ARGS, NAME, SHORT, metadata

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
    "leases",
    "metadata",
    "modes",
    "node_health",
    "nodes",
    "repair_policies",
    "repairs",
    "validations",
    "verdicts",
]

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
    sa.Column("holder", sa.String(NAME), nullable=True),
    sa.Column("token", sa.BigInteger(), nullable=True),
    sa.Index(None, "cluster", "job_id"),
    **MYSQL_TABLE_ARGS,
)

leases = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(NAME), primary_key=True),
    sa.Column("holder", sa.String(NAME), nullable=False),
    sa.Column("token", sa.BigInteger(), nullable=False),
    sa.Column("acquired_at", UtcDateTime(), nullable=False),
    sa.Column("renewed_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
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

MEDIC_TABLES: tuple[str, ...] = tuple(table.name for table in metadata.sorted_tables)
"""Every table medic owns, parents first (drop in reverse order)."""
