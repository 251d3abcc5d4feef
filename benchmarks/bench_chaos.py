"""Faults injected into replicated job recovery and racing repair requests, on each database.

What it does, per database (SQLite file, and PostgreSQL / MariaDB when ``MEDIC_TEST_POSTGRES_URL``
/ ``MEDIC_TEST_MYSQL_URL`` are set; ``tools/test_databases.py`` prints them):

- **job recovery, killed at every point.** Two replicas of the control loop (each its own lease
  keepers and holder name) share one store and one simulated cluster; a GPU falls off the bus in
  an act-mode job; replica A holds the leases and is killed at one point of the recovery: before
  or after each of the three scheduler commands, and before or after each write of the step
  ledger and of the audit trail in it (a ``BaseException`` at that call: nothing after it in A
  runs again, as after a SIGKILL; A's lease is left to run out). Replica B alone finishes it.
  Then the same with A *stalled* (SIGSTOP) for two leases right after recording each step and
  woken afterwards.
- **racing repair requests**: two stores (own engines, own connections) send 10,000 idempotent
  repair requests, each of 5,000 request ids once from each side at once; and 1,000 concurrent
  approvals of one pending repair, half from each side.

Per fault it counts scheduler commands issued more than once (``duplicate_actions``), repairs
created more than once per request id (``duplicate_repairs``), ledger steps left started and
audit ``action-started`` events without an outcome (``lost_audit_records``), recoveries that did
not converge (``completed_pct``), jobs left held, and the failover time: from the kill to B's
first ledger write, in the loop's time (virtual: passes every 0.2 s; the real-process figure
is ``tests/cli/test_replicas_serve.py``'s). The reference of the same run: the stalls again with the
unfenced loop (two replicas with no lease, as medic was before leases).

Not here yet (issue 14): killing real processes on real Slurm at each point, node-repair kill
points, restarting the database server, a network partition, and throwaway database servers of
the bench's own.

Last line: one JSON object, per database and ``overall``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from medic.config.settings import SchedulerSettings, Settings, SimSettings
from medic.control.leases import LeaseKeeper
from medic.control.loop import ControlLoop
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.actions import ActionStatus
from medic.domain.advice import Reconciliation
from medic.domain.audit import AuditKind
from medic.domain.cluster import JobSpec, Mode
from medic.domain.faults import FaultKind
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.leases import controller_lease, loop_lease
from medic.domain.repairs import RepairAction, RepairRequest, RepairState, RequesterKind
from medic.errors import ConflictError
from medic.schedulers.sim import SimCluster
from medic.store import SqlStore, create_store
from medic.store.tables import MEDIC_TABLES
from medic.telemetry.metrics import NullMetrics
from medic.testing import FakeClock

CLUSTER = ClusterName("chaos")
TTL = 8.0
STEP = 0.2
MUTATING = ("requeue_hold", "set_excluded_nodes", "release", "cancel")
SIM = SimSettings(
    nodes=12,
    partitions=2,
    jobs=0,
    nodes_per_job=2,
    seed=1,
    iteration_seconds=0.5,
    checkpoint_every=10,
    nccl_timeout_seconds=5.0,
    startup_seconds=1.0,
    node_repair_seconds=3600.0,
)
STORE_WRITES = ("begin_action", "finish_action", "append_audit")


class Killed(BaseException):
    """The process dies here (a BaseException: nothing catches it on the way out)."""


@dataclass
class Point:
    """Where replica A dies: the ``nth`` call of ``method`` (of the scheduler or the store),
    ``before`` or after it; ``stall``: A stops there for two leases instead, then runs on."""

    method: str
    nth: int
    before: bool
    stall: bool = False

    @property
    def name(self) -> str:
        how = "stall" if self.stall else ("kill-before" if self.before else "kill-after")
        return f"{how}:{self.method}#{self.nth}"


@dataclass
class Replica:
    name: str
    loop: ControlLoop
    alive: bool = True


@dataclass
class World:
    clock: FakeClock
    sim: SimCluster
    store: SqlStore
    commands: list[tuple[str, str]] = field(default_factory=list)
    """Every scheduler command that reached the cluster: (name, job)."""


class Scheduler:
    """The simulated scheduler as one replica sees it: records commands, dies at its point."""

    def __init__(self, world: World, point: Point | None, stall: Callable[[], None]) -> None:
        self._world = world
        self._inner = world.sim.scheduler
        self._point = point
        self._stall = stall
        self._calls: Counter[str] = Counter()

    @property
    def cluster(self) -> ClusterName:
        return self._inner.cluster

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self._inner, name)
        if name not in MUTATING:
            return inner

        def call(*args: Any) -> Any:
            def issue() -> Any:
                result = inner(*args)
                self._world.commands.append((name, str(args[0])))
                return result

            return _at_point(self._point, self._calls, name, self._stall, issue)

        return call


class Store:
    """The shared store as one replica sees it: its writes die at the point."""

    def __init__(self, inner: SqlStore, point: Point | None, stall: Callable[[], None]) -> None:
        self._inner = inner
        self._point = point
        self._stall = stall
        self._calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self._inner, name)
        if name not in STORE_WRITES:
            return inner

        def call(*args: Any, **kwargs: Any) -> Any:
            return _at_point(
                self._point, self._calls, name, self._stall, lambda: inner(*args, **kwargs)
            )

        return call


ARMED = threading.Event()
"""Set once the fault is in the job: the points count the calls of the recovery only."""


def _at_point(
    point: Point | None,
    calls: Counter[str],
    name: str,
    stall: Callable[[], None],
    run: Callable[[], Any],
) -> Any:
    if not ARMED.is_set():
        return run()
    calls[name] += 1
    hit = point is not None and point.method == name and point.nth == calls[name]
    if hit and point is not None and point.before and not point.stall:
        raise Killed(point.name)
    result = run()
    if hit and point is not None:
        if point.stall:
            stall()
        else:
            raise Killed(point.name)
    return result


def _loop(
    world: World, name: str, settings: Settings, scheduler: Any, store: Any, fenced: bool
) -> ControlLoop:
    base = world.clock.now()

    def monotonic() -> float:
        return (world.clock.now() - base).total_seconds()

    keepers = (
        [
            LeaseKeeper(
                world.store,
                lease,
                clock=world.clock,
                ttl_seconds=TTL,
                holder=name,
                monotonic=monotonic,
            )
            for lease in (loop_lease(CLUSTER), controller_lease(CLUSTER))
        ]
        if fenced
        else [None, None]
    )
    return ControlLoop(
        scheduler=scheduler,
        logs=world.sim.logs,
        store=store,
        modes=world.store,
        diagnoser=SignatureDiagnoser(),
        clock=world.clock,
        metrics=NullMetrics(),
        settings=settings,
        lease=keepers[0],
        controller_lease=keepers[1],
    )


def _fresh(url: str) -> SqlStore:
    """An empty store at ``url`` (tables dropped first)."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    else:
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            for table in (*reversed(MEDIC_TABLES), "alembic_version"):
                sa.Table(table, sa.MetaData()).drop(conn, checkfirst=True)
            if engine.dialect.name == "postgresql":  # the audit trail's append-only trigger
                conn.exec_driver_sql("DROP FUNCTION IF EXISTS medic_audit_append_only()")
        engine.dispose()
    return create_store(url)


