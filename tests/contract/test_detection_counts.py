"""Repeated evidence is counted, not stored once per line, on every engine: identical detections
(same job, attempt, signature, node, rank and fields) share one row, within a write and across
writes; the first line stays as the evidence. Same engines as ``test_store.py``; the schema is
migrated once per engine for this module (the migration test runs on a database of its own)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from contract.test_store import T0, _detection, _drop_everything
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.store import SqlStore, create_store
from medic.store.columns import UtcDateTime
from medic.store.engine import migrations_config, upgrade_schema
from medic.store.tables import detections

pytestmark = pytest.mark.db

LINES = 10_000


def _rows(url: str, cluster: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.select(sa.func.count()).where(detections.c.cluster == cluster)
            return int(conn.execute(query.select_from(detections)).scalar_one())
    finally:
        engine.dispose()


def test_identical_lines_in_one_write_are_one_counted_row(store: SqlStore, url: str) -> None:
    c = ClusterName("counts-one")
    same = [_detection(n, text=f"line {n}") for n in range(LINES)]
    store.add_detections(c, [*same, _detection(LINES, rank=4)])

    first, other = store.list_detections(c, JobId("7"))
    assert (first.count, first.text, first.seq, first.time) == (LINES, "line 0", 0, same[0].time)
    assert first.last_seen == same[-1].time
    assert (other.rank, other.count) == (4, 1)
    assert _rows(url, c) == 2, f"{LINES + 1} detections"


def test_a_repeat_in_a_later_write_adds_to_the_row(store: SqlStore, url: str) -> None:
    c = ClusterName("counts-later")
    first = _detection(1)
    store.add_detections(c, [first])
    later = T0 + timedelta(minutes=5)
    store.add_detections(c, [_detection(2, time=later), _detection(3, time=later)])
    kernel = _detection(4, job_id=None, rank=None, fields={})
    store.add_detections(c, [kernel, kernel, kernel])
    store.add_detections(c, [kernel])

    [row] = store.list_detections(c, JobId("7"))
    assert (row.count, row.seq, row.time, row.last_seen) == (3, 1, first.time, later)
    assert _rows(url, c) == 2, "one job row, one kernel row (counted 4 times)"


def test_detections_that_differ_are_kept_apart(store: SqlStore) -> None:
    c = ClusterName("counts-apart")
    found = [
        _detection(1),
        _detection(2, attempt=1),
        _detection(3, rank=5),
        _detection(4, node=NodeName("n9")),
        _detection(5, fields={"xid": "79", "pci": "0000:3c:00"}),  # another GPU
        _detection(6, signature_id="nccl.watchdog_timeout"),
        _detection(7, job_id=JobId("8")),
    ]
    store.add_detections(c, found)
    listed = [*store.list_detections(c, JobId("7")), *store.list_detections(c, JobId("8"))]
    assert [d.seq for d in listed] == [1, 2, 3, 4, 5, 6, 7]
    assert {d.count for d in listed} == {1}


def test_upgrade_from_0005_counts_old_rows_once(url: str, tmp_path: Path) -> None:
    own = f"sqlite:///{tmp_path / 'old.db'}" if url.startswith("sqlite") else url
    if own == url:
        _drop_everything(url)  # the module's store is done with it by now (tests run in order)
    engine = sa.create_engine(own)
    try:
        upgrade_schema(engine, "0005")
        old = _detection(1)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO detections (cluster, job_id, attempt, signature_id, domain, role,"
                    " severity, action, time, node, rank, implicates_node, text, fields, seq)"
                    " VALUES ('old', '7', 0, 'xid-79', 'hardware', 'root', 'critical', 'restart',"
                    " :time, 'n2', 3, :true, 'old line', :fields, 1)"
                ).bindparams(sa.bindparam("time", type_=UtcDateTime())),
                {"time": T0, "true": True, "fields": '{"xid":"79"}'},
            )
        upgraded = create_store(own)  # 0005 -> head
        try:
            [row] = upgraded.list_detections(ClusterName("old"), JobId("7"))
            assert (row.count, row.last_seen, row.text) == (1, row.time, "old line")
            upgraded.add_detections(ClusterName("old"), [old, old])
            counts = [d.count for d in upgraded.list_detections(ClusterName("old"), JobId("7"))]
            assert counts == [1, 2], "an old row has no key: new ones never merge into it"
        finally:
            upgraded.close()
        config = migrations_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0005")
        engine.dispose()
        columns = {c["name"] for c in sa.inspect(engine).get_columns("detections")}
        assert not {"count", "last_seen", "dedupe_key"} & columns and "seq" in columns
    finally:
        engine.dispose()
        if own == url:
            _drop_everything(url)
