"""Node auto-repair: alerts, repairs, repair policies, circuit breakers, validation results.

Revision ID: 0002
Revises: 0001
Create Date: 2026-02-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from medic.store.columns import BigId, JsonText, LongText, UtcDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the values in tables.py at the time of this revision.
MYSQL: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def upgrade() -> None:
    _alerts()
    _repairs()
    _policies_and_breakers()


def _alerts() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("detector", sa.String(255), nullable=False),
        sa.Column("summary", LongText(), nullable=False),
        sa.Column("description", LongText(), nullable=False),
        sa.Column("severity", sa.String(32), nullable=False),
        sa.Column("evidence", JsonText(), nullable=False),
        sa.Column("mapped_action", sa.String(32), nullable=True),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("first_seen", UtcDateTime(), nullable=False),
        sa.Column("last_seen", UtcDateTime(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alerts"),
        sa.UniqueConstraint("cluster", "node", "key", name="uq_alerts_cluster_node_key"),
        **MYSQL,
    )


def _repairs() -> None:
    op.create_table(
        "repairs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("requested_by", sa.String(255), nullable=False),
        sa.Column("requester_kind", sa.String(32), nullable=False),
        sa.Column("request_id", sa.String(255), nullable=True),
        sa.Column("reason", LongText(), nullable=False),
        sa.Column("alert_keys", JsonText(), nullable=False),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("approved_by", sa.String(255), nullable=True),
        sa.Column("rule", sa.String(255), nullable=True),
        sa.Column("approved_at", UtcDateTime(), nullable=True),
        sa.Column("wait_deadline", UtcDateTime(), nullable=True),
        sa.Column("interrupted_jobs", JsonText(), nullable=False),
        sa.Column("escalated_from", sa.String(32), nullable=True),
        sa.Column("boot_id", sa.String(255), nullable=True),
        sa.Column("error", LongText(), nullable=True),
        sa.Column("evidence", JsonText(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_repairs"),
        # NULL request ids repeat freely: a UNIQUE constraint ignores NULLs on every engine.
        sa.UniqueConstraint(
            "cluster",
            "requested_by",
            "request_id",
            name="uq_repairs_cluster_requested_by_request_id",
        ),
        **MYSQL,
    )
    op.create_index("ix_repairs_cluster_node_state", "repairs", ["cluster", "node", "state"])
    op.create_index("ix_repairs_cluster_created_at", "repairs", ["cluster", "created_at"])
    op.create_table(
        "validations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("repair_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("tests", JsonText(), nullable=False),
        sa.Column("time", UtcDateTime(), nullable=False),
        sa.Column("ticket", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_validations"),
        sa.ForeignKeyConstraint(
            ["repair_id"], ["repairs.id"], name="fk_validations_repair_id_repairs"
        ),
        **MYSQL,
    )
    op.create_index("ix_validations_repair_id", "validations", ["repair_id"])


def _policies_and_breakers() -> None:
    op.create_table(
        "repair_policies",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("policy", JsonText(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", name="pk_repair_policies"),
        **MYSQL,
    )
    op.create_table(
        "breakers",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("tripped", sa.Boolean(), nullable=False),
        sa.Column("tripped_at", UtcDateTime(), nullable=True),
        sa.Column("reason", LongText(), nullable=True),
        sa.Column("reset_by", sa.String(255), nullable=True),
        sa.Column("reset_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("cluster", name="pk_breakers"),
        **MYSQL,
    )


def downgrade() -> None:
    # Dropping a table drops its indexes; validations first, it refers to repairs.
    for table in ("breakers", "repair_policies", "validations", "repairs", "alerts"):
        op.drop_table(table)