def run_fault(url: str, point: Point | None, *, fenced: bool = True) -> dict[str, Any]:
    """One recovery with replica A killed (or stalled) at ``point``; what it left behind."""
    clock = FakeClock()
    store = _fresh(url)
    world = World(clock, SimCluster(clock, SIM, cluster=CLUSTER), store)
    settings = Settings(scheduler=SchedulerSettings(cluster=CLUSTER, mode=Mode.ACT), sim=SIM)
    b_scheduler = Scheduler(world, None, lambda: None)
    b = Replica("b", _loop(world, "b", settings, b_scheduler, store, fenced))

    def stall() -> None:  # A frozen here: B runs alone for two leases
        _passes(world, [b], 2 * TTL)

    a = Replica(
        "a",
        _loop(
            world, "a", settings, Scheduler(world, point, stall), Store(store, point, stall), fenced
        ),
    )
    try:
        job = world.sim.workload.submit(JobSpec("train", 2, "p0"))
        _passes(world, [a, b], 13.0)
        node = world.sim.scheduler.get_job(job).nodes[-1]
        world.sim.fault_injector.inject(FaultKind.GPU_FELL_OFF_BUS, job, node)
        ARMED.set()
        killed_at = _passes(world, [a, b], 30.0)
        _passes(world, [a, b], 2 * TTL)
        return _outcome(world, job, node, killed_at, a)
    finally:
        ARMED.clear()
        store.close()


