"""Benchmark: the read API over HTTP: the job list, a job's timeline and the audit search.

Run: ``.venv/bin/python benchmarks/bench_api.py`` (``--rows`` audit rows, default 1,000,000;
``--quick`` for a smoke run on 20,000; ``--engines sqlite,postgresql``; ``--seconds`` per round,
``--rounds``, ``--concurrency``). On SQLite (a temporary file) always, and on PostgreSQL when
``--postgres-url`` (default ``$MEDIC_TEST_POSTGRES_URL``, else
``postgresql+psycopg://postgres@127.0.0.1:5432/test``) answers: in a database of its own,
created next to that one and dropped after. An engine that does not answer is skipped with a
reason.

The app is built as ``medic serve`` builds it (``load_settings``, ``wiring.build``,
``create_app``, without the control loop) and served as ``medic serve`` serves it, by one uvicorn
process on 127.0.0.1, here a subprocess (so server and load generator do not share a GIL); the
load comes from httpx clients with keep-alive, each in its own thread, authenticated with a
viewer's bearer token. Data, written through the store (jobs and their history) or straight into
its ``audit_events`` table before the server starts:

* 1,000 jobs in two clusters (a third with advice), each with an attempt; one of them, the
  *timeline job*, has 50 attempts, 500 detections, 50 verdicts, 150 scheduler actions, 50
  generations of advice and exactly 1,000 audit events spread over the whole trail;
* ``--rows`` audit events over 30 days, oldest first: 70% about jobs (20,000 job ids, those of
  the listed jobs the newest), 20% about 2,000 nodes, the rest refused requests and sessions;
  actor ``medic-engine`` for most, ``controller:login1`` for a third of the jobs' action events,
  ``user:alice`` once every 20,000 rows, a ``breaker-tripped`` once every 100,000. Loaded on
  SQLite by executemany, 10,000 rows a transaction; on PostgreSQL by one COPY, then VACUUM
  ANALYZE as autovacuum would do in production (SQLite is not ANALYZEd: medic never does).

Scenarios, each the request an operator (or the console) makes: ``jobs`` (``GET /api/v1/jobs``),
``timeline`` (``GET /api/v1/jobs/{id}/timeline`` of the timeline job), and ``GET /api/v1/audit``
as the console's Audit page asks it: ``audit_first_page`` (no filter: the oldest 100),
``audit_job`` (the timeline job), ``audit_node`` (one node), ``audit_kind_rare``
(``breaker-tripped``), ``audit_actor_common`` (``controller:login1``), ``audit_actor_rare``
(``user:alice``), ``audit_time_hour`` (one hour in the middle of the trail),
``audit_since_7d`` (the last 7 days), ``audit_deep_cursor`` (``after_id`` 1,000 before the
end), ``audit_deep_cursor_kind`` (detections, ``after_id`` 10,000 before the end) and
``audit_csv_export`` (the timeline job's events as CSV, ``limit=1000``, the console's export).

Each scenario is measured at ``--concurrency`` (default 1 and 4 clients) for ``--rounds``
rounds of ``--seconds``, every client sending its next request as soon as the previous answer
arrived: requests/s (all clients together) and latency p50/p99 in ms, each the median over the
rounds. In the same run, one client each, two references without HTTP: ``store``, the store
calls the route makes, in process (domain objects, no JSON), and ``sql``, the plain approach: the
same rows read with one hand-written SELECT per table through SQLAlchemy, returned as raw tuples
(the timeline: the job by its key instead of the route's scan of every job). The ratios
``api_over_sql_p50`` and ``api_over_store_p50`` (one client each) say how much the API adds;
a ratio near 1 with a slow ``sql`` means the time goes to the database's plan (a missing index),
not to the API. Each scenario also gives the size of its answer (``items``, ``response_bytes``),
checked once: what was loaded, or (audit) the same event ids as the plain SELECT. Machines are
shared and noisy: read medians and ratios, not single figures.

The last line printed is one JSON object with every figure; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from medic.domain.actions import ActionKind, ActionRecord, ActionStatus, idempotency_key
from medic.domain.advice import AdviceAction, AdviceRequest
from medic.domain.audit import AuditKind
from medic.domain.auth import Role, Token, hash_secret, new_secret
from medic.domain.cluster import Job, JobState, Mode
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Severity, Verdict
from medic.domain.diagnosis import Role as SignatureRole
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.store import SqlStore, create_store
from medic.store.columns import UtcDateTime, dump_json
from medic.store.engine import make_engine
from medic.store.tables import audit_events

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=30)
T_END = T0 + SPAN
CLUSTERS = (ClusterName("a100-east"), ClusterName("h100-west"))
NODES = 2_000
FIRST_JOB = 100_000
HISTORY_JOBS = 19_000
"""Job ids FIRST_JOB.. that ended before the listed ones: in the audit trail, not in ``jobs``."""
FIRST_LISTED = FIRST_JOB + HISTORY_JOBS
LISTED = 1_000
HISTORY_SHARE = 0.95
"""Share of the job events, the oldest, that are about jobs no longer listed."""
TIMELINE_JOB = FIRST_LISTED + 501
TIMELINE_EVENTS = 1_000
TIMELINE_ATTEMPTS = 50
ENGINE_ACTOR = "medic-engine"
CONTROLLER_ACTOR = "controller:login1"
RARE_ACTOR = "user:alice"
RARE_ACTOR_EVERY = 20_000
RARE_KIND = AuditKind.BREAKER_TRIPPED
RARE_KIND_EVERY = 100_000
CHUNK = 10_000
PAGE = 100
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
XID79_SIGNATURE = "nvidia.xid.79"
STEPS = ("requeue_hold", "exclude_nodes", "release")
ALERT_PAYLOAD = {"key": "xid:79", "severity": "critical", "summary": XID79, "xid": 79}
BREAKER_PAYLOAD = {"reason": "10% of nodes in repair", "threshold": 0.1}
DENIED_PAYLOAD = {
    "method": "POST",
    "principal": "dashboard",
    "reason": "forbidden",
    "role": "viewer",
}
SESSION_PAYLOAD = {"role": "operator", "token": "ops-console"}
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
JOB_KINDS = (
    (AuditKind.DETECTION, 50),
    (AuditKind.VERDICT, 8),
    (AuditKind.ADVICE, 8),
    (AuditKind.ACTION_STARTED, 12),
    (AuditKind.ACTION_SUCCEEDED, 12),
    (AuditKind.RECONCILIATION, 6),
    (AuditKind.ACTION_SKIPPED, 4),
)
NODE_KINDS = (
    (AuditKind.ALERT_FIRING, 40),
    (AuditKind.ALERT_RESOLVED, 30),
    (AuditKind.REPAIR_RECOMMENDED, 10),
    (AuditKind.REPAIR_TRANSITION, 15),
    (AuditKind.REPAIR_REQUESTED, 5),
)
AUDIT_COLUMNS = tuple(c.name for c in audit_events.columns if c.name != "id")
_JOB_DRAW = ([k for k, _ in JOB_KINDS], list(accumulate(w for _, w in JOB_KINDS)))
_NODE_DRAW = ([k for k, _ in NODE_KINDS], list(accumulate(w for _, w in NODE_KINDS)))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- data ----------------------------------------------------------------------------------------
def _cluster_of(number: int) -> ClusterName:
    return CLUSTERS[1] if number % 5 == 0 else CLUSTERS[0]


def _node(number: int) -> NodeName:
    return NodeName(f"gpu-{number % NODES:04d}")


def _job_number(i: int, rows: int, rng: random.Random) -> int:
    """The job an event of row ``i`` is about: jobs live in windows, newest last."""
    share = i / rows
    if share < HISTORY_SHARE:
        number = FIRST_JOB + int(share / HISTORY_SHARE * HISTORY_JOBS)
    else:
        number = FIRST_LISTED + int((share - HISTORY_SHARE) / (1 - HISTORY_SHARE) * LISTED)
    number = min(max(number + rng.randint(-3, 3), FIRST_JOB), FIRST_LISTED + LISTED - 1)
    return number + 1 if number == TIMELINE_JOB else number


def _row(
    when: datetime, kind: AuditKind, subject: tuple[str, str], cluster: str | None, **columns: Any
) -> dict[str, Any]:
    """One audit row; ``columns`` give the payload and any other column (actor: the engine)."""
    return {
        "time": when,
        "actor": ENGINE_ACTOR,
        "kind": kind.value,
        "subject_type": subject[0],
        "subject_id": subject[1],
        "cluster": cluster,
        "signature_id": None,
        "action": None,
        "verdict": None,
        "mode": None,
        **columns,
    }


def _job_event(when: datetime, number: int, i: int, rng: random.Random) -> dict[str, Any]:
    kind = rng.choices(_JOB_DRAW[0], cum_weights=_JOB_DRAW[1])[0]
    node, attempt, step = _node(number * 7 + i % 8), i % 5, STEPS[i % 3]
    columns: dict[str, Any]
    if kind is AuditKind.DETECTION:
        payload = {"attempt": attempt, "line": XID79, "node": node, "rank": i % 64, "seq": i}
        columns = {"signature_id": XID79_SIGNATURE, "action": "restart"}
    elif kind is AuditKind.VERDICT:
        summary = f"Xid 79 on {node}: GPU fell off the bus"
        payload = {"attempt": attempt, "confidence": 0.92, "nodes": [node], "summary": summary}
        columns = {"signature_id": XID79_SIGNATURE, "verdict": "hardware"}
    elif kind is AuditKind.ADVICE:
        reason = f"hardware fault on {node}"
        payload = {"attempt": attempt, "exclude_nodes": [node], "reason": reason}
        columns = {"action": "requeue"}
    else:  # the steps of carrying advice out, some by a remote controller
        key = f"advice/{number - FIRST_JOB}/g{attempt + 1}/{step}"
        payload = {"advice_id": number - FIRST_JOB, "generation": attempt + 1, "key": key}
        actor = CONTROLLER_ACTOR if number % 3 == 0 else ENGINE_ACTOR
        columns = {"action": step, "actor": actor}
    subject = ("job", str(number))
    return _row(when, kind, subject, _cluster_of(number), payload=payload, mode="act", **columns)


def _node_event(when: datetime, i: int, rng: random.Random) -> dict[str, Any]:
    kind = rng.choices(_NODE_DRAW[0], cum_weights=_NODE_DRAW[1])[0]
    number = rng.randrange(NODES)
    subject, cluster = ("node", _node(number)), _cluster_of(number)
    if kind in (AuditKind.ALERT_FIRING, AuditKind.ALERT_RESOLVED):
        return _row(when, kind, subject, cluster, payload=ALERT_PAYLOAD)
    payload = {"action": "reboot", "from": "approved", "repair_id": i, "to": "draining"}
    actor = f"detector:agent:{subject[1]}" if kind is AuditKind.REPAIR_REQUESTED else ENGINE_ACTOR
    return _row(when, kind, subject, cluster, payload=payload, action="reboot", actor=actor)


def _audit_row(i: int, rows: int, rng: random.Random) -> dict[str, Any]:
    when = T0 + SPAN * (i / rows)
    stride = rows // TIMELINE_EVENTS
    if i % stride == stride // 2 and i // stride < TIMELINE_EVENTS:
        return _job_event(when, TIMELINE_JOB, i, rng)
    if i % RARE_ACTOR_EVERY == 7:
        subject, cluster = ("node", _node(i)), _cluster_of(i % NODES)
        payload = {"repair_id": i}
        return _row(
            when, AuditKind.REPAIR_APPROVED, subject, cluster, payload=payload, actor=RARE_ACTOR
        )
    if i % RARE_KIND_EVERY == 11:
        cluster = _cluster_of(i)
        return _row(when, RARE_KIND, ("cluster", cluster), cluster, payload=BREAKER_PAYLOAD)
    draw = rng.random()
    if draw < 0.70:
        return _job_event(when, _job_number(i, rows, rng), i, rng)
    if draw < 0.90:
        return _node_event(when, i, rng)
    if draw < 0.97:
        denied = ("api", "/api/v1/repairs")
        return _row(when, AuditKind.ACCESS_DENIED, denied, None, payload=DENIED_PAYLOAD)
    session = ("token", "ops-console")
    return _row(when, AuditKind.SESSION_STARTED, session, None, payload=SESSION_PAYLOAD)


def _audit_chunks(rows: int) -> Iterator[list[dict[str, Any]]]:
    rng = random.Random(20260101)
    for start in range(0, rows, CHUNK):
        yield [_audit_row(i, rows, rng) for i in range(start, min(rows, start + CHUNK))]


def load_audit(url: str, rows: int) -> None:
    """``rows`` audit events, ``CHUNK`` per transaction (PostgreSQL: one COPY)."""
    engine = make_engine(url)
    try:
        if engine.dialect.name == "postgresql":
            _copy_audit(engine, rows)
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.exec_driver_sql("VACUUM ANALYZE")
            return
        for chunk in _audit_chunks(rows):
            with engine.begin() as conn:
                conn.execute(sa.insert(audit_events), chunk)
    finally:
        engine.dispose()


def _copy_audit(engine: sa.Engine, rows: int) -> None:
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        copy = f"COPY audit_events ({', '.join(AUDIT_COLUMNS)}) FROM STDIN"
        with cursor.copy(copy) as out:
            for chunk in _audit_chunks(rows):
                for row in chunk:
                    # As UtcDateTime and JsonText store them: naive UTC, sorted-key JSON text.
                    row["time"] = row["time"].astimezone(UTC).replace(tzinfo=None)
                    row["payload"] = dump_json(row["payload"])
                    out.write_row([row[c] for c in AUDIT_COLUMNS])
        raw.commit()
    finally:
        raw.close()


def _listed_job(k: int, restart_count: int | None = None) -> Job:
    number = FIRST_LISTED + k
    state = (JobState.RUNNING,) * 6 + (
        JobState.PENDING,
        JobState.COMPLETED,
        JobState.COMPLETED,
        JobState.FAILED,
    )
    started = T_END - timedelta(hours=1 + k % 48)
    return Job(
        id=JobId(str(number)),
        cluster=_cluster_of(number),
        name=f"train-{k:04d}",
        state=state[k % 10],
        partition=f"p{k % 4}",
        nodes=tuple(_node(number * 7 + j) for j in range(8)),
        excluded_nodes=frozenset({_node(number)}) if k % 3 == 0 else frozenset(),
        restart_count=k % 3 if restart_count is None else restart_count,
        num_nodes=8,
        submit_time=started - timedelta(minutes=5),
        start_time=started,
        log_paths=(f"/shared/logs/{number}.out", f"/shared/logs/{number}.err"),
    )


def _diagnosis(job: Job, attempt: int, detections: int, when: datetime) -> list[Detection]:
    return [
        Detection(
            job_id=job.id,
            attempt=attempt,
            signature_id=SignatureId(XID79_SIGNATURE),
            domain=FaultDomain.HARDWARE,
            role=SignatureRole.ROOT,
            severity=Severity.CRITICAL,
            action=JobAction.RESTART,
            time=when + timedelta(seconds=s),
            node=job.nodes[s % len(job.nodes)],
            rank=s,
            implicates_node=True,
            text=XID79,
            fields={"xid": "79", "pci": "0000:3b:00"},
            seq=attempt * 1000 + s,
        )
        for s in range(detections)
    ]


def _record_failure(store: SqlStore, job: Job, attempt: int, detections: int) -> None:
    """What one failed attempt leaves: detections, a verdict, advice, three scheduler steps."""
    when = T_END - timedelta(hours=TIMELINE_ATTEMPTS - attempt)
    found = _diagnosis(job, attempt, detections, when)
    store.add_detections(job.cluster, found)
    node = job.nodes[attempt % len(job.nodes)]
    store.add_verdict(
        job.cluster,
        Verdict(
            job.id,
            attempt,
            FaultDomain.HARDWARE,
            JobAction.RESTART,
            frozenset({node}),
            0.92,
            SignatureId(XID79_SIGNATURE),
            f"Xid 79 on {node}",
            tuple(found[:3]),
            when,
        ),
    )
    advice = store.publish_advice(
        AdviceRequest(
            job.cluster,
            job.id,
            attempt,
            AdviceAction.REQUEUE,
            frozenset({node}),
            f"hardware fault on {node}",
            Mode.ACT,
            "requeue-excluding-nodes",
        ),
        when,
    )
    for kind in (ActionKind.REQUEUE_HOLD, ActionKind.EXCLUDE_NODES, ActionKind.RELEASE):
        key = idempotency_key(advice.id, advice.generation, kind)
        store.begin_action(
            ActionRecord(
                key, job.cluster, kind, ActionStatus.STARTED, job.id, None, advice.id, when
            )
        )
        store.finish_action(key, ActionStatus.SUCCEEDED, when + timedelta(seconds=1))


def load_jobs(store: SqlStore) -> None:
    """The listed jobs, a third of them with advice, and the timeline job's history."""
    for cluster in CLUSTERS:
        store.ensure_cluster(cluster, "slurm")
    jobs = [_listed_job(k) for k in range(LISTED) if FIRST_LISTED + k != TIMELINE_JOB]
    for cluster in CLUSTERS:
        store.sync_jobs(cluster, [j for j in jobs if j.cluster == cluster], T_END)
    for job in jobs[::3]:
        _record_failure(store, job, job.restart_count, 3)
    k = TIMELINE_JOB - FIRST_LISTED
    for attempt in range(TIMELINE_ATTEMPTS):
        job = _listed_job(k, restart_count=attempt)
        store.sync_jobs(job.cluster, [job], T_END - timedelta(hours=TIMELINE_ATTEMPTS - attempt))
        _record_failure(store, job, attempt, 10)


