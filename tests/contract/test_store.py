"""Contract tests of ``medic.ports.Store`` on ``SqlStore``, run on every database engine.

SQLite always runs (a file under ``tmp_path``); PostgreSQL and MariaDB/MySQL run when
``MEDIC_TEST_POSTGRES_URL`` / ``MEDIC_TEST_MYSQL_URL`` name a disposable database: every test
drops medic's tables, triggers and ``alembic_version`` there first, then migrates from scratch.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any, cast

import platformdirs
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.advice import AdviceAction, AdviceRequest, Reconciliation
from medic.domain.attempts import Progress
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job, JobState, Mode, Node, NodeState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName, SignatureId
from medic.errors import ConflictError, InputError, NotFoundError, StoreError
from medic.ports import Store
from medic.store import SqlStore, create_store, default_database_url
from medic.store.tables import MEDIC_TABLES, metadata

pytestmark = pytest.mark.db

C = ClusterName("alpha")
T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
ENGINES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "MEDIC_TEST_POSTGRES_URL",
        id="postgresql",
        marks=pytest.mark.skipif(
            not os.environ.get("MEDIC_TEST_POSTGRES_URL"), reason="MEDIC_TEST_POSTGRES_URL unset"
        ),
    ),
    pytest.param(
        "MEDIC_TEST_MYSQL_URL",
        id="mysql",
        marks=pytest.mark.skipif(
            not os.environ.get("MEDIC_TEST_MYSQL_URL"), reason="MEDIC_TEST_MYSQL_URL unset"
        ),
    ),
]


def _drop_everything(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            # Reverse dependency order; a table's triggers go with it.
            for name in (*reversed(MEDIC_TABLES), "alembic_version"):
                sa.Table(name, sa.MetaData()).drop(conn, checkfirst=True)
            if engine.dialect.name == "postgresql":
                conn.exec_driver_sql("DROP FUNCTION IF EXISTS medic_audit_append_only()")
    finally:
        engine.dispose()


@pytest.fixture(params=ENGINES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'medic.db'}"
    url = os.environ[request.param]
    _drop_everything(url)
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[SqlStore]:
    opened = create_store(db_url)
    yield opened
    opened.close()


@pytest.fixture
def raw(db_url: str, store: SqlStore) -> Iterator[sa.Engine]:
    """A plain engine on the same database, to look behind the store's back."""
    engine = sa.create_engine(db_url)
    yield engine
    engine.dispose()


def _node(name: str, state: NodeState = NodeState.IDLE, **kw: Any) -> Node:
    return Node(NodeName(name), state, partitions=("gpu",), gpus=8, **kw)


def _job(job_id: str, state: JobState = JobState.RUNNING, **kw: Any) -> Job:
    return Job(JobId(job_id), C, f"train-{job_id}", state, "gpu", **kw)


def _request(job_id: str = "7", **kw: Any) -> AdviceRequest:
    fields: dict[str, Any] = {
        "cluster": C,
        "job_id": JobId(job_id),
        "attempt": 0,
        "action": AdviceAction.REQUEUE,
        "exclude_nodes": frozenset({NodeName("n2")}),
        "reason": "xid 79 on n2",
        "mode": Mode.ACT,
        "rule": "node-fault-requeue",
    }
    return AdviceRequest(**{**fields, **kw})


def _event(n: int, **kw: Any) -> AuditEvent:
    fields: dict[str, Any] = {
        "time": T0 + timedelta(seconds=n),
        "actor": "medic",
        "kind": AuditKind.DETECTION,
        "subject_type": SubjectType.JOB,
        "subject_id": "7",
        "cluster": C,
    }
    return AuditEvent(**{**fields, **kw})


def _detection(seq: int, **kw: Any) -> Detection:
    fields: dict[str, Any] = {
        "job_id": JobId("7"),
        "attempt": 0,
        "signature_id": SignatureId("xid-79"),
        "domain": FaultDomain.HARDWARE,
        "role": Role.ROOT,
        "severity": Severity.CRITICAL,
        "action": JobAction.RESTART,
        "time": T0 + timedelta(microseconds=seq),
        "node": NodeName("n2"),
        "rank": 3,
        "implicates_node": True,
        "text": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus ✗",
        "fields": {"xid": "79", "pci": "0000:3b:00"},
        "seq": seq,
    }
    return Detection(**{**fields, **kw})