def _passes(world: World, replicas: list[Replica], seconds: float) -> datetime | None:
    """Passes every STEP; the (virtual) time a replica was killed, if one was."""
    killed = None
    for _ in range(round(seconds / STEP)):
        world.clock.advance(STEP)
        for replica in replicas:
            if not replica.alive:
                continue
            try:
                replica.loop.run_once()
            except Killed:
                replica.alive = False
                killed = world.clock.now()
    return killed


def _outcome(
    world: World, job: JobId, bad: NodeName, killed_at: datetime | None, a: Replica
) -> dict[str, Any]:
    store = world.store
    counts = Counter(name for name, target in world.commands if target == job)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    steps = [r for r in store.list_actions(CLUSTER, job) if r.node is None]
    started = [r for r in steps if r.status is ActionStatus.STARTED]
    events = store.query_audit(cluster=CLUSTER, job_id=job, limit=100_000)
    starts = Counter(e.payload.get("key") for e in events if e.kind is AuditKind.ACTION_STARTED)
    outcomes = Counter(
        e.payload.get("key")
        for e in events
        if e.kind in (AuditKind.ACTION_SUCCEEDED, AuditKind.ACTION_FAILED, AuditKind.ACTION_SKIPPED)
    )
    # an action started without its outcome (ledger or trail), or a ledger step without its audit
    unaudited = [r for r in steps if r.status is not ActionStatus.SKIPPED and not starts[r.key]]
    lost = len(started) + sum(max(0, n - outcomes[k]) for k, n in starts.items()) + len(unaudited)
    advice = next((x for x in store.list_advice(cluster=CLUSTER) if x.job_id == job), None)
    now = world.sim.scheduler.get_job(job)
    converged = (
        advice is not None
        and advice.status is Reconciliation.CONVERGED
        and now.restart_count == 1
        and not now.held
        and bad in now.excluded_nodes
    )
    failover = None
    if killed_at is not None:  # the kill -> B's first step in the ledger (B's token is 2)
        firsts = [r.started_at for r in steps if r.holder == "b" and r.started_at >= killed_at]
        firsts += [e.time for e in events if e.payload.get("token") == 2 and e.time >= killed_at]
        failover = (min(firsts) - killed_at).total_seconds() if firsts else None
    return {
        "duplicate_actions": duplicates,
        "lost_audit_records": lost,
        "completed": converged,
        "held": now.held,
        "failover_s": failover,
        "killed": not a.alive,
    }


def faults() -> list[Point]:
    """27 points, counted from the fault on: before and after each scheduler command, each of
    the first three ledger begins and finishes, the first six audit writes, and a stall right
    after each of the first three ledger begins."""
    commands = ("requeue_hold", "set_excluded_nodes", "release")
    points = [Point(m, 1, before) for m in commands for before in (True, False)]
    for method in ("begin_action", "finish_action"):
        points += [Point(method, n, before) for n in (1, 2, 3) for before in (True, False)]
    points += [Point("append_audit", n, True) for n in range(1, 7)]
    points += [Point("begin_action", n, False, stall=True) for n in (1, 2, 3)]
    return points