def grant_viewer(store: SqlStore) -> str:
    secret = new_secret()
    store.create_token(Token("bench-viewer", Role.VIEWER, hash_secret(secret), T0, "bench"))
    return secret


# --- scenarios -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    audit: dict[str, Any] | None = None
    """The audit filters (None: not an audit query)."""


def scenarios(max_id: int) -> list[Scenario]:
    mid = T0 + SPAN / 2
    job = str(TIMELINE_JOB)
    audit: dict[str, dict[str, Any]] = {
        "audit_first_page": {},
        "audit_job": {"job": job},
        "audit_node": {"node": "gpu-0042"},
        "audit_kind_rare": {"kind": RARE_KIND.value},
        "audit_actor_common": {"actor": CONTROLLER_ACTOR},
        "audit_actor_rare": {"actor": RARE_ACTOR},
        "audit_time_hour": {"since": mid, "until": mid + timedelta(hours=1)},
        "audit_since_7d": {"since": T_END - timedelta(days=7)},
        "audit_deep_cursor": {"after_id": max_id - 1_000},
        "audit_deep_cursor_kind": {"kind": AuditKind.DETECTION.value, "after_id": max_id - 10_000},
        "audit_csv_export": {"job": job, "limit": 1_000, "format": "csv"},
    }
    return [
        Scenario("jobs", "/api/v1/jobs"),
        Scenario("timeline", f"/api/v1/jobs/{job}/timeline"),
        *(
            Scenario(name, "/api/v1/audit", {k: _param(v) for k, v in f.items()}, audit=f)
            for name, f in audit.items()
        ),
    ]