def _race(first: Callable[[], Any], second: Callable[[], Any]) -> list[Any]:
    """Run both callables in two threads released together; their results in order."""
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]
    errors: list[BaseException] = []

    def run(index: int, work: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[index] = work()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


# --- inventory -----------------------------------------------------------------------------
def test_is_a_store(store: SqlStore) -> None:
    assert isinstance(store, SqlStore)
    typed: Store = store  # mypy checks SqlStore against the protocol here
    assert typed is store


def test_nodes_and_jobs_round_trip(store: SqlStore) -> None:
    store.ensure_cluster(C, "sim")
    nodes = [_node("n1"), _node("n2", NodeState.DRAINED, reason="medic: xid 79"), _node("n10")]
    store.sync_nodes(C, nodes, T0)
    job = _job(
        "100",
        nodes=(NodeName("n1"), NodeName("n10")),
        excluded_nodes=frozenset({NodeName("n2")}),
        restart_count=2,
        held=True,
        num_nodes=2,
        submit_time=T0,
        start_time=T0 + timedelta(microseconds=1),
        comment='{"medic": {"mode": "act"}}',
        log_paths=("/logs/100.out",),
        options={"mode": "act", "nested": {"max_restarts": 3, "tags": ["a", "b"]}},
    )
    store.sync_jobs(C, [job, _job("99", JobState.PENDING)], T0)

    assert store.list_nodes(C) == sorted(nodes, key=lambda n: n.name)
    assert store.list_nodes(ClusterName("other")) == []
    assert [j.id for j in store.list_jobs()] == ["99", "100"]
    loaded = store.get_job(C, JobId("100"))
    assert loaded == job
    assert loaded is not None and loaded.options == job.options  # options are not part of ==
    assert store.get_job(C, JobId("404")) is None


def test_clusters_are_listed_with_their_scheduler(store: SqlStore) -> None:
    assert store.list_clusters() == {}
    store.ensure_cluster(C, "slurm")
    store.sync_nodes(ClusterName("b"), [_node("n1")], T0)  # known from its nodes only
    assert store.list_clusters() == {ClusterName("b"): None, C: "slurm"}
    store.ensure_cluster(ClusterName("b"), "sim")
    assert store.list_clusters()[ClusterName("b")] == "sim"


def test_sync_writes_only_changed_rows(store: SqlStore, raw: sa.Engine) -> None:
    nodes = [_node(f"n{i}") for i in range(50)]
    store.sync_nodes(C, nodes, T0)  # no ensure_cluster first: the sync creates the cluster row
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sa.event.listen(sa.Engine, "before_cursor_execute", count)
    try:
        store.sync_nodes(C, nodes, T0 + timedelta(seconds=1))
        store.sync_jobs(C, [], T0)
        assert statements == []  # nothing changed: no database round trip at all
        nodes[7] = _node("n7", NodeState.DOWN, reason="not responding")
        store.sync_nodes(C, nodes, T0 + timedelta(seconds=2))
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", count)
    assert statements
    with raw.connect() as conn:
        stamps: dict[str, object] = {
            row[0]: row[1] for row in conn.execute(sa.text("SELECT name, updated_at FROM nodes"))
        }
    changed = {name for name, stamp in stamps.items() if stamp != stamps["n0"]}
    assert changed == {"n7"}
    assert {n.name: n for n in store.list_nodes(C)}[NodeName("n7")] == nodes[7]


def test_sync_survives_rows_removed_behind_its_back(store: SqlStore, raw: sa.Engine) -> None:
    store.sync_nodes(C, [_node("n1"), _node("n2")], T0)
    store.sync_jobs(C, [_job("1")], T0)
    with raw.begin() as conn:
        conn.execute(sa.text("DELETE FROM nodes"))
        conn.execute(sa.text("DELETE FROM jobs"))
    # Changed values are written with an upsert, so missing rows come back.
    store.sync_nodes(C, [_node("n1", NodeState.MIXED), _node("n2")], T0)
    store.sync_jobs(C, [_job("1", JobState.COMPLETED)], T0)
    assert [n.name for n in store.list_nodes(C)] == ["n1"]
    assert [(j.id, j.state) for j in store.list_jobs(C)] == [("1", JobState.COMPLETED)]


def test_sync_jobs_opens_and_closes_attempts(store: SqlStore) -> None:
    jid, n1, n2, n3 = JobId("5"), NodeName("n1"), NodeName("n2"), NodeName("n3")
    store.sync_jobs(C, [_job("5", JobState.PENDING)], T0)
    assert store.list_attempts(C, jid) == []

    started = T0 + timedelta(seconds=10)
    store.sync_jobs(C, [_job("5", nodes=(n1, n2), start_time=started)], started)
    store.sync_jobs(C, [_job("5", nodes=(n1, n2), start_time=started, held=True)], T0)
    (first,) = store.list_attempts(C, jid)
    assert (first.number, first.nodes, first.state) == (0, (n1, n2), JobState.RUNNING)
    assert (first.started_at, first.ended_at) == (started, None)

    requeued = T0 + timedelta(seconds=20)
    store.sync_jobs(C, [_job("5", JobState.PENDING, restart_count=1)], requeued)
    (first,) = store.list_attempts(C, jid)
    assert first.ended_at == requeued  # the requeue ended attempt 0
    assert first.state is JobState.REQUEUED  # last seen running: the requeue ended it

    restarted, ended = T0 + timedelta(seconds=30), T0 + timedelta(seconds=40)
    running = _job("5", nodes=(n1, n3), restart_count=1, start_time=restarted)
    store.sync_jobs(C, [running], restarted)
    store.sync_jobs(C, [replace(running, state=JobState.FAILED, end_time=ended)], ended)
    store.sync_jobs(C, [], ended + timedelta(seconds=1))  # absent jobs are left alone
    first, second = store.list_attempts(C, jid)
    assert first.ended_at == requeued
    assert (second.number, second.nodes, second.state) == (1, (n1, n3), JobState.FAILED)
    assert (second.started_at, second.ended_at) == (restarted, ended)
    assert store.get_job(C, jid) is not None


def test_several_jobs_requeued_in_one_sync(store: SqlStore) -> None:
    ids = ("21", "22", "23")
    store.sync_jobs(C, [_job(i, nodes=(NodeName("n1"),), start_time=T0) for i in ids], T0)
    store.sync_jobs(C, [_job(ids[0], JobState.FAILED, end_time=T0)], T0)
    later = T0 + timedelta(seconds=5)
    store.sync_jobs(C, [_job(i, JobState.PENDING, restart_count=1) for i in ids], later)
    states = [store.list_attempts(C, JobId(i))[0].state for i in ids]
    assert states == [JobState.FAILED, JobState.REQUEUED, JobState.REQUEUED]


def test_job_ending_without_nodes_closes_only_existing_attempts(store: SqlStore) -> None:
    store.sync_jobs(C, [_job("8", JobState.CANCELLED)], T0)  # cancelled while queued
    assert store.list_attempts(C, JobId("8")) == []
    ended = T0 + timedelta(seconds=3)
    store.sync_jobs(C, [_job("9", nodes=(NodeName("n1"),), start_time=T0)], T0)
    store.sync_jobs(C, [_job("9", JobState.NODE_FAIL, end_time=ended)], ended)
    (attempt,) = store.list_attempts(C, JobId("9"))
    assert (attempt.state, attempt.nodes, attempt.ended_at) == (JobState.NODE_FAIL, ("n1",), ended)


def test_update_progress_creates_and_replaces(store: SqlStore) -> None:
    jid = JobId("9")
    store.update_progress(C, jid, 1, Progress(first_step=5, last_step=9))
    progress = Progress(
        first_step=11,
        last_step=250,
        last_checkpoint_step=200,
        loaded_checkpoint_step=10,
        last_progress_at=T0,
    )
    store.update_progress(C, jid, 1, progress)
    store.sync_jobs(C, [_job("9", nodes=(NodeName("n1"),), restart_count=1, start_time=T0)], T0)
    (attempt,) = store.list_attempts(C, jid)
    assert (attempt.number, attempt.progress, attempt.nodes) == (1, progress, ("n1",))
    store.update_progress(C, jid, 1, Progress())
    assert store.list_attempts(C, jid)[0].progress == Progress()


def test_list_attempts_between_finds_the_attempts_that_overlap_a_window(store: SqlStore) -> None:
    n1, other = NodeName("n1"), ClusterName("beta")

    def run(job: str, start: int, end: int | None, cluster: ClusterName = C) -> None:
        started = T0 + timedelta(seconds=start)
        running = replace(_job(job, nodes=(n1,), start_time=started), cluster=cluster)
        store.sync_jobs(cluster, [running], started)
        if end is not None:
            ended = T0 + timedelta(seconds=end)
            store.sync_jobs(
                cluster, [replace(running, state=JobState.FAILED, end_time=ended)], ended
            )

    run("before", 0, 50)  # ended before the window
    run("into", 0, 100)  # ends exactly at the window's start: still ran at that instant
    run("inside", 120, 150)
    run("open", 10, None)  # still running
    run("after", 200, 260)  # starts at the window's end: not in [start, end)
    run("elsewhere", 120, None, other)
    store.update_progress(C, JobId("unplaced"), 0, Progress(last_step=3, last_progress_at=T0))

    start, end = T0 + timedelta(seconds=100), T0 + timedelta(seconds=200)
    found = store.list_attempts_between(C, start, end)
    assert [(a.job_id, a.number) for a in found] == [("inside", 0), ("into", 0), ("open", 0)]
    assert found[0].started_at == T0 + timedelta(seconds=120)
    assert found[0].ended_at == T0 + timedelta(seconds=150)
    assert found[0].nodes == (n1,)
    everywhere = store.list_attempts_between(None, start, end)
    assert [(a.cluster, a.job_id) for a in everywhere] == [
        (C, "inside"),
        (C, "into"),
        (C, "open"),
        (other, "elsewhere"),
    ]


# --- diagnosis -----------------------------------------------------------------------------
def test_detections_and_verdicts_round_trip(store: SqlStore) -> None:
    kernel = _detection(3, job_id=None, rank=None, node=NodeName("n4"), fields={})
    found = [_detection(1), _detection(2, attempt=1, implicates_node=False), kernel]
    store.add_detections(C, found)
    store.add_detections(C, [])
    assert store.list_detections(C, JobId("7")) == found[:2]
    assert store.list_detections(C, JobId("7"))[0].fields == found[0].fields
    assert store.list_detections(C, JobId("7"), attempt=1) == [found[1]]

    verdict = Verdict(
        job_id=JobId("7"),
        attempt=0,
        domain=FaultDomain.HARDWARE,
        action=JobAction.RESTART,
        implicated_nodes=frozenset({NodeName("n2")}),
        confidence=0.87654321,
        root_signature=SignatureId("xid-79"),
        summary="GPU fell off the bus on n2",
        evidence=tuple(found[:2]),
        time=T0,
    )
    first = store.add_verdict(C, verdict)
    second = store.add_verdict(C, replace(verdict, root_signature=None, evidence=(), time=None))
    assert second > first
    loaded = store.list_verdicts(C, JobId("7"))
    assert loaded == [verdict, replace(verdict, root_signature=None, evidence=(), time=None)]
    assert loaded[0].evidence[0].fields == found[0].fields


# --- advice --------------------------------------------------------------------------------
def test_advice_generations_and_reconciliation(store: SqlStore) -> None:
    first = store.publish_advice(_request(), T0)
    assert (first.generation, first.observed_generation, first.status) == (
        1,
        0,
        Reconciliation.PENDING,
    )
    assert first.is_active and store.get_advice(first.id) == first
    # Same decision, other wording: stored advice unchanged.
    again = store.publish_advice(_request(reason="reworded"), T0 + timedelta(seconds=1))
    assert again == first

    converged = store.report_reconciliation(first.id, 1, Reconciliation.CONVERGED, "ok", T0)
    assert (converged.status, converged.observed_generation) == (Reconciliation.CONVERGED, 1)
    assert store.report_reconciliation(first.id, 1, Reconciliation.CONVERGED, "ok", T0) == converged
    assert store.list_advice(active_only=True) == []

    later = T0 + timedelta(seconds=5)
    newer = store.publish_advice(_request(exclude_nodes=frozenset({"n2", "n3"})), later)
    assert (newer.id, newer.generation, newer.observed_generation) == (first.id, 2, 1)
    assert (newer.status, newer.created_at, newer.updated_at) == (
        Reconciliation.PENDING,
        T0,
        later,
    )
    assert store.advice_for_job(C, JobId("7")) == newer
    assert store.list_advice(cluster=C, active_only=True) == [newer]

    with pytest.raises(ConflictError):
        store.report_reconciliation(first.id, 1, Reconciliation.ABANDONED, "late", later)
    for never in (0, 3):
        with pytest.raises(InputError):
            store.report_reconciliation(first.id, never, Reconciliation.CONVERGED, "?", later)
    with pytest.raises(NotFoundError):
        store.report_reconciliation(AdviceId(first.id + 1000), 1, Reconciliation.CONVERGED, "", T0)
    assert store.advice_for_job(C, JobId("7")) == newer  # failed reports changed nothing
    assert store.get_advice(AdviceId(first.id + 1000)) is None


def test_advice_list_and_inactive_kinds(store: SqlStore) -> None:
    none = store.publish_advice(_request("1", action=AdviceAction.NONE), T0)
    stop = store.publish_advice(_request("2", action=AdviceAction.STOP), T0)
    other = store.publish_advice(replace(_request("3"), cluster=ClusterName("beta")), T0)
    assert store.list_advice() == [none, stop, other]
    assert store.list_advice(cluster=C, active_only=True) == [stop]
    abandoned = store.report_reconciliation(stop.id, 1, Reconciliation.ABANDONED, "gone", T0)
    assert not abandoned.is_active
    assert store.list_advice(active_only=True) == [other]


# --- scheduler actions ---------------------------------------------------------------------
def test_actions_are_idempotent(store: SqlStore) -> None:
    record = ActionRecord(
        key="advice/1/g1/requeue_hold",
        cluster=C,
        kind=ActionKind.REQUEUE_HOLD,
        status=ActionStatus.STARTED,
        job_id=JobId("7"),
        node=None,
        advice_id=AdviceId(1),
        started_at=T0,
    )
    drain = replace(
        record, key="drain/n2", kind=ActionKind.DRAIN_NODE, job_id=None, node=NodeName("n2")
    )
    assert store.begin_action(record) is True
    assert store.begin_action(replace(record, status=ActionStatus.FAILED)) is False
    assert store.begin_action(drain) is True
    assert store.get_action(record.key) == record
    done = T0 + timedelta(seconds=2)
    store.finish_action(record.key, ActionStatus.FAILED, done, "slurm said no")
    failed = replace(record, status=ActionStatus.FAILED, finished_at=done, error="slurm said no")
    assert store.get_action(record.key) == failed
    store.finish_action(record.key, ActionStatus.FAILED, done, "slurm said no")  # same twice
    assert store.list_actions() == [failed, drain]
    assert store.list_actions(C, JobId("7")) == [failed]
    assert store.list_actions(ClusterName("beta")) == []
    assert store.get_action("nope") is None
    with pytest.raises(NotFoundError):
        store.finish_action("nope", ActionStatus.SUCCEEDED, done)


# --- audit ---------------------------------------------------------------------------------
def test_audit_filters_and_cursor(store: SqlStore) -> None:
    events = [
        _event(0, payload={"signature": "xid-79", "nodes": ["n2"], "n": 1}),
        _event(1, kind=AuditKind.ADVICE, action="requeue", mode=Mode.ACT, verdict="hardware"),
        _event(2, subject_type=SubjectType.NODE, subject_id="n2", signature_id="xid-79"),
        _event(3, actor="alice", kind=AuditKind.RECONCILIATION, subject_id="8"),
        _event(4, cluster="beta"),
        _event(5, subject_type=SubjectType.CLUSTER, subject_id="alpha", cluster=None),
    ]
    ids = [store.append_audit(e) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    stored = store.query_audit()
    assert stored == [replace(e, id=i) for e, i in zip(events, ids, strict=True)]
    assert stored[0].payload == events[0].payload

    def matching(**filters: Any) -> list[int]:
        return [e.id or 0 for e in store.query_audit(**filters)]

    assert matching(job_id=JobId("7")) == [ids[0], ids[1], ids[4]]
    assert matching(job_id=JobId("7"), cluster=C) == [ids[0], ids[1]]
    assert matching(subject_type="node", subject_id="n2") == [ids[2]]
    assert matching(kind=AuditKind.ADVICE) == [ids[1]]
    assert matching(actor="alice") == [ids[3]]
    assert matching(since=T0 + timedelta(seconds=2), until=T0 + timedelta(seconds=4)) == ids[2:5]
    assert matching(job_id=JobId("7"), subject_type="node") == []

    pages: list[list[int]] = []
    cursor: int | None = None
    while page := matching(after_id=cursor, limit=4):
        pages.append(page)
        cursor = page[-1]
    assert pages == [ids[:4], ids[4:]]
    with pytest.raises(InputError):
        store.query_audit(limit=0)
    with pytest.raises(InputError):
        store.query_audit(order=cast(Any, "sideways"))


def test_audit_newest_first_pages_back_with_before_id(store: SqlStore) -> None:
    kinds = (AuditKind.DETECTION, AuditKind.ADVICE)
    ids = [store.append_audit(_event(n, kind=kinds[n % 2])) for n in range(7)]

    def matching(**filters: Any) -> list[int]:
        return [e.id or 0 for e in store.query_audit(**filters)]

    assert matching(order="desc") == ids[::-1]
    assert matching(order="desc", limit=2) == [ids[6], ids[5]]
    assert matching(order="desc", before_id=ids[5], limit=2) == [ids[4], ids[3]]
    assert matching(order="desc", kind=AuditKind.ADVICE) == [ids[5], ids[3], ids[1]]
    assert matching(order="desc", since=T0 + timedelta(seconds=4)) == ids[4:][::-1]
    # Both bounds, either order.
    assert matching(after_id=ids[1], before_id=ids[5]) == ids[2:5]
    assert matching(after_id=ids[1], before_id=ids[5], order="desc") == ids[2:5][::-1]
    assert matching(before_id=ids[0]) == matching(order="desc", after_id=ids[6]) == []

    pages: list[list[int]] = []
    cursor: int | None = None
    while page := matching(order="desc", before_id=cursor, limit=3):
        pages.append(page)
        cursor = page[-1]
    assert pages == [ids[6:3:-1], ids[3:0:-1], ids[:1]]


def test_audit_is_append_only_in_the_database(store: SqlStore, raw: sa.Engine) -> None:
    event_id = store.append_audit(_event(0))
    for statement in ("UPDATE audit_events SET actor = 'mallory'", "DELETE FROM audit_events"):
        with pytest.raises(sa.exc.DBAPIError, match="append-only"), raw.begin() as conn:
            conn.execute(sa.text(statement))
    assert [e.id for e in store.query_audit(actor="medic")] == [event_id]


def test_timestamps_keep_microseconds_and_come_back_utc(store: SqlStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    local = datetime(2026, 3, 4, 5, 6, 7, 654321, tzinfo=plus_two)
    event_id = store.append_audit(_event(0, time=local))
    (event,) = store.query_audit(after_id=event_id - 1)
    assert event.time == local and event.time.tzinfo is UTC
    assert (event.time.hour, event.time.microsecond) == (3, 654321)
    # A window one microsecond wide still finds it: the filter sees the same precision.
    assert store.query_audit(since=local, until=local) == [event]
    assert store.query_audit(since=local + timedelta(microseconds=1)) == []

    store.sync_jobs(C, [_job("1", submit_time=local)], local)
    job = store.get_job(C, JobId("1"))
    assert job is not None and job.submit_time == local and job.submit_time.tzinfo is UTC
    with pytest.raises(StoreError, match="naive"):
        store.append_audit(_event(0, time=datetime(2026, 1, 1)))


# --- cursors, errors, migrations -----------------------------------------------------------
def test_cursors(store: SqlStore) -> None:
    assert store.get_cursor("slurm-logs") is None
    store.set_cursor("slurm-logs", '{"/logs/1.out": 1024}')
    store.set_cursor("slurm-logs", '{"/logs/1.out": 2048}')
    store.set_cursor("kernel", "x" * 100_000)
    assert store.get_cursor("slurm-logs") == '{"/logs/1.out": 2048}'
    assert store.get_cursor("kernel") == "x" * 100_000


def test_database_errors_become_store_errors(store: SqlStore, raw: sa.Engine) -> None:
    with raw.begin() as conn:
        conn.execute(sa.text("DROP TABLE cursors"))
    with pytest.raises(StoreError, match="cursors") as caught:
        store.get_cursor("x")
    assert isinstance(caught.value.__cause__, sa.exc.SQLAlchemyError)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("scheme", ["postgresql+psycopg", "mysql+pymysql"])
def test_unreachable_database_is_a_store_error(scheme: str) -> None:
    url = f"{scheme}://medic:s3cret@127.0.0.1:{_closed_port()}/medic"
    with pytest.raises(StoreError) as caught:
        create_store(url)
    message = str(caught.value)
    assert "127.0.0.1" in message and scheme in message
    assert "s3cret" not in message


def test_default_database_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(platformdirs, "user_state_dir", lambda app: str(tmp_path / "st" / app))
    url = default_database_url()
    assert url == f"sqlite:///{tmp_path / 'st' / 'medic' / 'medic.db'}"
    assert (tmp_path / "st" / "medic").is_dir()


def test_migrations_match_metadata(store: SqlStore, raw: sa.Engine) -> None:
    with raw.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []
        # The comparison is able to see a difference.
        drifted = sa.MetaData(naming_convention=metadata.naming_convention)
        for table in metadata.sorted_tables:
            table.to_metadata(drifted)
        drifted.tables["cursors"].append_column(sa.Column("extra", sa.Integer()))
        assert compare_metadata(context, drifted) != []


def test_create_store_twice_keeps_data(db_url: str, store: SqlStore) -> None:
    store.set_cursor("a", "1")
    second = create_store(db_url)
    try:
        assert second.get_cursor("a") == "1"
    finally:
        second.close()


# --- concurrency ---------------------------------------------------------------------------
@pytest.fixture
def two_stores(db_url: str, store: SqlStore) -> Iterator[tuple[SqlStore, SqlStore]]:
    other = create_store(db_url)  # its own engine and connections
    yield store, other
    other.close()


def test_concurrent_begin_action_inserts_once(two_stores: tuple[SqlStore, SqlStore]) -> None:
    a, b = two_stores
    for round_ in range(5):
        record = ActionRecord(
            key=f"advice/{round_}/g1/cancel",
            cluster=C,
            kind=ActionKind.CANCEL,
            status=ActionStatus.STARTED,
            job_id=JobId(str(round_)),
            node=None,
            advice_id=AdviceId(round_),
            started_at=T0,
        )
        won = _race(partial(a.begin_action, record), partial(b.begin_action, record))
        assert sorted(won) == [False, True]
    keys = [action.key for action in a.list_actions()]
    assert sorted(keys) == sorted(f"advice/{r}/g1/cancel" for r in range(5))


@pytest.fixture
def slow_advice_reads() -> Iterator[None]:
    """Pause after every read of the advice table, so both racers read before either writes.

    Without it the two short transactions rarely overlap and the race would seldom be tested.
    """

    def pause(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM advice" in statement:
            time.sleep(0.05)

    sa.event.listen(sa.Engine, "after_cursor_execute", pause)
    yield
    sa.event.remove(sa.Engine, "after_cursor_execute", pause)


@pytest.mark.usefixtures("slow_advice_reads")
def test_concurrent_publish_advice_makes_one_row(two_stores: tuple[SqlStore, SqlStore]) -> None:
    a, b = two_stores
    for round_ in range(3):
        request = _request(str(round_))
        first, second = _race(
            partial(a.publish_advice, request, T0), partial(b.publish_advice, request, T0)
        )
        assert first == second
        assert (first.generation, first.observed_generation) == (1, 0)
    assert sorted(x.job_id for x in a.list_advice()) == [str(r) for r in range(3)]
    assert {x.generation for x in b.list_advice()} == {1}


def test_one_store_shared_by_threads(store: SqlStore) -> None:
    def append_many(offset: int) -> list[int]:
        return [store.append_audit(_event(offset + i)) for i in range(20)]

    left, right = _race(lambda: append_many(0), lambda: append_many(100))
    assert len(set(left) | set(right)) == 40
    assert len(store.query_audit(limit=1000)) == 40
