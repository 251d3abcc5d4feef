"""Repeated evidence is counted, not stored once per line: ``detections.count``,
``detections.last_seen`` and ``detections.dedupe_key``.

100,000 identical matching lines were 100,000 detection rows for one attempt. Identical
detections (same job, attempt, signature, node, rank and fields) now share one row, found by
``dedupe_key`` (a digest of those, unique per cluster): the first line stays as evidence,
``count`` adds up, ``last_seen`` says when the last one was seen. Existing rows count once, were
last seen when they were first, and have no key (NULL, which never collides): new detections never
merge into them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-08 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from medic.store.columns import UtcDateTime

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNIQUE = "uq_detections_cluster_dedupe_key"


def upgrade() -> None:
    with op.batch_alter_table("detections") as batch:
        batch.add_column(sa.Column("count", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("last_seen", UtcDateTime(), nullable=True))
        batch.add_column(sa.Column("dedupe_key", sa.String(64), nullable=True))
    detections = sa.table(
        "detections", sa.column("count"), sa.column("last_seen"), sa.column("time")
    )
    op.execute(sa.update(detections).values(count=1, last_seen=detections.c.time))
    with op.batch_alter_table("detections") as batch:
        batch.alter_column("count", existing_type=sa.BigInteger(), nullable=False)
        batch.alter_column("last_seen", existing_type=UtcDateTime(), nullable=False)
        batch.create_unique_constraint(UNIQUE, ["cluster", "dedupe_key"])


def downgrade() -> None:
    with op.batch_alter_table("detections") as batch:
        batch.drop_constraint(UNIQUE, type_="unique")
        batch.drop_column("dedupe_key")
        batch.drop_column("last_seen")
        batch.drop_column("count")
