"""Evacuation through advice, and the checkpoint baseline on the repair: ``advice.repair_id`` and
``repairs.checkpoint_baseline``.

A node repair moved the jobs off its node with its own requeue-hold, exclude and release, and a
restarted engine rebuilt from the audit trail whether a hold was the repair's. The repair now
publishes advice for each job (``repair_id``: the repair that owns it; NULL: job recovery's own
decision, as every existing row), carried out by the controller and its ledger. A repair waiting
for its jobs' next checkpoint kept, in memory only, the step each had saved when the wait began
(lost on a restart or a takeover); it is stored on the repair (JSON: ``"job/attempt"`` -> step
or null; NULL on existing rows, read as none recorded yet).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from medic.store.columns import JsonText

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("advice") as batch:
        batch.add_column(sa.Column("repair_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("repairs") as batch:
        batch.add_column(sa.Column("checkpoint_baseline", JsonText(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("repairs") as batch:
        batch.drop_column("checkpoint_baseline")
    with op.batch_alter_table("advice") as batch:
        batch.drop_column("repair_id")
