"""Portable column types shared by the table metadata and the migrations.

The three engines disagree on timestamps and long text: MySQL/MariaDB truncate ``DATETIME`` to
seconds and cap ``TEXT`` at 64 KiB, and none of them store a time zone the same way. These
decorators give one behaviour everywhere: UTC with microseconds, unbounded text, JSON as text.
JSON documents hold no NUL and no lone surrogate, escaped or not, written or read (each becomes
U+FFFD, ``medic.domain.text``): a document stored before that rule still reads, and answers, as
valid UTF-8. Plain text parameters get the same rule for every statement (``medic.store.engine``).

Migrations import these classes, so their names and constructor arguments must stay stable.
"""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from medic.domain.text import clean_json

__all__ = ["BigId", "JsonText", "LongText", "UtcDateTime", "dump_json"]


def _is_mysql(dialect: Dialect) -> bool:
    return dialect.name in ("mysql", "mariadb")


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC in Python, naive UTC with microseconds in the database.

    Storing naive UTC avoids each engine's own time-zone handling (MySQL converts ``TIMESTAMP``
    by session zone, SQLite has none); a naive datetime from the caller is a bug and is refused.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if _is_mysql(dialect):
            # Plain DATETIME drops the fractional seconds on MySQL/MariaDB.
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given; medic stores aware UTC")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC)


class LongText(sa.TypeDecorator[str]):
    """Text without the 64 KiB cap of MySQL's ``TEXT`` (log lines, reasons, summaries)."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if _is_mysql(dialect):
            return dialect.type_descriptor(mysql.LONGTEXT())
        return dialect.type_descriptor(sa.Text())


def _json_default(value: object) -> object:
    # Audit payloads are built by many callers; an odd value must not lose the audit record.
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(str(item) for item in value)
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)


def dump_json(value: object) -> str:
    """Deterministic JSON (sorted keys), so equal values give equal text on every engine."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)


class JsonText(sa.TypeDecorator[Any]):
    """JSON stored as text.

    Text rather than the engines' JSON types: MariaDB's JSON is an alias of LONGTEXT that reflects
    differently from what was declared, and medic never queries inside these documents. Free JSON
    (alert evidence, audit payloads) may hold ``"\\u0000"`` or a lone ``"\\udfff"``: cleaned both
    ways, since PostgreSQL refuses the one and no response can encode the other.
    """

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if _is_mysql(dialect):
            return dialect.type_descriptor(mysql.LONGTEXT())
        return dialect.type_descriptor(sa.Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return clean_json(dump_json(value))

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        return json.loads(clean_json(value))


BigId: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""Primary key of the growing tables: 64-bit, except on SQLite where only ``INTEGER PRIMARY KEY``
aliases the rowid and so autoincrements (SQLite integers are 64-bit anyway)."""
