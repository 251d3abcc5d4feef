"""Contract tests of ``medic.ports.TokenStore`` and ``ModeStore`` on ``SqlStore``, on every
database engine: SQLite always, PostgreSQL and MariaDB/MySQL when ``MEDIC_TEST_POSTGRES_URL`` /
``MEDIC_TEST_MYSQL_URL`` name a disposable database (as in ``test_store.py``, whose helpers this
module reuses). The schema is reset once per engine and module; between tests the auth tables are
emptied and the schema brought back to the head revision (the migration test leaves it at
``0002``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from contract.test_store import ENGINES, T0, _drop_everything, _race
from medic.domain.auth import Role, Session, Token, hash_secret, new_secret
from medic.domain.cluster import Mode
from medic.domain.ids import ClusterName
from medic.domain.modes import ClusterModes
from medic.errors import ConflictError, NotFoundError, StoreError
from medic.ports import ModeStore, TokenStore
from medic.store import SqlStore, create_store
from medic.store.engine import migrations_config, upgrade_schema
from medic.store.tables import metadata

pytestmark = pytest.mark.db

C = ClusterName("alpha")
B = ClusterName("beta")
AUTH_TABLES = {"api_tokens", "api_sessions", "modes"}


@pytest.fixture(scope="module", params=ENGINES)
def fresh_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database emptied of medic's schema, once per engine for the whole module."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('tokens') / 'medic.db'}"
    url = os.environ[request.param]
    _drop_everything(url)
    return url


@pytest.fixture
def db_url(fresh_url: str) -> str:
    """The module's database at the head revision with empty auth tables."""
    engine = sa.create_engine(fresh_url)
    try:
        upgrade_schema(engine)
        with engine.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                if table.name in AUTH_TABLES:
                    conn.execute(table.delete())
    finally:
        engine.dispose()
    return fresh_url


@pytest.fixture
def store(db_url: str) -> Iterator[SqlStore]:
    opened = create_store(db_url)
    yield opened
    opened.close()


def _token(name: str = "alice", role: Role = Role.OPERATOR, **kw: Any) -> Token:
    fields: dict[str, Any] = {
        "name": name,
        "role": role,
        "secret_hash": hash_secret(new_secret()),
        "created_at": T0,
        "created_by": "cli:root",
    }
    return Token(**{**fields, **kw})


def _session(token: str = "alice", seconds: float = 0, **kw: Any) -> Session:
    fields: dict[str, Any] = {
        "id_hash": hash_secret(new_secret()),
        "token_name": token,
        "csrf_token": new_secret(),
        "created_at": T0 + timedelta(seconds=seconds),
        "expires_at": T0 + timedelta(seconds=seconds, hours=12),
    }
    return Session(**{**fields, **kw})


# --- tokens --------------------------------------------------------------------------------
def test_is_a_token_store_and_a_mode_store(store: SqlStore) -> None:
    tokens: TokenStore = store  # mypy checks SqlStore against the protocols here
    modes: ModeStore = store
    assert tokens is modes is store
    assert isinstance(store, TokenStore) and isinstance(store, ModeStore)


def test_tokens_round_trip_and_are_found_by_their_hash(store: SqlStore) -> None:
    alice, agent = _token(), _token("agent:gpu-node-017", Role.DETECTOR)
    store.create_token(alice)
    store.create_token(agent)

    assert store.get_token("alice") == alice
    assert store.find_token(agent.secret_hash) == agent
    assert store.find_token(hash_secret("medic_unknown")) is None
    assert store.get_token("Alice") is None, "names are case-sensitive"
    assert store.list_tokens() == [agent, alice]
    stored = store.get_token("alice")
    assert stored is not None and stored.created_at == T0 and stored.created_at.tzinfo is not None


def test_an_active_name_is_taken_and_a_revoked_one_is_free(store: SqlStore) -> None:
    first = _token()
    store.create_token(first)
    with pytest.raises(ConflictError):
        store.create_token(_token(role=Role.ADMIN))
    store.create_session(_session())

    revoked = store.revoke_token("alice", T0 + timedelta(seconds=5))
    assert revoked == replace(first, revoked_at=T0 + timedelta(seconds=5)) and not revoked.active
    assert store.revoke_token("alice", T0 + timedelta(seconds=9)) == revoked, "revoked once"
    assert store.find_token(first.secret_hash) == revoked, "still found, to say it was revoked"

    second = _token(role=Role.VIEWER, created_at=T0 + timedelta(seconds=10))
    store.create_token(second)
    assert store.get_token("alice") == second
    assert store.find_token(first.secret_hash) is None, "the old secret is gone"
    with pytest.raises(NotFoundError):
        store.revoke_token("nobody", T0)


