"""Engine factory and schema upgrades for SQLite, PostgreSQL and MySQL/MariaDB.

SQLite gets the settings that make one file safe for a control loop and API threads at once:
write-ahead log (readers never block the writer), a busy timeout (writers wait instead of failing)
and ``BEGIN IMMEDIATE`` for write transactions, so two writers serialise at ``BEGIN`` instead of
deadlocking when both try to upgrade a read lock. Read transactions use a plain (deferred)
``BEGIN`` and run concurrently.

Every engine, whatever its backend, replaces NUL and lone surrogates in the text parameters of
each statement by U+FFFD (``medic.domain.text``) just before they reach the driver: PostgreSQL
refuses NUL in text (a log line holding one would lose its detection, or fail a whole loop pass),
no driver can encode a lone surrogate, and the same text must read back the same on every engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import ArgumentError, DBAPIError

from medic.domain.text import clean_text, has_unstorable
from medic.errors import ConfigError

__all__ = [
    "WRITE_OPTION",
    "default_database_url",
    "is_lock_conflict",
    "is_memory_sqlite",
    "make_engine",
    "migrations_config",
    "parse_url",
    "safe_url",
    "upgrade_schema",
]

WRITE_OPTION = "medic_write"
"""Execution option set on a connection before ``begin()`` to mark a write transaction."""

SQLITE_BUSY_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 5
"""Seconds to wait for a PostgreSQL/MySQL server; a down database must fail fast, not hang."""

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def default_database_url() -> str:
    """SQLite file ``medic.db`` in the user's state directory (created if missing)."""
    state_dir = Path(platformdirs.user_state_dir("medic"))
    state_dir.mkdir(parents=True, exist_ok=True)
    return str(URL.create("sqlite", database=str(state_dir / "medic.db")))


def parse_url(url: str) -> URL:
    """Parse a database URL; a malformed one is a configuration error."""
    try:
        return sa.make_url(url)
    except ArgumentError as exc:
        raise ConfigError("store.url", f"not a database URL: {exc}") from exc


def safe_url(url: URL) -> str:
    """The URL as text with the password masked, for messages and logs."""
    return url.render_as_string(hide_password=True)


def is_memory_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with medic's per-engine settings."""
    parsed = parse_url(url)
    backend = parsed.get_backend_name()
    try:
        if backend == "sqlite":
            engine = _sqlite_engine(parsed)
        else:
            connect_args: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S}
            options: dict[str, Any] = {"pool_pre_ping": True}
            if backend in ("mysql", "mariadb"):
                # REPEATABLE READ (the MySQL default) would make a compare-and-set retry re-read
                # its old snapshot; READ COMMITTED sees the winner's row, as on PostgreSQL.
                options["isolation_level"] = "READ COMMITTED"
            engine = sa.create_engine(parsed, connect_args=connect_args, **options)
    except (ArgumentError, ImportError) as exc:
        raise ConfigError(
            "store.url", f"unsupported database URL {safe_url(parsed)}: {exc}"
        ) from exc
    event.listen(engine, "before_cursor_execute", _clean_statement, retval=True)
    return engine


def _clean_statement(
    _conn: Connection,
    _cursor: Any,
    statement: str,
    parameters: Any,
    _context: Any,
    _executemany: bool,
) -> tuple[str, Any]:
    """The statement with storable text parameters (see the module docstring)."""
    return statement, _clean_parameters(parameters)


def _clean_parameters(parameters: Any) -> Any:
    """One parameter set (a mapping or a sequence of values) or a list of them (executemany),
    its text values cleaned; the very same object when nothing needed it (the usual case)."""
    if isinstance(parameters, Mapping):
        if not any(isinstance(v, str) and has_unstorable(v) for v in parameters.values()):
            return parameters
        return {k: clean_text(v) if isinstance(v, str) else v for k, v in parameters.items()}
    if isinstance(parameters, list | tuple) and parameters:
        if isinstance(parameters[0], Mapping | list | tuple):
            cleaned = [_clean_parameters(p) for p in parameters]
            same = all(new is old for new, old in zip(cleaned, parameters, strict=True))
            return parameters if same else type(parameters)(cleaned)
        if any(isinstance(v, str) and has_unstorable(v) for v in parameters):
            return type(parameters)(clean_text(v) if isinstance(v, str) else v for v in parameters)
    return parameters


def _sqlite_engine(url: URL) -> Engine:
    if is_memory_sqlite(url):
        # One shared connection, or each thread would see its own empty database. The store
        # serialises access to it (see ``Database``).
        engine = sa.create_engine(
            url, poolclass=sa.StaticPool, connect_args={"check_same_thread": False}
        )
    else:
        if url.database:
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
        )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 module so that ``_on_begin`` decides its kind.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            # Safe with WAL (no corruption on power loss, at worst the last commits are lost).
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


def migrations_config() -> Config:
    """Alembic configuration pointing at the packaged migrations (no alembic.ini needed)."""
    config = Config()
    # ConfigParser interpolation: a literal % in the install path must be doubled.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return config


def schema_revisions(engine: Engine) -> tuple[str | None, str | None]:
    """(the database's Alembic revision, None when it has no medic schema; the newest one medic
    knows). Reads only."""
    script = ScriptDirectory.from_config(migrations_config())
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current, script.get_current_head()


def upgrade_schema(engine: Engine, revision: str = "head") -> None:
    """Run the Alembic migrations up to ``revision`` on ``engine`` (SQLAlchemy errors escape)."""
    config = migrations_config()
    with engine.connect() as conn:
        conn.execution_options(**{WRITE_OPTION: True})
        with conn.begin():
            config.attributes["connection"] = conn
            command.upgrade(config, revision)


# Errors after which the same transaction, run again, may well succeed.
_PG_RETRY_STATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock detected
_MYSQL_RETRY_CODES = frozenset({1205, 1213})  # lock wait timeout, deadlock found


def is_lock_conflict(exc: DBAPIError) -> bool:
    """True when ``exc`` is a deadlock or serialization failure worth retrying at once."""
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in _PG_RETRY_STATES:
        return True
    args: tuple[object, ...] = getattr(orig, "args", ())
    return bool(args) and isinstance(args[0], int) and args[0] in _MYSQL_RETRY_CODES
