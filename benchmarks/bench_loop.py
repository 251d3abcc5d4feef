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
* ``scale``: ``--nodes`` (12,500) and ``--jobs`` (2,000) running, one crash fault a second,
  medic in act mode, production log rates, on a clock that counts medic's own time only
  (``benchmarks/loop_scale.py``): pass p50/p99, first pass, detection and action latency
  p50/p99, lines/s, peak RSS. ``--no-skip-quiet`` evaluates every job every pass (the reference).
* ``curve`` (not in the default run: about 15 minutes): the scale phase at ``--sizes``
  (1,000 / 4,000 / 12,500 / 25,000 / 100,000 nodes, jobs scaled with them), the reference up to
  ``--reference-max-nodes``, and the growth exponent of pass time against size.

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

sys.path.insert(0, str(Path(__file__).parent))
from loop_scale import CRASH_KINDS, growth_exponent, run_scale

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
    """One cluster size (``--nodes``, ``--jobs``), medic's own time (:mod:`loop_scale`)."""
    overrides: dict[str, object] = {"loop.workers": args.workers}
    if not args.skip_quiet:
        overrides["loop.skip_quiet_jobs"] = False
    return run_scale(args.nodes, args.jobs, args.scale_seconds, overrides=overrides)


def phase_curve(args: argparse.Namespace) -> dict[str, object]:
    """The scale phase at every size of ``--sizes`` (jobs: one per 6.25 nodes, 2,000 at 12,500),
    each in its own process; the reference (every job evaluated every pass) where it finishes
    within ``--reference-max-nodes``; the growth exponent of pass time against size."""
    points: dict[str, object] = {}
    two: dict[str, object] = {}
    reference: dict[str, object] = {}
    for nodes in (int(n) for n in args.sizes.split(",")):
        jobs = max(1, round(nodes * 0.16))
        common = ["--nodes", str(nodes), "--jobs", str(jobs)]
        common += ["--scale-seconds", str(args.scale_seconds)]
        runs = {"1 worker": (points, []), "2 workers": (two, ["--workers", "2"])}
        if nodes <= args.reference_max_nodes:
            runs["reference"] = (reference, ["--no-skip-quiet"])
        for label, (into, extra) in runs.items():
            into[str(nodes)] = _subphase("scale", [*common, *extra])
            print(f"{label} {nodes}: {into[str(nodes)]}", file=sys.stderr, flush=True)
    return {
        "one_worker": points,
        "two_workers": two,
        "reference_every_job_every_pass": reference,
        "growth_exponent_pass_p50": _exponent(points, "pass_p50_s"),
        "growth_exponent_pass_p99": _exponent(points, "pass_p99_s"),
        "growth_exponent_pass_p50_two_workers": _exponent(two, "pass_p50_s"),
        "reference_growth_exponent_pass_p50": _exponent(reference, "pass_p50_s"),
        "one_over_two_workers_pass_p50": {
            n: _ratio(_get(points[n], "pass_p50_s"), _get(two[n], "pass_p50_s")) for n in two
        },
        "reference_over_medic_pass_p50": {
            n: _ratio(_get(reference[n], "pass_p50_s"), _get(points[n], "pass_p50_s"))
            for n in reference
        },
    }


def _subphase(phase: str, extra: list[str]) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--phase", phase, *extra]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"phase {phase} {extra} failed:\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def _get(point: object, key: str) -> object:
    return point.get(key) if isinstance(point, dict) else None


def _exponent(points: dict[str, object], key: str) -> float | None:
    pairs = [(float(n), _get(p, key)) for n, p in points.items()]
    return growth_exponent([(n, float(v)) for n, v in pairs if isinstance(v, int | float)])


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


PHASES = {
    "latency": phase_latency,
    "reference": phase_reference,
    "scale": phase_scale,
    "curve": phase_curve,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=sorted(PHASES))
    parser.add_argument("--faults", type=int, default=54, help="crash faults in the latency phase")
    parser.add_argument("--hangs", type=int, default=3)
    parser.add_argument("--fault-every", type=float, default=1.0)
    parser.add_argument("--max-seconds", type=float, default=240.0)
    parser.add_argument(
        "--scale-seconds", type=float, default=60.0, help="medic's seconds per scale run"
    )
    parser.add_argument("--nodes", type=int, default=12_500, help="scale phase: cluster nodes")
    parser.add_argument("--jobs", type=int, default=2_000, help="scale phase: running jobs")
    parser.add_argument("--workers", type=int, default=1, help="scale phase: loop.workers")
    parser.add_argument(
        "--no-skip-quiet",
        dest="skip_quiet",
        action="store_false",
        help="scale phase: evaluate every job every pass (the reference)",
    )
    parser.add_argument(
        "--sizes", default="1000,4000,12500,25000,100000", help="curve phase: node counts"
    )
    parser.add_argument(
        "--reference-max-nodes",
        type=int,
        default=25_000,
        help="curve phase: largest size the reference runs at",
    )
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
