"""Benchmark: how fast medic detects a fault and acts on it, and what one loop pass costs at scale.

Run: ``.venv/bin/python benchmarks/bench_loop.py`` (``make bench``). Three phases, each in its own
process so peak RSS is per phase:

* ``latency``: the simulated cluster in real time with medic's default settings in act mode
  (the simulator is given 128 nodes so injected hardware faults never run it out of healthy
  nodes). One fault every ``--fault-every`` seconds on a running job, over all crash kinds
  (Xid 79, ECC, IB link down, node failure, application bug, CUDA OOM) until ``--faults`` are
  in, plus a few hangs (default hang floor: 60 s). Measured from the store against the
  injector's ground truth: fault injected -> first detection/verdict stored, and detection ->
  first scheduler action done.
* ``reference``: the plain approach, measured in the same run on the same simulator: a watcher
  that polls the scheduler at the same interval and notices a failure only when the job leaves
  RUNNING (what a sacct/squeue cron does). medic runs in observe mode there so it does not
  intervene. The simulator's NCCL timeout is 30 s (real PyTorch: 600 s), so this reference is
  generous to the plain approach.
* ``scale``: 2,000 nodes and 300 running jobs, one fault a second, medic in act mode: time per
  loop pass (p50/p99, first pass separately) and peak RSS.

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from medic.config.loading import load_settings
from medic.control.tasks import LoopThread
from medic.demo import DemoDriver, percentile
from medic.domain.cluster import JobState
from medic.domain.faults import FaultKind
from medic.wiring import build

CRASH_KINDS = (
    FaultKind.GPU_FELL_OFF_BUS,
    FaultKind.ECC_DBE,
    FaultKind.IB_LINK_DOWN,
    FaultKind.NODE_FAIL,
    FaultKind.APP_BUG,
    FaultKind.CUDA_OOM,
)
NVIDIA_RECOVERY_MEAN_S = {"detect": 69.0, "act": 94.0}  # published, unconfirmed (reference docs)


def _settings(db: Path, **overrides: object):  # type: ignore[no-untyped-def]
    return load_settings(env={}, overrides={"store.url": f"sqlite:///{db}", **overrides})


def phase_latency(args: argparse.Namespace) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="medic-bench-"))
    settings = _settings(
        tmp / "latency.db",
        **{
            "scheduler.mode": "act",
            "sim.nodes": 128,
            "sim.jobs": 16,
            "sim.node_repair_seconds": 20.0,
        },
    )
    services = build(settings)
    crash = DemoDriver(
        services,
        fault_every=args.fault_every,
        kinds=CRASH_KINDS,
        seed=7,
        max_faults=args.faults + args.hangs,
    )
    thread = LoopThread(services.loop)
    thread.start()
    hangs_injected = 0
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        crash.tick()
        running = [j for j in services.scheduler.list_jobs() if j.state is JobState.RUNNING]
        if hangs_injected < args.hangs and len(crash.outcomes) >= 2 + 4 * hangs_injected:
            busy = {o.fault.job_id for o in crash.outcomes if o.outcome == "open"}
            # A job whose rhythm is known (running >= 10 s): the steady-state hang threshold.
            settled = services.clock.now() - timedelta(seconds=10)
            free = [
                j
                for j in running
                if j.id not in busy and j.start_time is not None and j.start_time <= settled
            ]
            if free:
                crash.outcomes.append(_inject_hang(services, free[0]))
                hangs_injected += 1
        done = [o for o in crash.outcomes if o.outcome != "open"]
        if len(crash.outcomes) >= args.faults + args.hangs and len(done) == len(crash.outcomes):
            break
        time.sleep(0.05)
    thread.stop()
    services.close()
    outcomes = crash.outcomes
    det = [o.detection_latency for o in outcomes if o.detection_latency is not None]
    act = [o.action_latency for o in outcomes if o.action_latency is not None]
    crash_only = [o for o in outcomes if o.fault.kind is not FaultKind.HANG]
    cdet = [o.detection_latency for o in crash_only if o.detection_latency is not None]
    cact = [o.action_latency for o in crash_only if o.action_latency is not None]
    summary = crash.summary()
    return {
        "faults": len(outcomes),
        "detected": len(det),
        "acted": len(act),
        "recovered": summary.recovered,
        "stopped": summary.stopped,
        "open": sum(o.outcome == "open" for o in outcomes),
        "crash_detection_p50_s": percentile(cdet, 50),
        "crash_detection_p99_s": percentile(cdet, 99),
        "crash_action_p50_s": percentile(cact, 50),
        "crash_action_p99_s": percentile(cact, 99),
        "all_detection_p50_s": percentile(det, 50),
        "all_detection_p99_s": percentile(det, 99),
        "all_action_p50_s": percentile(act, 50),
        "all_action_p99_s": percentile(act, 99),
        "per_kind": summary.per_kind,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _inject_hang(services, job):  # type: ignore[no-untyped-def]
    from medic.demo import FaultOutcome

    fault = services.injector.inject(FaultKind.HANG, job_id=job.id)
    return FaultOutcome(fault=fault, attempt=job.restart_count)


def phase_reference(args: argparse.Namespace) -> dict[str, object]:
    """Fault -> the job seen out of RUNNING by a scheduler poller (medic observing only)."""
    tmp = Path(tempfile.mkdtemp(prefix="medic-bench-"))
    settings = _settings(tmp / "ref.db", **{"sim.nodes": 128, "sim.jobs": 16})
    services = build(settings, start_workload=True)
    thread = LoopThread(services.loop)
    thread.start()
    interval = settings.loop.interval_seconds
    time.sleep(settings.sim.startup_seconds + 1.0)
    faults: dict[str, tuple[float, FaultKind]] = {}
    seen: dict[str, float] = {}
    kinds = [k for k in CRASH_KINDS if k is not FaultKind.NODE_FAIL] * 3  # node failure: no wait
    stop = threading.Event()
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline and (len(seen) < len(faults) or kinds):
        jobs = services.scheduler.list_jobs()
        now = time.monotonic()
        for j in jobs:
            if j.id in faults and j.id not in seen and j.state is not JobState.RUNNING:
                seen[j.id] = now - faults[j.id][0]
        running = [j for j in jobs if j.state is JobState.RUNNING and j.id not in faults]
        if kinds and running:
            kind = kinds.pop()
            services.injector.inject(kind, job_id=running[0].id)  # type: ignore[union-attr]
            faults[running[0].id] = (time.monotonic(), kind)
        stop.wait(interval)
    thread.stop()
    services.close()
    values = list(seen.values())
    return {
        "faults": len(faults),
        "noticed": len(values),
        "detection_p50_s": percentile(values, 50),
        "detection_p99_s": percentile(values, 99),
    }


def phase_scale(args: argparse.Namespace) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="medic-bench-"))
    settings = _settings(
        tmp / "scale.db",
        **{
            "scheduler.mode": "act",
            "sim.nodes": 2000,
            "sim.partitions": 1,
            "sim.jobs": 300,
            "sim.nodes_per_job": 6,
        },
    )
    services = build(settings, start_workload=True)
    driver = DemoDriver(services, fault_every=1.0, kinds=CRASH_KINDS, seed=3)
    passes: list[float] = []
    lines = 0
    first = services.loop.run_once()
    deadline = time.monotonic() + args.scale_seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        driver.tick()
        report = services.loop.run_once()
        passes.append(report.seconds)
        lines += report.lines
        time.sleep(max(0.0, settings.loop.interval_seconds - (time.monotonic() - started)))
    running = sum(j.state is JobState.RUNNING for j in services.scheduler.list_jobs())
    summary = driver.summary()
    services.close()
    return {
        "nodes": settings.sim.nodes,
        "running_jobs_at_end": running,
        "passes": len(passes),
        "first_pass_s": round(first.seconds, 4),
        "pass_p50_s": percentile(passes, 50),
        "pass_p99_s": percentile(passes, 99),
        "lines_per_pass_mean": round(lines / max(1, len(passes)), 1),
        "faults": summary.faults_injected,
        "detection_p50_s": summary.detection_latency_p50_s,
        "action_p50_s": summary.action_latency_p50_s,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


PHASES = {"latency": phase_latency, "reference": phase_reference, "scale": phase_scale}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=sorted(PHASES))
    parser.add_argument("--faults", type=int, default=54, help="crash faults in the latency phase")
    parser.add_argument("--hangs", type=int, default=3)
    parser.add_argument("--fault-every", type=float, default=1.0)
    parser.add_argument("--max-seconds", type=float, default=240.0)
    parser.add_argument("--scale-seconds", type=float, default=30.0)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(PHASES[args.phase](args)))
        return
    results: dict[str, object] = {}
    for name in ("latency", "reference", "scale"):
        cmd = [sys.executable, __file__, "--phase", name, *sys.argv[1:]]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"phase {name} failed:\n{proc.stderr}")
        out = proc.stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
        print(f"{name}: {results[name]}", flush=True)
    lat, ref = results["latency"], results["reference"]
    assert isinstance(lat, dict) and isinstance(ref, dict)
    results["ratios"] = {
        "plain_over_medic_detection_p50": _ratio(
            ref["detection_p50_s"], lat["crash_detection_p50_s"]
        ),
        "nvidia_recovery_mean_detect_over_medic_p50": _ratio(
            NVIDIA_RECOVERY_MEAN_S["detect"], lat["crash_detection_p50_s"]
        ),
        "nvidia_recovery_mean_act_over_medic_p50": _ratio(
            NVIDIA_RECOVERY_MEAN_S["act"], lat["crash_action_p50_s"]
        ),
    }
    print(json.dumps(results))


def _ratio(a: object, b: object) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float) and b > 0:
        return round(a / b, 1)
    return None


if __name__ == "__main__":
    main()
