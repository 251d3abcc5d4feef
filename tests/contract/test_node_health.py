"""The node-health read model (``node_health``, revision 0007) on every engine: the repair engine
writes it, the API, CLI and console read it (issue 11 defect 3: health was computed in three
places that disagreed)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from contract.test_store import T0, _drop_everything
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import NodeHealth, NodeHealthEntry
from medic.store import SqlStore, create_store
from medic.store.engine import migrations_config, upgrade_schema

pytestmark = pytest.mark.db

C, B = ClusterName("alpha"), ClusterName("beta")
N1, N2, N3 = NodeName("n1"), NodeName("n2"), NodeName("n3")
H = NodeHealth


def test_the_stored_health_is_what_was_put_and_keeps_its_since(store: SqlStore) -> None:
    assert store.list_node_health(C) == []
    store.put_node_health(C, {N1: H.DEGRADED, N2: H.UNDER_REPAIR, N3: H.HEALTHY}, T0)
    store.put_node_health(B, {N1: H.OUT_OF_SERVICE}, T0)
    assert store.list_node_health(C) == [
        NodeHealthEntry(C, N1, H.DEGRADED, T0),
        NodeHealthEntry(C, N2, H.UNDER_REPAIR, T0),
    ]

    later = T0 + timedelta(minutes=5)
    store.put_node_health(C, {N1: H.DEGRADED, N3: H.OUT_OF_SERVICE}, later)
    assert store.list_node_health(C) == [
        NodeHealthEntry(C, N1, H.DEGRADED, T0),  # unchanged: since kept
        NodeHealthEntry(C, N3, H.OUT_OF_SERVICE, later),
    ]
    store.put_node_health(C, {N1: H.UNDER_REPAIR}, later)
    assert store.list_node_health(C) == [NodeHealthEntry(C, N1, H.UNDER_REPAIR, later)]
    store.put_node_health(C, {}, later)
    assert store.list_node_health(C) == []
    assert [e.cluster for e in store.list_node_health()] == [B]  # the other cluster's untouched


def test_upgrade_from_0006_and_back(url: str, tmp_path: Path) -> None:
    own = f"sqlite:///{tmp_path / 'old.db'}" if url.startswith("sqlite") else url
    if own == url:
        _drop_everything(url)  # the module's store is done with it by now (tests run in order)
    engine = sa.create_engine(own)
    try:
        upgrade_schema(engine, "0006")
        assert "node_health" not in sa.inspect(engine).get_table_names()
        upgraded = create_store(own)  # 0006 -> head
        try:
            upgraded.put_node_health(C, {N1: H.DEGRADED}, T0)
            assert upgraded.list_node_health(C) == [NodeHealthEntry(C, N1, H.DEGRADED, T0)]
        finally:
            upgraded.close()
        config = migrations_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0006")
        engine.dispose()
        assert "node_health" not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
        if own == url:
            _drop_everything(url)