def _param(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _audit_sql(filters: dict[str, Any]) -> sa.TextClause:
    """The audit query as plain SQL, with the conditions the store builds."""
    where = []
    for name in ("job", "node"):
        if name in filters:
            where.append(f"subject_type = '{name}' AND subject_id = :{name}")
    where += [f"{name} = :{name}" for name in ("cluster", "kind", "actor") if name in filters]
    where += [
        f"time {op} :{name}" for name, op in (("since", ">="), ("until", "<=")) if name in filters
    ]
    if "after_id" in filters:
        where.append("id > :after_id")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    text = sa.text(f"SELECT * FROM audit_events{clause} ORDER BY id LIMIT :limit")
    times = [sa.bindparam(n, type_=UtcDateTime()) for n in ("since", "until") if n in filters]
    return text.bindparams(*times) if times else text


def _audit_values(filters: dict[str, Any]) -> dict[str, Any]:
    values = {k: v for k, v in filters.items() if k not in ("limit", "format")}
    return {**values, "limit": int(filters.get("limit", PAGE)) + 1}


def _store_audit(filters: dict[str, Any]) -> dict[str, Any]:
    """The arguments the route passes to ``store.query_audit``."""
    kwargs: dict[str, Any] = {"limit": int(filters.get("limit", PAGE)) + 1}
    if "job" in filters:
        kwargs["job_id"] = JobId(filters["job"])
    if "node" in filters:
        kwargs.update(subject_type="node", subject_id=filters["node"])
    if "kind" in filters:
        kwargs["kind"] = AuditKind(filters["kind"])
    kwargs.update({k: filters[k] for k in ("actor", "since", "until", "after_id") if k in filters})
    return kwargs


TIMELINE_SQL = (
    ("job", "SELECT * FROM jobs WHERE cluster = :cluster AND job_id = :job"),
    (
        "events",
        "SELECT * FROM audit_events WHERE subject_type = 'job' AND subject_id = :job "
        "AND cluster = :cluster ORDER BY id",
    ),
    (
        "attempts",
        "SELECT * FROM attempts WHERE cluster = :cluster AND job_id = :job ORDER BY number",
    ),
    (
        "detections",
        "SELECT * FROM detections WHERE cluster = :cluster AND job_id = :job ORDER BY id",
    ),
    ("verdicts", "SELECT * FROM verdicts WHERE cluster = :cluster AND job_id = :job ORDER BY id"),
    (
        "actions",
        "SELECT * FROM scheduler_actions WHERE cluster = :cluster AND job_id = :job ORDER BY id",
    ),
    ("advice", "SELECT * FROM advice WHERE cluster = :cluster AND job_id = :job"),
)
JOBS_SQL = (
    "SELECT * FROM advice ORDER BY id",
    "SELECT * FROM jobs ORDER BY cluster, length(job_id), job_id",
)


def sql_call(engine: sa.Engine, scenario: Scenario) -> Callable[[], int]:
    """The plain approach: the same rows, one SELECT per table, raw tuples; returns rows read."""
    if scenario.audit is not None:
        query, values = _audit_sql(scenario.audit), _audit_values(scenario.audit)
        statements = [(query, values)]
    elif scenario.name == "jobs":
        statements = [(sa.text(sql), {}) for sql in JOBS_SQL]
    else:
        values = {"cluster": _cluster_of(TIMELINE_JOB), "job": str(TIMELINE_JOB)}
        statements = [(sa.text(sql), values) for _, sql in TIMELINE_SQL]

    def call() -> int:
        with engine.connect() as conn:
            return sum(len(conn.execute(q, v).all()) for q, v in statements)

    return call


def store_call(store: SqlStore, scenario: Scenario) -> Callable[[], int]:
    """The store calls the route makes, in process: domain objects, no HTTP, no JSON."""
    if scenario.audit is not None:
        kwargs = _store_audit(scenario.audit)
        return lambda: len(store.query_audit(**kwargs))
    if scenario.name == "jobs":
        return lambda: len(store.list_advice()) + len(store.list_jobs())
    cluster, job = _cluster_of(TIMELINE_JOB), JobId(str(TIMELINE_JOB))

    def timeline() -> int:
        found = [j for j in store.list_jobs() if j.id == job]  # the route's _find_job
        events: list[Any] = []
        while True:  # the route's _all_events: pages of 1,000
            after = events[-1].id if events else None
            page = store.query_audit(cluster=cluster, job_id=job, after_id=after, limit=1000)
            events += page
            if len(page) < 1000:
                break
        reads = (store.list_attempts, store.list_detections, store.list_verdicts)
        rest = sum(len(read(cluster, job)) for read in reads)
        rest += len(store.list_actions(cluster, job)) + (
            store.advice_for_job(cluster, job) is not None
        )
        return len(found) + len(events) + rest

    return timeline


# --- measuring -----------------------------------------------------------------------------------
def run_round(workers: Sequence[Callable[[], object]], seconds: float) -> tuple[float, list[float]]:
    """Every worker in its own thread, calling back to back for ``seconds``: (calls per second of
    all together, every latency in seconds)."""
    latencies: list[list[float]] = [[] for _ in workers]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(workers) + 1)

    def loop(k: int) -> None:
        own, call = latencies[k], workers[k]
        barrier.wait()
        end = time.perf_counter() + seconds
        try:
            while True:
                started = time.perf_counter()
                call()
                done = time.perf_counter()
                own.append(done - started)
                if done >= end:
                    return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(len(workers))]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    flat = [x for own in latencies for x in own]
    return len(flat) / elapsed, flat