def racing_requests(url: str, ids: int, approvals: int) -> dict[str, Any]:
    """Two stores sending each of ``ids`` request ids at once; then ``approvals`` concurrent
    approvals of one pending repair."""
    first = _fresh(url)
    second = create_store(url)
    now = datetime(2026, 12, 4, tzinfo=UTC)
    try:

        def send(pair: tuple[SqlStore, int]) -> bool:
            store, i = pair
            request = RepairRequest(
                cluster=CLUSTER,
                node=NodeName(f"n{i:05d}"),
                action=RepairAction.REBOOT,
                requested_by="chaos-detector",
                requester_kind=RequesterKind.DETECTOR,
                reason="bench",
                alert_keys=(f"k{i}",),
                request_id=f"req-{i}",
            )
            return store.create_repair(request, state=RepairState.PENDING_APPROVAL, now=now)[1]

        started = time.perf_counter()
        work = [(s, i) for i in range(ids) for s in (first, second)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            created = list(pool.map(send, work))
        seconds = time.perf_counter() - started
        repairs = first.list_repairs(cluster=CLUSTER)
        per_id = Counter(r.request_id for r in repairs)
        duplicate_repairs = sum(n - 1 for n in per_id.values() if n > 1) + (ids - len(per_id))

        target = repairs[0]
        wins = []

        def approve(store: SqlStore) -> bool:
            try:
                store.transition_repair(
                    target.id, RepairState.PENDING_APPROVAL, RepairState.APPROVED, now
                )
            except ConflictError:
                return False
            return True

        with ThreadPoolExecutor(max_workers=16) as pool:
            wins = list(pool.map(approve, [first, second] * (approvals // 2)))
        return {
            "requests": len(work),
            "created": sum(created),
            "duplicate_repairs": duplicate_repairs,
            "requests_per_s": round(len(work) / seconds),
            "approvals": len(wins),
            "approvals_won": sum(wins),
        }
    finally:
        first.close()
        second.close()


def bench(url: str, quick: bool) -> dict[str, Any]:
    points = faults()[:6] if quick else faults()
    results = {p.name: run_fault(url, p) for p in points}
    # The reference: the same stalls with no lease (what medic did before leases)
    stalls = [p for p in faults() if p.stall]
    unfenced = [run_fault(url, p, fenced=False) for p in stalls]
    failovers = sorted(r["failover_s"] for r in results.values() if r["failover_s"] is not None)
    race = racing_requests(url, 500 if quick else 5000, 100 if quick else 1000)
    return {
        "faults_injected": len(points),
        "duplicate_actions": sum(r["duplicate_actions"] for r in results.values()),
        "duplicate_repairs": race["duplicate_repairs"],
        "lost_audit_records": sum(r["lost_audit_records"] for r in results.values()),
        "completed_pct": round(
            100 * sum(r["completed"] for r in results.values()) / len(points), 1
        ),
        "jobs_left_held": sum(r["held"] for r in results.values()),
        "failover_p50_s": statistics.median(failovers) if failovers else None,
        "failover_p99_s": failovers[min(len(failovers) - 1, round(0.99 * (len(failovers) - 1)))]
        if failovers
        else None,
        "racing": race,
        "unfenced_reference": {
            "faults_injected": len(stalls),
            "duplicate_actions": sum(r["duplicate_actions"] for r in unfenced),
        },
        "failed_points": sorted(
            k
            for k, r in results.items()
            if r["duplicate_actions"] or r["lost_audit_records"] or not r["completed"] or r["held"]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 fault points, 1,000 requests")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": f"sqlite:///{Path(tmp) / 'chaos.db'}"}
        for name, env in (
            ("postgresql", "MEDIC_TEST_POSTGRES_URL"),
            ("mysql", "MEDIC_TEST_MYSQL_URL"),
        ):
            if os.environ.get(env):
                urls[name] = os.environ[env]
        out: dict[str, Any] = {}
        for name, url in urls.items():
            print(f"== {name}", file=sys.stderr, flush=True)
            out[name] = bench(url, args.quick)
            print(json.dumps(out[name]), file=sys.stderr, flush=True)
    keys = (
        "faults_injected",
        "duplicate_actions",
        "duplicate_repairs",
        "lost_audit_records",
        "jobs_left_held",
    )
    overall: dict[str, Any] = {k: sum(v[k] for v in out.values()) for k in keys}
    overall["completed_pct"] = min(v["completed_pct"] for v in out.values())
    overall["failover_p99_s"] = max((v["failover_p99_s"] or 0.0) for v in out.values())
    out["overall"] = overall
    print(json.dumps(out))


if __name__ == "__main__":
    main()
