"""Benchmark: what reading a large real Slurm cluster costs medic.

Run: ``.venv/bin/python benchmarks/bench_slurm_scale.py [--nodes 12500] [--jobs 2000]``. It starts
the local real Slurm (``medic.dev.slurm``: Debian's slurm-wlm, installed when missing) with four
nodes that run a slurmd and ``--nodes`` minus four more that no slurmd serves (DOWN, as on a
cluster with racks out of service), submits ``--jobs`` held batch jobs (pending, as a queue of
that size), and times, median of ``--runs`` runs each:

* the Slurm commands themselves: ``squeue --json``, ``sinfo -N --json``, ``scontrol show nodes
  -o``, ``scontrol show jobs -o``, and the formatted ``sinfo -N -h -o`` / ``squeue -h -o`` (the
  plain approach of a cron script);
* medic's own snapshot reads, command and parsing included: ``SlurmScheduler.list_nodes`` and
  ``list_jobs``, and one ``get_job``.

The output sizes are reported with the times. Before that, without Slurm, tailing at the same
size: ``--jobs`` job logs and ``--nodes`` kernel logs in a temporary directory, a line appended to
a fifth of the job logs and to a few kernel logs before each pass (a job prints about once a
second, a pass is 0.2 s), and ``SlurmLogSource.read_new`` timed per pass with every file polled
(``slurm.log_full_poll_seconds: 0``, the reference) and with file notifications (1 s full
polls). ``--tailing-only`` skips Slurm. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medic.config.settings import SlurmSettings
from medic.dev.slurm import LocalSlurm
from medic.domain.cluster import Job, JobState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.schedulers.slurm import LocalRunner, SlurmLogSource, SlurmScheduler
from medic.testing import FakeClock

LIVE_NODES = 4


def _timed(run: Callable[[], Any], runs: int) -> tuple[float, Any]:
    seconds, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - start)
    return round(statistics.median(seconds), 4), result


def _submit(env: dict[str, str], jobs: int) -> None:
    """``jobs`` held jobs, 200 ``sbatch`` calls per shell."""
    script = (
        "for i in $(seq 1 {n}); do sbatch --hold -N1 -J scale-$i --wrap 'sleep 600'"
        " >/dev/null; done"
    )
    left = jobs
    while left > 0:
        n = min(200, left)
        subprocess.run(["bash", "-c", script.format(n=n)], env=env, check=True, timeout=600)
        left -= n


class _Cursors:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get_cursor(self, source: str) -> str | None:
        return self.values.get(source)

    def set_cursor(self, source: str, value: str) -> None:
        self.values[source] = value


def tailing(nodes: int, jobs: int, passes: int = 50) -> dict[str, Any]:
    """Per-pass cost of reading new lines, polled against notified (see the docstring)."""
    root = Path(tempfile.mkdtemp(prefix="medic-tail-"))
    (root / "jobs").mkdir()
    (root / "kern").mkdir()
    listing = []
    for i in range(nodes):
        (root / "kern" / f"n{i:05d}.log").write_bytes(b"boot\n")
    for i in range(jobs):
        out = root / "jobs" / f"{i}.out"
        out.write_bytes(b"start\n")
        listing.append(
            Job(
                id=JobId(str(i)),
                cluster=ClusterName("c"),
                name=f"train-{i}",
                state=JobState.RUNNING,
                partition="p0",
                nodes=(NodeName(f"n{(i * 6) % nodes:05d}"),),
                log_paths=(str(out),),
            )
        )
    result: dict[str, Any] = {"files": nodes + jobs}
    for label, full_poll in (("polled", 0.0), ("notified", 1.0)):
        clock = FakeClock()
        settings = SlurmSettings(
            kernel_log_template=str(root / "kern" / "{node}.log"), log_full_poll_seconds=full_poll
        )
        source = SlurmLogSource(_Cursors(), settings, clock=clock)
        source.read_new(listing)
        seconds, lines = [], 0
        for n in range(passes):
            for i in range(n % 5, jobs, 5):
                with (root / "jobs" / f"{i}.out").open("ab") as handle:
                    handle.write(b"iteration\n")
            for i in range(n % 3, nodes, max(1, nodes // 3)):
                with (root / "kern" / f"n{i:05d}.log").open("ab") as handle:
                    handle.write(b"kernel line\n")
            clock.advance(0.2)
            start = time.perf_counter()
            lines += len(source.read_new(listing))
            seconds.append(time.perf_counter() - start)
        result[label] = {
            "pass_p50_s": round(statistics.median(seconds), 4),
            "pass_max_s": round(max(seconds), 4),
            "lines": lines,
        }
        print(f"tailing, {label}: {result[label]}", file=sys.stderr, flush=True)
    polled, notified = result["polled"]["pass_p50_s"], result["notified"]["pass_p50_s"]
    result["polled_over_notified_p50"] = round(polled / notified, 1) if notified else None
    return result


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--tailing-only", action="store_true", help="no Slurm: tailing only")
    args = parser.parse_args()
    tail = tailing(args.nodes, args.jobs)
    if args.tailing_only:
        return {"nodes": args.nodes, "jobs": args.jobs, "tailing": tail}
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="medic-slurm-scale-"))
    cluster = LocalSlurm(
        state, nodes=LIVE_NODES, offline_nodes=args.nodes - LIVE_NODES, accounting=False
    )
    env = cluster.up().environ()
    try:
        started = time.perf_counter()
        _submit(env, args.jobs)
        submit_s = round(time.perf_counter() - started, 1)
        result: dict[str, Any] = {"nodes": args.nodes, "jobs": args.jobs, "tailing": tail}
        result["submit_s"] = submit_s
        commands = {
            "squeue_json": ["squeue", "--json"],
            "sinfo_nodes_json": ["sinfo", "-N", "--json"],
            "scontrol_nodes": ["scontrol", "show", "nodes", "-o"],
            "scontrol_jobs": ["scontrol", "show", "jobs", "-o"],
            "sinfo_format": ["sinfo", "-N", "-h", "-o", "%N|%T|%P|%E"],
            "squeue_format": ["squeue", "-h", "-o", "%i|%T|%N|%r"],
        }
        for name, argv in commands.items():

            def run(argv: list[str] = argv) -> int:
                out = subprocess.run(argv, env=env, capture_output=True, check=True, timeout=300)
                return len(out.stdout)

            seconds, size = _timed(run, args.runs)
            result[name] = {"seconds": seconds, "bytes": size}
            print(f"{name}: {seconds} s, {size / 1e6:.1f} MB", file=sys.stderr, flush=True)
        runner = LocalRunner({"SLURM_CONF": env["SLURM_CONF"]})
        # Every job watched (no opt-in comment needed): the size medic would face.
        scheduler = SlurmScheduler(runner, ClusterName("medic"), SlurmSettings(opt_in=False))
        seconds, nodes = _timed(scheduler.list_nodes, args.runs)
        result["medic_list_nodes"] = {"seconds": seconds, "nodes": len(nodes)}
        seconds, jobs = _timed(scheduler.list_jobs, args.runs)
        result["medic_list_jobs"] = {"seconds": seconds, "jobs": len(jobs)}
        job = JobId(str(jobs[len(jobs) // 2].id)) if jobs else JobId("1")
        seconds, _ = _timed(lambda: scheduler.get_job(job), args.runs)
        result["medic_get_job"] = {"seconds": seconds}
        print(json.dumps(result), file=sys.stderr, flush=True)
        return result
    finally:
        cluster.down(purge=True)


if __name__ == "__main__":
    print(json.dumps(main()))
