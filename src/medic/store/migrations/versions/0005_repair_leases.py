"""Who carries a repair out, and until when: ``repairs.owner`` and ``repairs.lease_until``.

Ownership of a repair in progress lived in each engine's memory: a restarted medic could not
tell a repair another live replica was executing from one whose engine had died, and waited an
hour before failing it (the node left drained). The engine that moves a repair now records
itself as its owner with a lease it renews while it works; another engine takes the repair over
(a compare-and-set on these columns) once the lease ran out. Existing repairs have no owner: the
first engine to work on them takes them.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from medic.store.columns import UtcDateTime

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("repairs") as batch:
        batch.add_column(sa.Column("owner", sa.String(255), nullable=True))
        batch.add_column(sa.Column("lease_until", UtcDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("repairs") as batch:
        batch.drop_column("lease_until")
        batch.drop_column("owner")
