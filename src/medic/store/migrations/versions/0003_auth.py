"""The HTTP API's authentication and run-time modes: API tokens (hashed), console sessions, and
observe/act modes per cluster and partition.

Revision ID: 0003
Revises: 0002
Create Date: 2026-03-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from medic.store.columns import UtcDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the values in tables.py at the time of this revision.
MYSQL: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("revoked_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_api_tokens"),
        sa.UniqueConstraint("secret_hash", name="uq_api_tokens_secret_hash"),
        **MYSQL,
    )
    op.create_table(
        "api_sessions",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("token_name", sa.String(128), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name="pk_api_sessions"),
        **MYSQL,
    )
    op.create_index("ix_api_sessions_token_name", "api_sessions", ["token_name"])
    op.create_index("ix_api_sessions_expires_at", "api_sessions", ["expires_at"])
    op.create_table(
        "modes",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("mode", sa.String(32), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "partition", name="pk_modes"),
        **MYSQL,
    )


def downgrade() -> None:
    for table in ("modes", "api_sessions", "api_tokens"):
        op.drop_table(table)
