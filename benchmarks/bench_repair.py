"""Benchmark: node auto-repair under an alert storm on a 10,000-node cluster.

Run: ``.venv/bin/python benchmarks/bench_repair.py`` (``--nodes``, ``--storm``, ``--seconds``).
On SQLite (a temporary file) and, when ``MEDIC_TEST_POSTGRES_URL`` names a disposable database,
on PostgreSQL too (in a database of its own, created next to it and dropped after). The
engine (``medic.repair.engine.RepairEngine``) runs against the simulated cluster in virtual
time; what is measured is the wall time it spends. Phases per database:

* ``storm``: ``--storm`` (20%) of the nodes report an Xid 79 spread over ``--seconds`` (60) of
  virtual time, one engine pass per virtual second with that second's kernel lines, the default
  policy (approve before repair: every alert becomes a pending recommendation at once). Figures:
  alerts absorbed per second (alerts / wall time of the passes), pass time p50/p99, and the
  latency from the start of the pass that read an alert's line to its recommendation being
  stored, p50/p99 (in production add up to one loop interval, 0.2 s by default, for the line to
  be read).
* ``burst``: the same number of alerts in one single pass: the most the engine absorbs at once
  (every alert is recorded in that pass; recommendations follow at most
  ``repair.max_recommendations_per_pass`` (100) a pass, so passes stay short), and how long until
  every one is recommended.
* ``auto``: the storm again with Xid 79 approved automatically (budget 5% of nodes and one repair
  per partition of 200 nodes at a time, breaker 10%), passes going on until every alerting node
  has its recommendation and no repair is in flight: repairs carried out on the simulator until
  the breaker trips; how many ran automatically, how many wait for a person, and the pass time
  with the lifecycle at work.
* ``reference``: the plain approach in the same run: one INSERT per alert into a bare table, each
  in its own transaction (no deduplication, no policy, no audit).

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from medic.config.settings import RepairSettings, SimSettings
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.diagnosis import Detection
from medic.domain.ids import ClusterName, NodeName
from medic.domain.logs import LogLine, LogStream
from medic.domain.repairs import RepairPolicy, RepairRequest, RepairState
from medic.repair.engine import RepairEngine
from medic.schedulers.sim import SimCluster
from medic.store import SqlStore, create_store
from medic.testing import FakeClock

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class TimedStore:
    """The store, noting the wall time at which each node's repair was created."""

    def __init__(self, inner: SqlStore) -> None:
        self._inner = inner
        self.created: dict[str, float] = {}

    def create_repair(self, request: RepairRequest, **kw: Any) -> Any:
        found = self._inner.create_repair(request, **kw)
        self.created.setdefault(request.node, time.perf_counter())
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _detections(
    diagnoser: SignatureDiagnoser, nodes: Sequence[str], when: datetime
) -> list[Detection]:
    lines = [
        LogLine(LogStream.KERNEL, XID79, when, NodeName(n), None, None, i)
        for i, n in enumerate(nodes)
    ]
    return diagnoser.scan(lines)


