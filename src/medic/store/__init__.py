"""Persistence adapter: ``medic.ports.Store`` and ``RepairStore`` on SQLite, PostgreSQL or
MySQL/MariaDB.

The only package of medic that imports SQLAlchemy or Alembic. The composition root calls
:func:`create_store` with the configured URL (or :func:`default_database_url`), which migrates
the schema to the newest revision and returns a thread-safe :class:`SqlStore`; ``close()`` it on
shutdown.

Modules: ``engine`` (engine settings, migrations runner), ``columns`` and ``tables`` (schema),
``db`` (transactions, error translation), ``sql`` (the store facade) over ``sql_inventory``,
``sql_diagnosis``, ``sql_advice``, ``sql_audit``, ``sql_repairs`` and ``sql_repair_state``;
``migrations/`` holds the Alembic revisions.
"""

from __future__ import annotations

from pathlib import Path

from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

from medic.errors import StoreError
from medic.store.engine import (
    default_database_url,
    make_engine,
    safe_url,
    schema_revisions,
    upgrade_schema,
)
from medic.store.sql import SqlStore

__all__ = ["SqlStore", "create_store", "default_database_url"]


def create_store(url: str, *, migrate: bool = True) -> SqlStore:
    """Connect to ``url``, upgrade its schema to the newest revision and return the store.

    ``migrate=False`` (commands that only read) changes nothing: a database whose schema is not
    medic's newest is a ``StoreError`` that says so. Raises ``ConfigError`` for a malformed or
    unsupported URL and ``StoreError`` when the database cannot be reached or migrated (the
    message names the URL, password masked).
    """
    engine = make_engine(url)
    database = engine.url.database or ""
    sqlite_file = engine.url.get_backend_name() == "sqlite" and database not in ("", ":memory:")
    if not migrate and sqlite_file and not Path(database).is_file():  # connecting creates it
        engine.dispose()
        raise StoreError(
            f"no database at {database}; this command only reads: start `medic serve` (or"
            " `medic controller`) once to create it, or point MEDIC_DATABASE_URL at yours"
        )
    try:
        if migrate:
            upgrade_schema(engine)
        else:
            current, head = schema_revisions(engine)
            if current != head:
                said = "has no medic schema yet" if current is None else f"is at revision {current}"
                raise StoreError(
                    f"database {safe_url(engine.url)} {said}, medic needs {head}; this command only"
                    " reads: start `medic serve` (or `medic controller`) once to create or upgrade"
                    " it"
                )
    except (SQLAlchemyError, CommandError) as exc:
        engine.dispose()
        detail = " ".join(str(getattr(exc, "orig", None) or exc).strip().splitlines()[:2])
        what = "cannot migrate schema" if migrate else "cannot read"
        raise StoreError(
            f"database {safe_url(engine.url)}: {what}: "
            f"{type(getattr(exc, 'orig', None) or exc).__name__}: {detail}"
        ) from exc
    except BaseException:
        engine.dispose()
        raise
    return SqlStore(engine)
