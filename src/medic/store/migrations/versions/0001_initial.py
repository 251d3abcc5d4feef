"""Initial schema: inventory, attempts, diagnosis, advice, scheduler actions, audit, cursors.

Also installs triggers that make ``audit_events`` append-only in the database itself (SQLite,
PostgreSQL, MySQL/MariaDB), so not even a bug or a hand-typed statement can rewrite history.

Revision ID: 0001
Revises:
Create Date: 2026-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from medic.store.columns import BigId, JsonText, LongText, UtcDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the values in tables.py at the time of this revision.
MYSQL: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
APPEND_ONLY = "audit_events is append-only"


def upgrade() -> None:
    _inventory()
    _diagnosis()
    _advice_and_actions()
    _audit()
    _audit_triggers()


def _inventory() -> None:
    op.create_table(
        "clusters",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("scheduler", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_clusters"),
        **MYSQL,
    )
    op.create_table(
        "nodes",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("partitions", JsonText(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("reason", LongText(), nullable=True),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "name", name="pk_nodes"),
        sa.ForeignKeyConstraint(["cluster"], ["clusters.name"], name="fk_nodes_cluster_clusters"),
        **MYSQL,
    )
    op.create_table(
        "jobs",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("name", LongText(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
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
        sa.PrimaryKeyConstraint("cluster", "job_id", name="pk_jobs"),
        sa.ForeignKeyConstraint(["cluster"], ["clusters.name"], name="fk_jobs_cluster_clusters"),
        **MYSQL,
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("nodes", JsonText(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("started_at", UtcDateTime(), nullable=True),
        sa.Column("ended_at", UtcDateTime(), nullable=True),
        sa.Column("first_step", sa.BigInteger(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("last_checkpoint_step", sa.BigInteger(), nullable=True),
        sa.Column("loaded_checkpoint_step", sa.BigInteger(), nullable=True),
        sa.Column("last_progress_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.UniqueConstraint(
            "cluster", "job_id", "number", name="uq_attempts_cluster_job_id_number"
        ),
        **MYSQL,
    )
    op.create_table(
        "cursors",
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("value", LongText(), nullable=False),
        sa.PrimaryKeyConstraint("source", name="pk_cursors"),
        **MYSQL,
    )


def _diagnosis() -> None:
    op.create_table(
        "detections",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("signature_id", sa.String(128), nullable=False),
        sa.Column("domain", sa.String(32), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("severity", sa.String(32), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("time", UtcDateTime(), nullable=False),
        sa.Column("node", sa.String(255), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("implicates_node", sa.Boolean(), nullable=False),
        sa.Column("text", LongText(), nullable=False),
        sa.Column("fields", JsonText(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_detections"),
        **MYSQL,
    )
    op.create_index(
        "ix_detections_cluster_job_id_attempt", "detections", ["cluster", "job_id", "attempt"]
    )
    op.create_table(
        "verdicts",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("domain", sa.String(32), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("implicated_nodes", JsonText(), nullable=False),
        sa.Column("confidence", sa.Double(), nullable=False),
        sa.Column("root_signature", sa.String(128), nullable=True),
        sa.Column("summary", LongText(), nullable=False),
        sa.Column("evidence", JsonText(), nullable=False),
        sa.Column("time", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_verdicts"),
        **MYSQL,
    )
    op.create_index("ix_verdicts_cluster_job_id", "verdicts", ["cluster", "job_id"])


def _advice_and_actions() -> None:
    op.create_table(
        "advice",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("observed_generation", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("exclude_nodes", JsonText(), nullable=False),
        sa.Column("reason", LongText(), nullable=False),
        sa.Column("mode", sa.String(32), nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_advice"),
        sa.UniqueConstraint("cluster", "job_id", name="uq_advice_cluster_job_id"),
        **MYSQL,
    )
    op.create_table(
        "scheduler_actions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=True),
        sa.Column("node", sa.String(255), nullable=True),
        sa.Column("advice_id", sa.Integer(), nullable=True),
        sa.Column("started_at", UtcDateTime(), nullable=False),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("error", LongText(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_scheduler_actions"),
        sa.UniqueConstraint("key", name="uq_scheduler_actions_key"),
        **MYSQL,
    )
    op.create_index(
        "ix_scheduler_actions_cluster_job_id", "scheduler_actions", ["cluster", "job_id"]
    )


def _audit() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("time", UtcDateTime(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("subject_type", sa.String(32), nullable=False),
        sa.Column("subject_id", sa.String(255), nullable=False),
        sa.Column("cluster", sa.String(128), nullable=True),
        sa.Column("signature_id", sa.String(128), nullable=True),
        sa.Column("action", sa.String(64), nullable=True),
        sa.Column("verdict", sa.String(255), nullable=True),
        sa.Column("mode", sa.String(32), nullable=True),
        sa.Column("payload", JsonText(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
        **MYSQL,
    )
    op.create_index(
        "ix_audit_events_subject_type_subject_id_id",
        "audit_events",
        ["subject_type", "subject_id", "id"],
    )
    op.create_index("ix_audit_events_kind_id", "audit_events", ["kind", "id"])
    op.create_index("ix_audit_events_cluster_id", "audit_events", ["cluster", "id"])
    op.create_index("ix_audit_events_time", "audit_events", ["time"])


def _audit_triggers() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_events_no_{verb.lower()} BEFORE {verb} ON audit_events "
                f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION medic_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{APPEND_ONLY}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events "
            "FOR EACH ROW EXECUTE FUNCTION medic_audit_append_only()"
        )
    elif dialect in ("mysql", "mariadb"):
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_events_no_{verb.lower()} BEFORE {verb} ON audit_events "
                f"FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{APPEND_ONLY}'"
            )


def downgrade() -> None:
    # Dropping a table drops its triggers on every engine; only PostgreSQL's function remains.
    for table in (
        "audit_events",
        "scheduler_actions",
        "advice",
        "verdicts",
        "detections",
        "cursors",
        "attempts",
        "jobs",
        "nodes",
        "clusters",
    ):
        op.drop_table(table)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS medic_audit_append_only()")
