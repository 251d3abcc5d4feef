"""What every table of medic's database shares: the metadata (its constraint naming), the MySQL
table options and the column sizes. The tables are in :mod:`medic.store.tables` (the control
loop's), :mod:`medic.store.repair_tables` and :mod:`medic.store.api_tables`."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

__all__ = ["CLUSTER", "JOB_ID", "MYSQL_TABLE_ARGS", "NAME", "SHORT", "metadata"]

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
