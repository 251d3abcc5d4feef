"""Leases in the SQL store: taken, renewed and handed over by compare-and-set.

A lease row is read ``FOR UPDATE`` (PostgreSQL, MySQL/MariaDB; SQLite serialises writers on its
own) in the transaction that changes it, so two processes taking an expired lease at once both
see the same token and only one update matches it. :func:`check_fence` is the same read inside
another write (a ledger step): the row lock makes a takeover wait for that write to commit, so a
step is either recorded before the new holder reads the ledger or refused.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from medic.domain.leases import Fence, Lease
from medic.errors import FencedError
from medic.store.db import Database, DuplicateKeyError
from medic.store.tables import leases

__all__ = ["acquire_lease", "check_fence", "list_leases", "release_lease"]

_INSERT_RACES = 3
"""Re-runs after another process inserted the same new lease first (the second run sees it)."""


def acquire_lease(db: Database, name: str, holder: str, now: datetime, ttl_seconds: float) -> Lease:
    """Take or renew ``name`` for ``holder`` until ``now + ttl_seconds``.

    Returns the lease as it stands afterwards: ``holder``'s when it was free, expired or already
    held by ``holder`` (renewed, its token kept), otherwise the live holder's, unchanged."""
    until = now + timedelta(seconds=ttl_seconds)

    def work(conn: Connection) -> Lease:
        row = conn.execute(_locked(name)).first()
        if row is None:
            values = {"name": name, "holder": holder, "token": 1, "acquired_at": now}
            conn.execute(sa.insert(leases).values(**values, renewed_at=now, expires_at=until))
            return Lease(name, holder, 1, now, now, until)
        current = _lease(row)
        if current.holder != holder and current.live(now):
            return current
        # Renewed by its holder (even after it ran out: nobody took it meanwhile), or taken over.
        token = current.token if current.holder == holder else current.token + 1
        acquired = current.acquired_at if current.holder == holder else now
        changed = conn.execute(
            sa.update(leases)
            .where(leases.c.name == name, leases.c.token == current.token)
            .values(holder=holder, token=token, acquired_at=acquired)
            .values(renewed_at=now, expires_at=until)
        ).rowcount
        if changed != 1:  # SQLite without row locks: another writer won between read and write
            return _lease(conn.execute(_locked(name)).one())
        return Lease(name, holder, token, acquired, now, until)

    for _ in range(_INSERT_RACES):
        try:
            return db.write(work)
        except DuplicateKeyError:
            continue
    return db.write(work)


def release_lease(db: Database, name: str, holder: str, now: datetime) -> bool:
    """Let ``name`` run out now if ``holder`` holds it (a clean shutdown: another process takes
    it at once instead of a lease later); False when it did not hold it."""
    stmt = (
        sa.update(leases)
        .where(leases.c.name == name, leases.c.holder == holder, leases.c.expires_at > now)
        .values(expires_at=now, renewed_at=now)
    )
    return bool(db.write(lambda conn: conn.execute(stmt).rowcount))


def list_leases(db: Database) -> list[Lease]:
    query = sa.select(leases).order_by(leases.c.name)
    return [_lease(row) for row in db.read(lambda conn: conn.execute(query).all())]


def check_fence(conn: Connection, fence: Fence, now: datetime) -> None:
    """Raise ``FencedError`` unless ``fence`` is the lease's current holder and token and the lease
    has not run out by ``now``; locks the lease row until the caller's transaction ends."""
    row = conn.execute(_locked(fence.lease)).first()
    if row is None:
        raise FencedError(f"lease {fence.lease!r} does not exist: {fence.holder} never held it")
    current = _lease(row)
    if (current.holder, current.token) != (fence.holder, fence.token):
        raise FencedError(
            f"lease {fence.lease!r} is held by {current.holder} (token {current.token}) since "
            f"{current.acquired_at.isoformat()}, not by {fence.holder} (token {fence.token})"
        )
    if not current.live(now):
        raise FencedError(
            f"lease {fence.lease!r} of {fence.holder} ran out at {current.expires_at.isoformat()}"
        )


def _locked(name: str) -> sa.Select[Any]:
    return sa.select(leases).where(leases.c.name == name).with_for_update()


def _lease(row: Row[Any]) -> Lease:
    return Lease(
        name=row._mapping["name"],
        holder=row.holder,
        token=row.token,
        acquired_at=row.acquired_at,
        renewed_at=row.renewed_at,
        expires_at=row.expires_at,
    )
