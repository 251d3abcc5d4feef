"""Node health as one read model: ``node_health``.

Health was computed in three places (the repair engine over 10 days, the API over all history,
the console in JavaScript) and they disagreed. The repair engine now writes its own, each pass it
changes: one row per node that is not healthy, with when it entered that health; the API, the CLI
and the console read it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-09 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from medic.store.columns import UtcDateTime

revision: str = "0007"
down_revision: str | None = "0006"
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
        "node_health",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("health", sa.String(32), nullable=False),
        sa.Column("since", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", name="pk_node_health"),
        **MYSQL,
    )


def downgrade() -> None:
    op.drop_table("node_health")
