"""Leases and fenced steps: the ``leases`` table, ``scheduler_actions.holder`` and ``.token``.

Two ``medic serve`` replicas on one database both ran the control loop and both issued steps:
nothing said which process acts. A process now takes the lease of a cluster's control work
(holder, expiry, and a fencing token that grows at each change of holder) before it acts, and
records on each step which holder began it under which token; the store refuses a step whose
token is no longer the lease's. Existing steps have neither (recorded before leases existed).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-12 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from medic.store.columns import UtcDateTime

revision: str = "0009"
down_revision: str | None = "0008"
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
        "leases",
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", UtcDateTime(), nullable=False),
        sa.Column("renewed_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
        **MYSQL,
    )
    with op.batch_alter_table("scheduler_actions") as batch:
        batch.add_column(sa.Column("holder", sa.String(255), nullable=True))
        batch.add_column(sa.Column("token", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduler_actions") as batch:
        batch.drop_column("token")
        batch.drop_column("holder")
    op.drop_table("leases")