def measure(workers: Sequence[Callable[[], object]], seconds: float, rounds: int) -> dict[str, Any]:
    for call in workers:
        call()  # warm: connections open, pages cached
    results = [run_round(workers, seconds) for _ in range(rounds)]
    return {
        "rps": round(statistics.median(r for r, _ in results), 1),
        "p50_ms": round(statistics.median(1000 * percentile(lat, 50) for _, lat in results), 2),
        "p99_ms": round(statistics.median(1000 * percentile(lat, 99) for _, lat in results), 2),
        "requests": sum(len(lat) for _, lat in results),
    }


def http_call(client: httpx.Client, scenario: Scenario) -> Callable[[], int]:
    def call() -> int:
        response = client.get(scenario.path, params=scenario.params)
        if response.status_code != 200:
            raise RuntimeError(
                f"{scenario.name}: HTTP {response.status_code}: {response.text[:300]}"
            )
        return len(response.content)

    return call


def check(client: httpx.Client, engine: sa.Engine, scenario: Scenario) -> dict[str, Any]:
    """One request, checked: the job list and the timeline hold what was loaded, an audit page
    the same event ids as the plain SELECT."""
    response = client.get(scenario.path, params=scenario.params)
    response.raise_for_status()
    figures: dict[str, Any] = {"response_bytes": len(response.content)}
    if scenario.audit is None:
        body = response.json()
        if scenario.name == "jobs":
            figures.update(items=len(body), with_advice=sum(1 for j in body if j["advice"]))
            wanted = LISTED
        else:
            figures.update(
                {k: len(v) for k, v in body.items() if k != "job"}, items=len(body["events"])
            )
            wanted = TIMELINE_EVENTS
        if figures["items"] != wanted:
            raise RuntimeError(f"{scenario.name}: {figures['items']} items, {wanted} loaded")
        return figures
    if scenario.params.get("format") == "csv":
        ids = [int(line.split(",", 1)[0]) for line in response.text.splitlines()[1:]]
    else:
        ids = [e["id"] for e in response.json()["events"]]
    with engine.connect() as conn:
        rows = conn.execute(_audit_sql(scenario.audit), _audit_values(scenario.audit)).all()
    if ids != [r.id for r in rows][: int(scenario.audit.get("limit", PAGE))]:
        raise RuntimeError(f"{scenario.name}: the API's event ids differ from the plain SELECT's")
    figures["items"] = len(ids)
    return figures


