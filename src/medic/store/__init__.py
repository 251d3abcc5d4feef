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

from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

from medic.errors import StoreError
from medic.store.engine import default_database_url, make_engine, safe_url, upgrade_schema
from medic.store.sql import SqlStore

__all__ = ["SqlStore", "create_store", "default_database_url"]


def create_store(url: str) -> SqlStore:
    """Connect to ``url``, upgrade its schema to the newest revision and return the store.

    Raises ``ConfigError`` for a malformed or unsupported URL and ``StoreError`` when the
    database cannot be reached or migrated (the message names the URL, password masked).
    """
    engine = make_engine(url)
    try:
        upgrade_schema(engine)
    except (SQLAlchemyError, CommandError) as exc:
        engine.dispose()
        detail = " ".join(str(getattr(exc, "orig", None) or exc).strip().splitlines()[:2])
        raise StoreError(
            f"database {safe_url(engine.url)}: cannot migrate schema: "
            f"{type(getattr(exc, 'orig', None) or exc).__name__}: {detail}"
        ) from exc
    except BaseException:
        engine.dispose()
        raise
    return SqlStore(engine)