def _cluster(nodes: int) -> tuple[FakeClock, SimCluster, ClusterName]:
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    name = ClusterName(f"bench-{uuid.uuid4().hex[:8]}")
    sim_settings = SimSettings(nodes=nodes, partitions=max(1, nodes // 200), jobs=0)
    return clock, SimCluster(clock, sim_settings, cluster=name), name


def _settled(store: SqlStore, cluster: ClusterName, alerts: int) -> bool:
    """Every alerting node has its recommendation and no approved repair is unfinished."""
    repairs = store.list_repairs(cluster=cluster)
    waiting = RepairState.PENDING_APPROVAL
    in_flight = [r for r in repairs if not r.state.is_terminal and r.state is not waiting]
    return len({r.node for r in repairs}) >= alerts and not in_flight


def run_storm(
    url: str,
    nodes: int,
    fraction: float,
    seconds: int,
    *,
    policy: RepairPolicy,
    burst: bool,
    settle: int = 900,
) -> dict[str, Any]:
    """One phase; ``settle``: passes allowed after the storm until every alerting node has its
    recommendation and no approved repair is unfinished."""
    clock, sim, cluster = _cluster(nodes)
    store = create_store(url)
    try:
        store.put_repair_policy(cluster, policy)
        timed = TimedStore(store)
        engine = RepairEngine(
            store=timed,  # type: ignore[arg-type]
            scheduler=sim.scheduler,
            provider=sim.node_provider,
            clock=clock,
            settings=RepairSettings(),
        )
        diagnoser = SignatureDiagnoser()
        names = [n.name for n in sim.scheduler.list_nodes()]
        step = max(1, round(1 / fraction))
        storm = names[::step][: round(nodes * fraction)]
        batches = [storm] if burst else [storm[i::seconds] for i in range(seconds)]
        engine.run_pass(sim.scheduler.list_nodes(), [], [])  # primes what fired before
        start = clock.now()
        passes, latencies, absorbed = [], [], 0.0
        pass_start: dict[float, list[str]] = {}
        first_start: float | None = None
        for batch in batches + [[]] * settle:
            if not batch and _settled(store, cluster, len(storm)):
                break
            clock.advance(1.0)
            listed = sim.scheduler.list_nodes()
            found = _detections(diagnoser, batch, clock.now())
            started = time.perf_counter()
            engine.run_pass(listed, [], found)
            spent = time.perf_counter() - started
            passes.append(spent)
            first_start = first_start or started
            if batch:
                absorbed += spent
                pass_start[started] = batch
        for started, batch in pass_start.items():
            latencies += [timed.created[n] - started for n in batch if n in timed.created]
        everything = max(timed.created.values(), default=first_start or 0.0) - (first_start or 0)
        repairs = store.list_repairs(cluster=cluster)
        states = Counter(r.state.value for r in repairs)
        breaker = store.get_breaker(cluster)
        auto = sum(1 for r in repairs if r.approved_by == "auto")
        return {
            "alerts": len(storm),
            "passes": len(passes),
            "alerts_per_second": round(len(storm) / absorbed, 1),
            "all_recommended_after_s": round(everything, 2),
            "pass_p50_ms": round(1000 * percentile(passes, 50), 1),
            "pass_p99_ms": round(1000 * percentile(passes, 99), 1),
            "pass_max_ms": round(1000 * max(passes), 1),
            "latency_p50_ms": round(1000 * percentile(latencies, 50), 1),
            "latency_p99_ms": round(1000 * percentile(latencies, 99), 1),
            "recommended": len(repairs),
            "automatic": auto,
            "states": dict(sorted(states.items())),
            "breaker_tripped": breaker.tripped,
            "alerts_waiting_for_budget": len(storm) - len({r.node for r in repairs}),
            "virtual_seconds": round((clock.now() - start).total_seconds()),
        }
    finally:
        store.close()


def run_reference(url: str, alerts: int) -> dict[str, Any]:
    """One INSERT per alert, its own transaction, into a bare table: no dedupe, no policy."""
    engine = sa.create_engine(url)
    table = sa.Table(
        f"bench_ref_alerts_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64)),
        sa.Column("node", sa.String(64)),
        sa.Column("key", sa.String(128)),
        sa.Column("evidence", sa.JSON),
        sa.Column("seen", sa.DateTime(timezone=True)),
    )
    table.create(engine)
    try:
        now = datetime.now(UTC)
        started = time.perf_counter()
        for i in range(alerts):
            row = {
                "cluster": "ref",
                "node": f"node{i:05d}",
                "key": "xid:79",
                "evidence": {"xid": 79, "line": XID79},
                "seen": now,
            }
            with engine.begin() as conn:
                conn.execute(sa.insert(table).values(row))
        spent = time.perf_counter() - started
        return {"alerts": alerts, "alerts_per_second": round(alerts / spent, 1)}
    finally:
        table.drop(engine)
        engine.dispose()


def run_database(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    approve = RepairPolicy()  # approve before repair: every alert -> a pending recommendation
    auto = RepairPolicy(auto_xids=frozenset({79}), cooldown_seconds=0)
    storm = run_storm(url, args.nodes, args.storm, args.seconds, policy=approve, burst=False)
    print(f"{name} storm: {storm}", flush=True)
    burst = run_storm(url, args.nodes, args.storm, args.seconds, policy=approve, burst=True)
    print(f"{name} burst: {burst}", flush=True)
    automatic = run_storm(url, args.nodes, args.storm, args.seconds, policy=auto, burst=False)
    print(f"{name} auto: {automatic}", flush=True)
    reference = run_reference(url, storm["alerts"])
    print(f"{name} reference: {reference}", flush=True)
    return {
        "storm": storm,
        "burst": burst,
        "auto": automatic,
        "reference": reference,
        "overhead_vs_reference": round(
            reference["alerts_per_second"] / storm["alerts_per_second"], 1
        ),
    }


@contextlib.contextmanager
def _own_database(url: str) -> Iterator[str]:
    """A database of its own next to ``url``'s (other test runs may reset that one meanwhile)."""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    name = f"medic_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--storm", type=float, default=0.2, help="fraction of nodes alerting")
    parser.add_argument("--seconds", type=int, default=60, help="virtual seconds of the storm")
    args = parser.parse_args()
    results: dict[str, Any] = {"nodes": args.nodes, "storm_fraction": args.storm}
    with tempfile.TemporaryDirectory(prefix="medic-bench-repair-") as tmp:
        sqlite = f"sqlite:///{Path(tmp) / 'medic.db'}"
        results["sqlite"] = run_database("sqlite", sqlite, args)
    postgres = os.environ.get("MEDIC_TEST_POSTGRES_URL")
    if postgres:
        with _own_database(postgres) as url:
            results["postgresql"] = run_database("postgresql", url, args)
    results["cpu_count"] = os.cpu_count()
    results["python"] = platform.python_version()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