@contextlib.contextmanager
def served(url: str, log_path: Path) -> Iterator[str]:
    """medic's API on ``url``'s store, served by uvicorn in a subprocess; yields its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log_path.open("w") as server_log:
        cmd = [sys.executable, __file__, "--serve", url, "--port", str(port)]
        proc = subprocess.Popen(cmd, stdout=server_log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start:\n{log_path.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve(url: str, port: int) -> None:
    """The subprocess: the app as ``medic serve`` builds it, without the control loop."""
    import uvicorn

    from medic.api.app import create_app
    from medic.config.loading import load_settings
    from medic.wiring import SystemClock, build

    settings = load_settings(env={}, overrides={"store.url": url})
    services = build(settings, clock=SystemClock())
    try:
        uvicorn.run(
            create_app(services),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
        )
    finally:
        services.close()


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 1) if b > 0 else None


def load(name: str, url: str, rows: int) -> tuple[str, dict[str, Any]]:
    """Migrate, grant a viewer's token, load the data; (the token's secret, what was loaded)."""
    started = time.perf_counter()
    store = create_store(url)
    try:
        secret = grant_viewer(store)
        load_jobs(store)
    finally:
        store.close()
    log(f"{name}: jobs loaded in {time.perf_counter() - started:.1f} s; loading audit rows")
    load_audit(url, rows)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            count = conn.execute(sa.text("SELECT count(*) FROM audit_events")).scalar_one()
            max_id = conn.execute(sa.text("SELECT max(id) FROM audit_events")).scalar_one()
    finally:
        engine.dispose()
    loaded = {"load_s": round(time.perf_counter() - started, 1), "audit_rows": int(count)}
    log(f"{name}: {loaded}")
    return secret, {**loaded, "max_id": int(max_id)}


def measure_api(
    name: str, url: str, secret: str, plan: Sequence[Scenario], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Every scenario over HTTP at each concurrency, after one checked request."""
    found: dict[str, dict[str, Any]] = {}
    engine = make_engine(url)
    headers = {"Authorization": f"Bearer {secret}"}
    with served(url, args.tmp / f"{name}-server.log") as base:
        clients = [
            httpx.Client(base_url=base, headers=headers, timeout=300)
            for _ in range(max(args.concurrency))
        ]
        try:
            for scenario in plan:
                figures = check(clients[0], engine, scenario)
                for n in args.concurrency:
                    workers = [http_call(c, scenario) for c in clients[:n]]
                    figures[f"api_c{n}"] = measure(workers, args.seconds, args.rounds)
                found[scenario.name] = figures
                log(f"{name} {scenario.name}: {figures}")
        finally:
            for client in clients:
                client.close()
            engine.dispose()
    return found


