"""``medic demo``: a simulated 32-node cluster in act mode with a fault every few seconds.

Live view for people; ``--duration S --json`` runs headless and prints one JSON object.
``--nodes N --jobs J`` makes the cluster as large as wanted (12,500 nodes is a 100,000-GPU
cluster): beyond :data:`ROWS_SHOWN` jobs the live view shows counts, not one row per job, and the
simulated jobs print what a real large job prints (the ``production`` log profile).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table

from medic.cli.common import settings_of
from medic.control.tasks import LoopThread
from medic.demo import DemoDriver
from medic.domain.cluster import Job
from medic.services import Services
from medic.wiring import build

__all__ = ["DEMO_OVERRIDES", "ROWS_SHOWN", "register", "size_overrides"]

ROWS_SHOWN = 12
"""Jobs listed one per row in the live view; a larger demo shows counts."""

DEMO_NODES = 32
# Shorter thresholds than production so hangs and stragglers show within the demo's minutes;
# crash detection runs on the defaults.
DEMO_OVERRIDES: dict[str, object] = {
    "scheduler.mode": "act",
    "scheduler.cluster": "demo",
    "sim.nodes": DEMO_NODES,
    "sim.jobs": 6,
    "sim.nccl_timeout_seconds": 20.0,
    "sim.node_repair_seconds": 45.0,
    "detect.hang_floor_seconds": 6.0,
    "detect.straggler_seconds": 8.0,
    # the simulator heals a node in 45 s: its log-line alerts clear a minute or so later
    "repair.alert_clear_seconds": 60.0,
    "repair.critical_alert_clear_seconds": 90.0,
}


def size_overrides(nodes: int | None, jobs: int | None) -> dict[str, object]:
    """Settings for a demo of ``nodes`` nodes and ``jobs`` jobs (None: the default size): up to
    four nodes per job, leaving a sixth of the cluster free for requeues; two partitions."""
    if nodes is None and jobs is None:
        return {}
    n = nodes if nodes is not None else DEMO_NODES
    j = jobs if jobs is not None else max(1, n // 6)
    if j > n:
        raise typer.BadParameter(f"{j} jobs do not fit on {n} nodes", param_hint="--jobs")
    per_job = max(1, min(4, (n * 5 // 6) // j))
    overrides: dict[str, object] = {
        "sim.nodes": n,
        "sim.jobs": j,
        "sim.nodes_per_job": per_job,
        "sim.partitions": min(2, n),
    }
    if j > ROWS_SHOWN:
        overrides["sim.log_profile"] = "production"
    return overrides


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        ctx: typer.Context,
        duration: Annotated[
            float | None, typer.Option("--duration", min=1, help="Stop after this many seconds.")
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="No live view; print one JSON object at the end.")
        ] = False,
        fault_every: Annotated[
            float, typer.Option("--fault-every", min=0.5, help="Seconds between faults.")
        ] = 4.0,
        database: Annotated[
            str | None, typer.Option("--database", help="Database URL (default: a fresh file).")
        ] = None,
        nodes: Annotated[
            int | None, typer.Option("--nodes", min=1, help="Simulated nodes (default 32).")
        ] = None,
        jobs: Annotated[
            int | None,
            typer.Option("--jobs", min=1, help="Training jobs kept running (default: nodes / 6)."),
        ] = None,
    ) -> None:
        """Watch medic detect injected faults and recover jobs in act mode (Ctrl-C stops)."""
        if as_json and duration is None:
            raise typer.BadParameter("--json needs --duration", param_hint="--json")
        url = database or f"sqlite:///{Path(tempfile.mkdtemp(prefix='medic-demo-')) / 'demo.db'}"
        overrides = {**DEMO_OVERRIDES, **size_overrides(nodes, jobs), "store.url": url}
        settings = settings_of(ctx, **overrides)
        services = build(settings)  # the driver submits and tops up the jobs itself
        driver = DemoDriver(services, fault_every=fault_every, seed=settings.sim.seed)
        thread = LoopThread(services.loop)
        thread.start()
        try:
            if as_json:
                _run_headless(driver, duration or 0.0)
            else:
                _run_live(services, driver, duration)
        except KeyboardInterrupt:
            pass
        finally:
            thread.stop()
            services.close()
        if as_json:
            typer.echo(json.dumps(driver.summary().headline()))
        else:
            typer.echo(json.dumps(driver.summary().headline(), indent=2))
            typer.echo(f"audit trail: MEDIC_DATABASE_URL={url} medic audit")


def _run_headless(driver: DemoDriver, duration: float) -> None:
    stop = threading.Event()
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline and not stop.wait(0.1):
        driver.tick()


def _run_live(services: Services, driver: DemoDriver, duration: float | None) -> None:
    deadline = time.monotonic() + duration if duration else None
    with Live(_view(services, driver), refresh_per_second=4, screen=False) as live:
        while deadline is None or time.monotonic() < deadline:
            driver.tick()
            live.update(_view(services, driver))
            time.sleep(0.25)


def _repairs_line(services: Services) -> str:
    """Node repair's side: degraded nodes and the repairs by state (they wait for a person)."""
    if services.repairs is None:
        return ""
    degraded = sorted(str(n) for n in services.repairs.health())
    repairs = services.repair_store.list_repairs(cluster=services.cluster)
    counts = Counter(r.state.value for r in repairs)
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"
    return f"\nnode repair: degraded {', '.join(degraded) or '-'}; repairs: {states}"