def test_two_tokens_never_share_a_secret(store: SqlStore) -> None:
    store.create_token(_token("a", secret_hash="0" * 64))
    with pytest.raises(StoreError):
        store.create_token(_token("b", secret_hash="0" * 64))
    assert [t.name for t in store.list_tokens()] == ["a"]


def test_racing_creates_of_one_name_make_one_token(store: SqlStore, db_url: str) -> None:
    other = create_store(db_url)
    try:
        for round_ in range(4):
            name = f"race-{round_}"

            def create(s: SqlStore, role: Role, name: str = name) -> str:
                try:
                    s.create_token(_token(name, role))
                    return "created"
                except ConflictError:
                    return "conflict"

            results = _race(lambda: create(store, Role.VIEWER), lambda: create(other, Role.ADMIN))
            assert sorted(results) == ["conflict", "created"], results
            assert store.get_token(name) is not None
    finally:
        other.close()


# --- sessions ------------------------------------------------------------------------------
def test_sessions_round_trip_and_end(store: SqlStore) -> None:
    store.create_token(_token())
    store.create_token(_token("bob"))
    mine, other, old = _session(), _session("bob"), _session(seconds=-13 * 3600)
    for session in (mine, other, old):
        store.create_session(session)

    assert store.get_session(mine.id_hash) == mine
    assert store.get_session(hash_secret("unknown")) is None
    assert store.purge_sessions(T0) == 1, "only the one that ended before now"
    assert store.get_session(old.id_hash) is None and store.get_session(mine.id_hash) == mine

    assert store.delete_session(mine.id_hash) is True
    assert store.delete_session(mine.id_hash) is False
    assert store.get_session(mine.id_hash) is None

    store.revoke_token("bob", T0)
    assert store.get_session(other.id_hash) is None, "revoking a token ends its sessions"


# --- modes ---------------------------------------------------------------------------------
def test_modes_replace_per_cluster_and_return_the_old_ones(store: SqlStore) -> None:
    assert store.get_modes(C) == ClusterModes(C)

    first = ClusterModes(C, Mode.ACT, {"p1": Mode.OBSERVE, "gpu-h100": Mode.ACT})
    assert store.put_modes(first, T0, "user:alice") == ClusterModes(C)
    assert store.get_modes(C) == first
    assert store.get_modes(B) == ClusterModes(B), "modes are per cluster"

    second = ClusterModes(C, None, {"p0": Mode.OBSERVE})
    assert store.put_modes(second, T0, "user:bob") == first
    assert store.get_modes(C) == second
    assert store.put_modes(ClusterModes(C), T0, "user:bob") == second
    assert store.get_modes(C) == ClusterModes(C)


def test_racing_mode_switches_leave_one_of_them(store: SqlStore, db_url: str) -> None:
    other = create_store(db_url)
    a = ClusterModes(C, Mode.ACT, {f"p{i}": Mode.OBSERVE for i in range(5)})
    b = ClusterModes(C, Mode.OBSERVE, {f"p{i}": Mode.ACT for i in range(3, 8)})
    try:
        for _ in range(4):
            _race(lambda: store.put_modes(a, T0, "a"), lambda: other.put_modes(b, T0, "b"))
            assert store.get_modes(C) in (a, b)
    finally:
        other.close()


# --- migration -----------------------------------------------------------------------------
def test_upgrade_from_0002_keeps_data_and_downgrade_removes_the_auth_tables(
    fresh_url: str, tmp_path: Path
) -> None:
    if fresh_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        db_url = fresh_url
        _drop_everything(db_url)  # the next test's db_url fixture migrates it back to head
    engine = sa.create_engine(db_url)
    try:
        upgrade_schema(engine, "0002")
        assert not AUTH_TABLES & set(sa.inspect(engine).get_table_names())
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO cursors (source, value) VALUES ('s', 'v')"))
        upgraded = create_store(db_url)  # migrates 0002 -> head
        try:
            assert upgraded.get_cursor("s") == "v"
            upgraded.create_token(_token())
            upgraded.put_modes(ClusterModes(C, Mode.ACT), T0, "user:alice")
        finally:
            upgraded.close()
        engine.dispose()
        assert set(sa.inspect(engine).get_table_names()) >= AUTH_TABLES

        config = migrations_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0002")
        engine.dispose()
        names = set(sa.inspect(engine).get_table_names())
        assert not AUTH_TABLES & names and {"cursors", "repairs"} <= names
    finally:
        engine.dispose()
