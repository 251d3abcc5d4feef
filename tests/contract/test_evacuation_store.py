"""Revision 0008 on every engine: who owns a job's advice (``advice.repair_id``: a node repair
moving the job off its node, or job recovery) and a repair's checkpoint baseline
(``repairs.checkpoint_baseline``), both durable so a restarted engine decides the same."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from contract.test_repair_store import _request as _repair_request
from contract.test_store import T0, _drop_everything
from contract.test_store import _request as _advice_request
from medic.domain.ids import JobId
from medic.domain.repairs import RepairState
from medic.errors import ConflictError, NotFoundError
from medic.store import SqlStore, create_store
from medic.store.engine import migrations_config, upgrade_schema

pytestmark = pytest.mark.db

S = RepairState


def test_the_owner_of_advice_is_stored_and_a_new_owner_is_a_new_generation(
    store: SqlStore,
) -> None:
    ours = store.publish_advice(_advice_request("e1"), T0)
    assert ours.repair_id is None and ours.generation == 1  # job recovery's own
    # the same decision by a repair: a new generation, owned by the repair
    moved = store.publish_advice(_advice_request("e1", repair_id=12), T0 + timedelta(seconds=1))
    assert (moved.id, moved.generation, moved.repair_id) == (ours.id, 2, 12)
    assert store.get_advice(moved.id) == moved
    assert store.advice_for_job(ours.cluster, JobId("e1")) == moved
    assert store.list_advice(active_only=True)[-1] == moved
    # published again by the repair: nothing new
    again = store.publish_advice(_advice_request("e1", repair_id=12), T0 + timedelta(seconds=2))
    assert again == moved
    # another repair, then job recovery again: each a new decision
    other = store.publish_advice(_advice_request("e1", repair_id=13), T0 + timedelta(seconds=3))
    back = store.publish_advice(_advice_request("e1"), T0 + timedelta(seconds=4))
    assert (other.generation, other.repair_id) == (3, 13)
    assert (back.generation, back.repair_id) == (4, None)


def test_a_checkpoint_baseline_grows_and_keeps_each_jobs_first_step(store: SqlStore) -> None:
    repair, _ = store.create_repair(_repair_request("b1"), state=S.APPROVED, now=T0)
    assert repair.checkpoint_baseline == {}
    store.transition_repair(repair.id, S.APPROVED, S.CORDONED, T0)
    waiting = store.transition_repair(repair.id, S.CORDONED, S.WAITING_FOR_IDLE, T0)

    noted = store.note_checkpoint_baseline(repair.id, S.WAITING_FOR_IDLE, {"7/0": 120, "8/1": None})
    assert noted.checkpoint_baseline == {"7/0": 120, "8/1": None}
    assert noted.updated_at == waiting.updated_at, "not a state change"
    # a later step for a job already noted does not replace its first; a new job is added
    later = store.note_checkpoint_baseline(repair.id, S.WAITING_FOR_IDLE, {"7/0": 140, "9/0": 5})
    assert later.checkpoint_baseline == {"7/0": 120, "8/1": None, "9/0": 5}
    assert store.get_repair(repair.id) == later
    # the next attempt of a job is a new key
    store.note_checkpoint_baseline(repair.id, S.WAITING_FOR_IDLE, {"7/1": None})
    kept = store.get_repair(repair.id)
    assert kept is not None and kept.checkpoint_baseline["7/1"] is None
    assert kept.checkpoint_baseline["7/0"] == 120

    drained = store.transition_repair(repair.id, S.WAITING_FOR_IDLE, S.DRAINING, T0)
    assert drained.checkpoint_baseline == kept.checkpoint_baseline  # stays on the repair
    with pytest.raises(ConflictError):
        store.note_checkpoint_baseline(repair.id, S.WAITING_FOR_IDLE, {"10/0": 1})
    with pytest.raises(NotFoundError):
        store.note_checkpoint_baseline(repair.id + 1000, S.WAITING_FOR_IDLE, {"10/0": 1})


def test_upgrade_from_0007_and_back(url: str, tmp_path: Path) -> None:
    own = f"sqlite:///{tmp_path / 'old.db'}" if url.startswith("sqlite") else url
    if own == url:
        _drop_everything(url)  # the module's store is done with it by now (tests run in order)
    engine = sa.create_engine(own)
    try:
        upgrade_schema(engine, "0007")
        with engine.begin() as conn:  # a row written before the revision
            conn.execute(
                sa.text(
                    "INSERT INTO advice (cluster, job_id, generation, observed_generation, status,"
                    " attempt, action, exclude_nodes, reason, mode, rule, created_at, updated_at)"
                    " VALUES ('alpha', '7', 1, 0, 'pending', 0, 'requeue', '[\"n2\"]', 'old',"
                    " 'act', 'node-fault-requeue', :t, :t)"
                ),
                {"t": T0.replace(tzinfo=None)},
            )
        upgraded = create_store(own)  # 0007 -> head
        try:
            (old,) = upgraded.list_advice()
            assert old.repair_id is None, "job recovery's"
            repair, _ = upgraded.create_repair(_repair_request("u1"), state=S.APPROVED, now=T0)
            assert repair.checkpoint_baseline == {}
            moved = upgraded.publish_advice(_advice_request("7", repair_id=repair.id), T0)
            assert (moved.generation, moved.repair_id) == (2, repair.id)
        finally:
            upgraded.close()
        config = migrations_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0007")
        engine.dispose()
        inspector = sa.inspect(engine)
        assert "repair_id" not in {c["name"] for c in inspector.get_columns("advice")}
        assert "checkpoint_baseline" not in {c["name"] for c in inspector.get_columns("repairs")}
    finally:
        engine.dispose()
        if own == url:
            _drop_everything(url)
