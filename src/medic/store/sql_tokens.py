"""API tokens, console sessions and run-time modes of the SQL store (``medic.ports.TokenStore``
and ``medic.ports.ModeStore``).

Tokens are stored by name with the SHA-256 hash of their secret (unique, so a lookup by hash is
one index probe); a revoked token keeps its row until a new token takes its name. Sessions are
stored by the hash of their id and deleted when they end, are signed out of, or their token is
revoked. Modes are one row per (cluster, partition), ``""`` standing for the whole cluster;
``put_modes`` replaces a cluster's rows in one transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from medic.domain.auth import Role, Session, Token
from medic.domain.cluster import Mode
from medic.domain.ids import ClusterName
from medic.domain.modes import ClusterModes
from medic.errors import ConflictError, NotFoundError
from medic.store.db import Database, DuplicateKeyError
from medic.store.tables import api_sessions, api_tokens, modes

__all__ = [
    "create_session",
    "create_token",
    "delete_session",
    "find_token",
    "get_modes",
    "get_session",
    "get_token",
    "list_tokens",
    "purge_sessions",
    "put_modes",
    "revoke_token",
]

_CLUSTER_WIDE = ""


# --- tokens --------------------------------------------------------------------------------
def create_token(db: Database, token: Token) -> None:
    row: dict[str, Any] = {
        "name": token.name,
        "role": token.role.value,
        "secret_hash": token.secret_hash,
        "created_at": token.created_at,
        "created_by": token.created_by,
        "revoked_at": token.revoked_at,
    }

    def work(conn: Connection) -> None:
        found = conn.execute(
            sa.select(api_tokens.c.revoked_at).where(api_tokens.c.name == token.name)
        ).first()
        if found is None:
            conn.execute(sa.insert(api_tokens).values(row))
            return
        if found.revoked_at is None:
            raise ConflictError(f"a token named {token.name!r} exists; revoke it first")
        # A revoked token's name is free again: the new token replaces the old row.
        conn.execute(sa.delete(api_sessions).where(api_sessions.c.token_name == token.name))
        conn.execute(sa.update(api_tokens).where(api_tokens.c.name == token.name).values(row))

    try:
        db.write(work)
    except DuplicateKeyError:
        if get_token(db, token.name) is not None:  # a concurrent create took the name first
            raise ConflictError(f"a token named {token.name!r} exists; revoke it first") from None
        raise


def get_token(db: Database, name: str) -> Token | None:
    query = sa.select(api_tokens).where(api_tokens.c.name == name)
    row = db.read(lambda conn: conn.execute(query).first())
    return None if row is None else _token(row._mapping)


def find_token(db: Database, secret_hash: str) -> Token | None:
    query = sa.select(api_tokens).where(api_tokens.c.secret_hash == secret_hash)
    row = db.read(lambda conn: conn.execute(query).first())
    return None if row is None else _token(row._mapping)


def list_tokens(db: Database) -> list[Token]:
    query = sa.select(api_tokens).order_by(api_tokens.c.name)
    rows = db.read(lambda conn: conn.execute(query).all())
    return [_token(row._mapping) for row in rows]


def revoke_token(db: Database, name: str, now: datetime) -> Token:
    def work(conn: Connection) -> Token:
        conn.execute(
            sa.update(api_tokens)
            .where(api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )
        conn.execute(sa.delete(api_sessions).where(api_sessions.c.token_name == name))
        row = conn.execute(sa.select(api_tokens).where(api_tokens.c.name == name)).first()
        if row is None:
            raise NotFoundError(f"no token is named {name!r}; list them with `medic tokens list`")
        return _token(row._mapping)

    return db.write(work)


def _token(data: RowMapping) -> Token:
    return Token(
        name=data["name"],
        role=Role(data["role"]),
        secret_hash=data["secret_hash"],
        created_at=data["created_at"],
        created_by=data["created_by"],
        revoked_at=data["revoked_at"],
    )


# --- sessions ------------------------------------------------------------------------------
def create_session(db: Database, session: Session) -> None:
    row = {
        "id_hash": session.id_hash,
        "token_name": session.token_name,
        "csrf_token": session.csrf_token,
        "created_at": session.created_at,
        "expires_at": session.expires_at,
    }
    db.write(lambda conn: conn.execute(sa.insert(api_sessions).values(row)))


def get_session(db: Database, id_hash: str) -> Session | None:
    query = sa.select(api_sessions).where(api_sessions.c.id_hash == id_hash)
    row = db.read(lambda conn: conn.execute(query).first())
    if row is None:
        return None
    return Session(
        id_hash=row.id_hash,
        token_name=row.token_name,
        csrf_token=row.csrf_token,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def delete_session(db: Database, id_hash: str) -> bool:
    stmt = sa.delete(api_sessions).where(api_sessions.c.id_hash == id_hash)
    return bool(db.write(lambda conn: conn.execute(stmt).rowcount) == 1)


def purge_sessions(db: Database, now: datetime) -> int:
    stmt = sa.delete(api_sessions).where(api_sessions.c.expires_at <= now)
    return int(db.write(lambda conn: conn.execute(stmt).rowcount))


# --- modes ---------------------------------------------------------------------------------
def get_modes(db: Database, cluster: ClusterName) -> ClusterModes:
    return db.read(lambda conn: _read_modes(conn, cluster))


def put_modes(db: Database, new: ClusterModes, now: datetime, by: str) -> ClusterModes:
    rows: list[dict[str, Any]] = [
        {"partition": partition, "mode": mode.value}
        for partition, mode in sorted(new.partitions.items())
    ]
    if new.mode is not None:
        rows.append({"partition": _CLUSTER_WIDE, "mode": new.mode.value})
    for row in rows:
        row.update(cluster=new.cluster, updated_at=now, updated_by=by)

    def work(conn: Connection) -> ClusterModes:
        old = _read_modes(conn, new.cluster)
        conn.execute(sa.delete(modes).where(modes.c.cluster == new.cluster))
        if rows:
            conn.execute(sa.insert(modes), rows)
        return old

    try:
        return db.write(work)
    except DuplicateKeyError:
        # A concurrent writer inserted rows this transaction's DELETE could not see: run again
        # (a second collision escapes as a StoreError).
        return db.write(work)


def _read_modes(conn: Connection, cluster: ClusterName) -> ClusterModes:
    rows = conn.execute(
        sa.select(modes.c.partition, modes.c.mode).where(modes.c.cluster == cluster)
    ).all()
    by_partition = {str(row.partition): Mode(row.mode) for row in rows}
    return ClusterModes(
        cluster=cluster,
        mode=by_partition.pop(_CLUSTER_WIDE, None),
        partitions=dict(sorted(by_partition.items())),
    )