def measure_references(
    name: str, url: str, plan: Sequence[Scenario], found: dict[str, Any], args: argparse.Namespace
) -> None:
    """The store and the plain SELECTs, one caller each, with the server stopped."""
    store, engine = create_store(url), make_engine(url)
    try:
        for scenario in plan:
            figures = found[scenario.name]
            figures["store_c1"] = measure([store_call(store, scenario)], args.seconds, args.rounds)
            figures["sql_c1"] = measure([sql_call(engine, scenario)], args.seconds, args.rounds)
            api = figures[f"api_c{min(args.concurrency)}"]
            figures["api_over_store_p50"] = _ratio(api["p50_ms"], figures["store_c1"]["p50_ms"])
            figures["api_over_sql_p50"] = _ratio(api["p50_ms"], figures["sql_c1"]["p50_ms"])
            log(f"{name} {scenario.name}: store {figures['store_c1']}, sql {figures['sql_c1']}")
    finally:
        store.close()
        engine.dispose()


def run_engine(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    secret, loaded = load(name, url, args.rows)
    plan = scenarios(loaded.pop("max_id"))
    found = measure_api(name, url, secret, plan, args)
    measure_references(name, url, plan, found, args)
    return {**loaded, "scenarios": found}


@contextlib.contextmanager
def own_database(url: str) -> Iterator[str]:
    """A database of its own next to ``url``'s (other test runs may reset that one meanwhile)."""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    name = f"medic_bench_api_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def postgres_refusal(url: str) -> str | None:
    """Why PostgreSQL at ``url`` cannot be used (None: it answers)."""
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        finally:
            engine.dispose()
    except (sa.exc.SQLAlchemyError, ImportError) as exc:
        return " ".join(str(getattr(exc, "orig", None) or exc).split())[:200]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, help="audit rows (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 2 rounds of 0.3 s")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--seconds", type=float, help="per round (default 1)")
    parser.add_argument("--rounds", type=int, help="default 3")
    parser.add_argument("--concurrency", default="1,4", help="clients at once, comma-separated")
    parser.add_argument(
        "--postgres-url", default=os.environ.get("MEDIC_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    quick = (20_000, 0.3, 2) if args.quick else (1_000_000, 1.0, 3)
    args.rows, args.seconds, args.rounds = (
        given if given is not None else default
        for given, default in zip((args.rows, args.seconds, args.rounds), quick, strict=True)
    )
    if args.rows < 20 * TIMELINE_EVENTS:
        parser.error(f"--rows must be at least {20 * TIMELINE_EVENTS}")
    args.concurrency = sorted({int(n) for n in args.concurrency.split(",")})
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if unknown := set(engines) - {"sqlite", "postgresql"}:
        parser.error(f"unknown engines {', '.join(sorted(unknown))}; use sqlite, postgresql")
    results: dict[str, Any] = {
        "rows": args.rows,
        "jobs": LISTED,
        "timeline_events": TIMELINE_EVENTS,
        "concurrency": args.concurrency,
        "seconds_per_round": args.seconds,
        "rounds": args.rounds,
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="medic-bench-api-") as tmp:
        args.tmp = Path(tmp)
        if "sqlite" in engines:
            results["sqlite"] = run_engine("sqlite", f"sqlite:///{args.tmp / 'medic.db'}", args)
        refusal = postgres_refusal(args.postgres_url) if "postgresql" in engines else None
        if refusal:
            log(f"postgresql skipped: {refusal}")
            results["postgresql"] = {"skipped": refusal}
        elif "postgresql" in engines:
            with own_database(args.postgres_url) as url:
                results["postgresql"] = run_engine("postgresql", url, args)
    results["wall_s"] = round(time.perf_counter() - started, 1)
    results["cpu_count"] = os.cpu_count()
    results["python"] = platform.python_version()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
