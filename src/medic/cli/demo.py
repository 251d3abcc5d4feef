"""``medic demo``: a simulated 32-node cluster in act mode with a fault every few seconds.

Live view for people; ``--duration S --json`` runs headless and prints one JSON object.
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
from medic.services import Services
from medic.wiring import build

__all__ = ["DEMO_OVERRIDES", "register"]

# Shorter thresholds than production so hangs and stragglers show within the demo's minutes;
# crash detection runs on the defaults.
DEMO_OVERRIDES: dict[str, object] = {
    "scheduler.mode": "act",
    "scheduler.cluster": "demo",
    "sim.nodes": 32,
    "sim.jobs": 6,
    "sim.nccl_timeout_seconds": 20.0,
    "sim.node_repair_seconds": 45.0,
    "detect.hang_floor_seconds": 6.0,
    "detect.straggler_seconds": 8.0,
    # the simulator heals a node in 45 s: its log-line alerts clear a minute or so later
    "repair.alert_clear_seconds": 60.0,
    "repair.critical_alert_clear_seconds": 90.0,
}


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
    ) -> None:
        """Watch medic detect injected faults and recover jobs in act mode (Ctrl-C stops)."""
        if as_json and duration is None:
            raise typer.BadParameter("--json needs --duration", param_hint="--json")
        url = database or f"sqlite:///{Path(tempfile.mkdtemp(prefix='medic-demo-')) / 'demo.db'}"
        settings = settings_of(ctx, **DEMO_OVERRIDES, **{"store.url": url})
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
    jobs = Table(title=f"Jobs on simulated cluster '{services.cluster}' (act mode)")
    for col in ("job", "state", "attempt", "nodes", "excluded"):
        jobs.add_column(col)
    for j in services.scheduler.list_jobs():
        if j.state.value in ("running", "pending"):
            jobs.add_row(
                j.id,
                j.state.value,
                str(j.restart_count),
                ",".join(j.nodes) or "-",
                ",".join(sorted(j.excluded_nodes)) or "-",
            )
    nodes = list(services.scheduler.list_nodes())
    bad = [f"{n.name} ({n.state.value})" for n in nodes if not n.state.is_usable]
    health = f"nodes: {len(nodes)} total, {len(nodes) - len(bad)} usable; " + (
        "out: " + ", ".join(bad) if bad else "all usable"
    )
    health += _repairs_line(services)
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


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
