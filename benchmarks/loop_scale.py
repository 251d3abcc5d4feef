"""The scale phase of ``bench_loop.py``: medic's own cost of one loop pass on a large cluster.

The simulator runs in medic's process, and at 12,500 nodes advancing it (generating lines, moving
jobs, building snapshots) costs about as much as medic's own work. So the phase runs on a clock
that measures medic alone (:class:`MedicClock`): it stops while the simulator works (the
simulator's ``meter`` hook) and while the benchmark's own driver injects faults and reads the
trail, and it jumps over the idle time to the next pass instead of sleeping. Everything medic
stamps (detections, verdicts, actions) is on that clock, and so is every pass time reported:
as if the cluster ran on other machines and cost medic nothing but reading it.

Log rates are the simulator's ``production`` profile (docs/simulator.md): one iteration line per
job per step from its last rank (``sim.iteration_seconds`` = 1 s here), NCCL INFO set-up lines
from every rank at start-up, about 1% harmless warnings, harmless kernel lines on four nodes a
minute per thousand nodes, and one crash fault a second over the crash kinds.
"""

from __future__ import annotations

import contextlib
import math
import resource
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from medic.config.loading import load_settings
from medic.demo import DemoDriver, percentile
from medic.domain.cluster import JobState
from medic.domain.faults import FaultKind
from medic.wiring import build

__all__ = ["MedicClock", "growth_exponent", "run_scale"]

CRASH_KINDS = (
    FaultKind.GPU_FELL_OFF_BUS,
    FaultKind.ECC_DBE,
    FaultKind.IB_LINK_DOWN,
    FaultKind.NODE_FAIL,
    FaultKind.APP_BUG,
    FaultKind.CUDA_OOM,
)
NODES_PER_JOB = 6
"""12,500 nodes / 2,000 jobs: 12,000 nodes busy, the rest free for requeues."""


class MedicClock:
    """Time that passes only while medic works: stopped inside :meth:`paused` (nestable), moved
    on by :meth:`skip` for the idle wait between passes."""

    def __init__(self, start: datetime | None = None) -> None:
        self._origin = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._base = 0.0
        """Seconds counted before the current running stretch."""
        self._since: float | None = time.perf_counter()
        self._depth = 0

    def elapsed(self) -> float:
        running = 0.0 if self._since is None else time.perf_counter() - self._since
        return self._base + running

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=self.elapsed())

    def skip(self, seconds: float) -> None:
        self._base += max(0.0, seconds)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        if self._depth == 0 and self._since is not None:
            self._base += time.perf_counter() - self._since
            self._since = None
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._since = time.perf_counter()


def growth_exponent(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(pass time) against log(size): 1.0 is linear growth."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    var = sum((x - mx) ** 2 for x, _ in pts)
    if var == 0:
        return None
    return round(sum((x - mx) * (y - my) for x, y in pts) / var, 3)


WARM_UP_SECONDS = 10.0
"""The cluster runs this long before medic's first pass: medic joins a cluster at work (the
start-up lines of its first jobs are behind it; those of every requeued attempt are not)."""


def run_scale(
    nodes: int,
    jobs: int,
    seconds: float,
    *,
    seed: int = 3,
    overrides: dict[str, object] | None = None,
) -> dict[str, Any]:
    """``seconds`` of medic's time on a cluster of ``nodes`` nodes with ``jobs`` jobs running;
    ``overrides``: more settings (``loop.skip_quiet_jobs``: false for the reference)."""
    tmp = Path(tempfile.mkdtemp(prefix="medic-bench-"))
    settings = load_settings(
        env={},
        overrides={
            "store.url": f"sqlite:///{tmp / 'scale.db'}",
            "scheduler.mode": "act",
            "sim.nodes": nodes,
            "sim.partitions": 1,
            "sim.jobs": jobs,
            "sim.nodes_per_job": max(1, min(NODES_PER_JOB, nodes // max(1, jobs))),
            "sim.iteration_seconds": 1.0,
            "sim.log_profile": "production",
            **(overrides or {}),
        },
    )
    clock = MedicClock()
    with clock.paused():
        services = build(settings, clock=clock, start_workload=True)
        sim = services.scheduler._sim  # type: ignore[attr-defined]  # the simulator behind the port
        sim.meter = clock.paused
        driver = DemoDriver(services, fault_every=1.0, kinds=CRASH_KINDS, seed=seed)
        clock.skip(WARM_UP_SECONDS)
        sim.advance()
        sim.read_new()  # what the cluster printed before medic started
    interval = settings.loop.interval_seconds
    first = services.loop.run_once()
    passes: list[float] = []
    lines = 0
    wall = time.perf_counter()
    end = clock.elapsed() + seconds
    while clock.elapsed() < end:
        with clock.paused():
            driver.tick()
            sim.advance()
        report = services.loop.run_once()
        passes.append(report.seconds)
        lines += report.lines
        clock.skip(interval - report.seconds)
    wall = time.perf_counter() - wall
    with clock.paused():
        driver.tick()  # read the trail for the last outcomes
        running = sum(j.state is JobState.RUNNING for j in services.scheduler.list_jobs())
        summary = driver.summary()
        services.close()
    busy = sum(passes)
    return {
        "nodes": nodes,
        "jobs": jobs,
        "running_jobs_at_end": running,
        "passes": len(passes),
        "first_pass_s": round(first.seconds, 4),
        "pass_p50_s": percentile(passes, 50),
        "pass_p99_s": percentile(passes, 99),
        "lines_per_s": round(lines / busy, 1) if busy else None,
        "lines_per_pass_mean": round(lines / max(1, len(passes)), 1),
        "faults": summary.faults_injected,
        "detected": summary.detected,
        "recovered": summary.recovered,
        "detection_p50_s": summary.detection_latency_p50_s,
        "detection_p99_s": summary.detection_latency_p99_s,
        "action_p50_s": summary.action_latency_p50_s,
        "action_p99_s": summary.action_latency_p99_s,
        "skip_quiet_jobs": settings.loop.skip_quiet_jobs,
        "wall_s": round(wall, 1),
        "workers": settings.loop.workers,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_worker_mb": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        ),
    }
