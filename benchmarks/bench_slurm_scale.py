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

The output sizes are reported with the times. The last line printed is one JSON object.
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
from medic.domain.ids import ClusterName, JobId
from medic.schedulers.slurm import LocalRunner, SlurmScheduler

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


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--state-dir", type=Path, default=None)
    args = parser.parse_args()
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="medic-slurm-scale-"))
    cluster = LocalSlurm(
        state, nodes=LIVE_NODES, offline_nodes=args.nodes - LIVE_NODES, accounting=False
    )
    env = cluster.up().environ()
    try:
        started = time.perf_counter()
        _submit(env, args.jobs)
        submit_s = round(time.perf_counter() - started, 1)
        result: dict[str, Any] = {"nodes": args.nodes, "jobs": args.jobs, "submit_s": submit_s}
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