def _view(services: Services, driver: DemoDriver) -> Group:
    listed = list(services.scheduler.list_jobs())
    nodes = list(services.scheduler.list_nodes())
    bad = [n for n in nodes if not n.state.is_usable]
    if len(listed) > ROWS_SHOWN:
        jobs: Table | str = _job_counts(services, listed)
        out = Counter(n.state.value for n in bad)
        detail = ", ".join(f"{count} {state}" for state, count in sorted(out.items()))
    else:
        jobs = _job_rows(services, listed)
        detail = ", ".join(f"{n.name} ({n.state.value})" for n in bad)
    health = f"nodes: {len(nodes)} total, {len(nodes) - len(bad)} usable; " + (
        "out: " + detail if bad else "all usable"
    )
    health += _repairs_line(services)
    report = services.loop.last_report
    if report is not None:
        health += (
            f"\nlast loop pass: {report.seconds:.3f} s, {report.jobs} jobs, {report.lines} lines"
        )
    faults = Table(title="Faults and recoveries (latest 12)")
    for col in ("fault", "job", "node", "detected as", "verdict", "detect s", "act s", "outcome"):
        faults.add_column(col)
    for o in driver.outcomes[-12:]:
        faults.add_row(
            o.fault.kind.value,
            o.fault.job_id,
            o.fault.node or "-",
            o.signature or "-",
            o.verdict or "-",
            _fmt(o.detection_latency),
            _fmt(o.action_latency),
            o.outcome,
        )
    s = driver.summary()
    totals = (
        f"faults {s.faults_injected}  detected {s.detected}  recovered {s.recovered}  "
        f"stopped {s.stopped}  detection p50 {_fmt(s.detection_latency_p50_s)} s  "
        f"action p50 {_fmt(s.action_latency_p50_s)} s   (Ctrl-C to stop)"
    )
    return Group(jobs, health, faults, totals)


def _job_rows(services: Services, listed: list[Job]) -> Table:
    jobs = Table(title=f"Jobs on simulated cluster '{services.cluster}' (act mode)")
    for col in ("job", "state", "attempt", "nodes", "excluded"):
        jobs.add_column(col)
    for j in listed:
        if j.state.value in ("running", "pending"):
            jobs.add_row(
                j.id,
                j.state.value,
                str(j.restart_count),
                ",".join(j.nodes) or "-",
                ",".join(sorted(j.excluded_nodes)) or "-",
            )
    return jobs


def _job_counts(services: Services, listed: list[Job]) -> str:
    """One line for a cluster too large to list: jobs by state, restarts, exclusions."""
    states = Counter(j.state.value for j in listed)
    by_state = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    restarts = sum(j.restart_count for j in listed)
    excluded = sum(1 for j in listed if j.excluded_nodes)
    return (
        f"Jobs on simulated cluster '{services.cluster}' (act mode): {len(listed)} ({by_state});"
        f" {restarts} restarts, {excluded} with nodes excluded"
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
