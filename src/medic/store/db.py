"""Transactions, error translation and portable upserts shared by the store modules.

Every database call of the store goes through :meth:`Database.read` or :meth:`Database.write`,
which run one function in one transaction and translate SQLAlchemy errors into ``StoreError``
(naming the URL without its password), so no SQLAlchemy exception crosses the port.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from medic.errors import StoreError
from medic.store.engine import WRITE_OPTION, is_lock_conflict, is_memory_sqlite, safe_url

__all__ = ["Database", "DuplicateKeyError"]

T = TypeVar("T")

LOCK_RETRIES = 4
"""Runs of a transaction that hit a deadlock or serialization failure, before giving up."""


class DuplicateKeyError(StoreError):
    """An INSERT hit a unique or primary key (or another integrity constraint).

    Internal: callers that insert idempotently catch it and re-read; elsewhere it is a StoreError.
    """


class Database:
    """An engine plus the rules for using it: one transaction per call, translated errors."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.url = safe_url(engine.url)
        self.dialect = engine.dialect.name
        # An in-memory SQLite database lives on one shared connection, which is not safe to use
        # from two threads at once; file databases and servers use one connection per thread.
        self._serial: AbstractContextManager[Any] = (
            threading.RLock() if is_memory_sqlite(engine.url) else nullcontext()
        )
        self._upserts: dict[tuple[object, ...], sa.Executable] = {}

    @property
    def is_mysql(self) -> bool:
        return self.dialect in ("mysql", "mariadb")

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in a read transaction."""
        return self._run(work, write=False)

    def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in a write transaction, again after a deadlock (so it must be re-runnable).

        Raises ``DuplicateKeyError`` when a constraint rejected a row.
        """
        return self._run(work, write=True)

    def _run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        for attempt in range(LOCK_RETRIES):
            try:
                with self._serial, self.engine.connect() as conn:
                    if write:
                        conn.execution_options(**{WRITE_OPTION: True})
                    with conn.begin():
                        return work(conn)
            except IntegrityError as exc:
                raise DuplicateKeyError(self._message(exc)) from exc
            except DBAPIError as exc:
                if attempt + 1 < LOCK_RETRIES and is_lock_conflict(exc):
                    # Back off a little so the winner can commit before we run again.
                    time.sleep(0.01 * (attempt + 1))
                    continue
                raise StoreError(self._message(exc)) from exc
            except SQLAlchemyError as exc:
                raise StoreError(self._message(exc)) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _message(self, exc: SQLAlchemyError) -> str:
        if isinstance(exc, DBAPIError) and exc.orig is not None:
            detail = f"{type(exc.orig).__name__}: {exc.orig}"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        # Driver messages can span lines (PostgreSQL adds DETAIL/HINT); keep the first two.
        detail = " ".join(detail.strip().splitlines()[:2])
        return f"database {self.url}: {detail}"

    def upsert(
        self,
        table: sa.Table,
        keys: Sequence[str],
        update: Sequence[str],
        keep_first: Sequence[str] = (),
        add: Sequence[str] = (),
    ) -> sa.Executable:
        """INSERT that updates the ``update`` columns when a row with the same ``keys`` exists.

        Columns in ``keep_first`` keep their stored value unless it is NULL; columns in ``add``
        get the new value added to the stored one (a count). Execute the result with a list of
        parameter dicts for a bulk upsert. Built once per shape: the loop upserts every pass, and
        building the statement cost more than running it.
        """
        key = (table.name, tuple(keys), tuple(update), tuple(keep_first), tuple(add))
        stmt = self._upserts.get(key)
        if stmt is None:
            stmt = self._upserts[key] = self._build_upsert(table, keys, update, keep_first, add)
        return stmt

    def _build_upsert(
        self,
        table: sa.Table,
        keys: Sequence[str],
        update: Sequence[str],
        keep_first: Sequence[str],
        add: Sequence[str],
    ) -> sa.Executable:
        if self.is_mysql:
            my = mysql.insert(table)
            # In ON DUPLICATE KEY UPDATE a bare column is the stored value, VALUES() the new one.
            my_set: dict[str, Any] = {name: my.inserted[name] for name in update}
            for name in keep_first:
                my_set[name] = sa.func.coalesce(table.c[name], my.inserted[name])
            for name in add:
                my_set[name] = table.c[name] + my.inserted[name]
            if not my_set:
                # MySQL has no "DO NOTHING"; assigning a key to itself is the usual no-op.
                my_set[keys[0]] = table.c[keys[0]]
            return my.on_duplicate_key_update(my_set)
        builder = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        stmt = builder(table)
        new_values: Mapping[str, Any] = {name: stmt.excluded[name] for name in update}
        set_: dict[str, Any] = dict(new_values)
        for name in keep_first:
            set_[name] = sa.func.coalesce(table.c[name], stmt.excluded[name])
        for name in add:
            set_[name] = table.c[name] + stmt.excluded[name]
        if not set_:
            return stmt.on_conflict_do_nothing(index_elements=list(keys))
        return stmt.on_conflict_do_update(index_elements=list(keys), set_=set_)
