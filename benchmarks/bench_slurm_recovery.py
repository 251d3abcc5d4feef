"""Benchmark: how fast medic recovers a training job on a real Slurm cluster.

Run (as root, with Slurm and munge installed, e.g. after ``medic dev slurm up`` once):
``.venv/bin/python benchmarks/bench_slurm_recovery.py [--runs 10]``.

It brings up its own 3-node local Slurm 22.05 cluster (``medic.dev.slurm.LocalSlurm``, in a
temporary state directory, purged at the end; settings in ``SLURM_SETTINGS`` of
``medic.dev.slurm_config``, listed in the README) and runs medic on it exactly as the
end-to-end tests do (``tests/slurm/e2e``): ``build(settings)`` with ``scheduler.kind: slurm``, the
nodes' kernel logs, a SQLite store, the loop every 0.2 s in a thread, default settings except
``detect.hang_floor_seconds`` (``--hang-floor``). Each run submits a fresh 2-node x 8-rank
training job of one of two trainers (``--trainers``; ``tests/slurm/e2e/train.py``, Megatron-style
lines behind ``[rankN]:``, and ``train_ds.py``, DeepSpeed's lines under ``srun --label``: an
iteration every ~0.3 s, a checkpoint every 5), waits for its first checkpoint, injects one fault
on its second node and measures:

* ``detection``: fault -> the first evidence about the job stored by medic (audit time);
* ``action``: that detection -> the first scheduler command done (``scontrol requeuehold``);
* ``requeued``: fault -> Slurm shows the job requeued (``Restarts`` >= 1), whoever requeued it;
* ``running_again``: fault -> Slurm shows the job RUNNING again (restarted, and not on the
  faulty node where medic had evidence against it), polled every 0.05 s;
* ``resumed``: fault -> the first iteration the job prints after loading its checkpoint;
* ``requeues``: Slurm's ``Restarts`` ``WATCH_S`` seconds after that (exactly 1 for a recovered
  fault: a second requeue would show here) and, for ``app_bug``, ``stopped``: fault -> the job
  ended, with ``requeues`` 0.

Faults, ``--runs`` of each, interleaved: ``xid79`` (an Xid 79 line in the node's kernel log, its
ranks killed), ``node_fail`` (its slurmd, slurmstepd and ranks killed; the node is restarted after
the run), ``hang`` (its ranks SIGSTOPped: no error line at all) and ``app_bug`` (a Python
exception on every rank; detection only, the job is stopped, not recovered). Act mode comes from
the job comment ``{"medic": {"mode": "act"}}``.

The plain-approach reference (Slurm alone) runs in the same process: ``--reference-runs`` jobs
per fault kind (one for a hang) with ``{"medic": {"mode": "observe"}}`` (medic watches and
advises but issues nothing), polled with ``scontrol show job`` every ``loop.interval_seconds``
until Slurm itself shows the job out of RUNNING (what a squeue/sacct watcher notices) and, for a
node failure, which Slurm recovers by itself once it declares the node DOWN, until it runs again.
A hang never leaves RUNNING before the NCCL watchdog (600 s in PyTorch): that wait is cut at
``--reference-hang-wait`` seconds and reported as ``null``.

Note on ``node_fail``: with the default ``--hang-floor`` of 3 s the job's stall is found (3 s)
before Slurm marks the node NOT_RESPONDING (about 6 s here), so medic requeues it as a hang,
before Slurm's own requeue at ``SlurmdTimeout``; with a hang floor above that (the e2e tests use
10 s), medic sees the node not responding first and leaves the requeue to Slurm.

Every run prints one line; the last line is one JSON object: the overall figures at the top level
(``detection_*`` over every kind, the others over xid79/node_fail/hang), ``kinds`` per fault kind,
``reference_plain`` per kind, the aims (detection p50 <= 1 s, action p50 <= 2 s, running again
<= 15 s) and ``issue10_aims_met`` per trainer (Xid 79 running again <= 7 s, exactly one requeue
per recovered fault, none for an application bug, a node failure running again before Slurm
alone).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the e2e harness and training program

from medic.demo import percentile  # noqa: E402
from medic.dev.slurm import DevClusterError, LocalSlurm  # noqa: E402
from medic.domain.repairs import AlertSource, AlertState  # noqa: E402
from medic.repair.alerts import resolve_by_person  # noqa: E402
from slurm.e2e.harness import (  # noqa: E402
    ACT,
    OBSERVE,
    TRAINERS,
    Medic,
    TimedOut,
    Trainer,
    TrainingJob,
    medic_settings,
    poll,
    xid79_line,
)

KINDS = ("xid79", "node_fail", "hang", "app_bug")
RECOVERED = ("xid79", "node_fail", "hang")
EVIDENCE_AGAINST_NODE = ("xid79", "node_fail")
AIMS = {"detection_p50_s": 1.0, "action_p50_s": 2.0, "running_again_p50_s": 15.0}
XID79_RUNNING_AGAIN_AIM_S = 7.0
WATCH_S = 4.0
"""After a run's outcome, how long its requeue count is watched (a second requeue shows here)."""
CHECKPOINT_EVERY = 5
RUN_TIMEOUT_S = 90.0
POLL_S = 0.05


@dataclass
class Run:
    kind: str
    trainer: str
    run: int
    job: str
    mode: str
    victim: str = ""
    requeued_s: float | None = None
    """Fault -> Slurm shows the job requeued (Restarts >= 1), whoever requeued it."""
    requeues: int | None = None
    """Slurm's Restarts at the end of the run's watch window (exactly 1 for a recovered fault,
    0 for an application bug)."""
    stopped_s: float | None = None
    """app_bug: fault -> the job out of RUNNING for good, never restarted."""
    detection_s: float | None = None
    action_s: float | None = None
    running_again_s: float | None = None
    resumed_s: float | None = None
    not_running_s: float | None = None
    error: str = ""


class Bench:
    def __init__(self, cluster: LocalSlurm, medic: Medic, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.medic = medic
        self.args = args
        self.interval = medic.settings.loop.interval_seconds
        self.count = 0

    # --- one run -------------------------------------------------------------------------
    def ready(self) -> None:
        """Every node up and idle (a node_fail run leaves its node restarting; an Xid run leaves
        its node cordoned: the operator resolves its alert, as after fixing it by hand)."""
        for node in self.cluster.node_names:
            self.cluster.start_slurmd(node)
        store = self.medic.store
        for alert in store.list_alerts(state=AlertState.FIRING):
            if alert.id is not None and alert.source is not AlertSource.SCHEDULER:
                resolve_by_person(store, alert.id, "cli:bench", "next run", datetime.now(UTC))

        def idle() -> bool:
            out = self.cluster.env.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
            return len(out) == 2 * len(self.cluster.node_names) and set(out[1::2]) == {"idle"}

        poll("every node idle", idle, timeout=120, every=0.2)

    def start(self, kind: str, comment: str, trainer: Trainer) -> TrainingJob:
        self.ready()
        self.count += 1
        name = f"bench-{self.count:03d}-{trainer.name}-{kind}"
        job = TrainingJob(
            self.cluster.env, name, comment, checkpoint_every=CHECKPOINT_EVERY, trainer=trainer
        )
        job.submit()
        poll("the job to run", job.running, timeout=60)
        poll("a checkpoint", lambda: job.checkpoint_step() >= CHECKPOINT_EVERY, timeout=60)
        return job

    def inject(self, kind: str, job: TrainingJob, victim: str) -> float:
        """Inject the fault; return its time (epoch seconds)."""
        if kind == "xid79":
            pids = job.pids_on(victim)
            line = xid79_line(victim, pids[0])
            at = time.time()
            with self.cluster.kernel_log(victim).open("a") as log:
                log.write(line + "\n")
            job.signal_ranks(victim, signal.SIGKILL)
            return at
        at = time.time()
        if kind == "node_fail":
            self.cluster.kill_slurmd(victim, with_jobs=True)
        elif kind == "hang":
            job.signal_ranks(victim, signal.SIGSTOP)
        else:
            job.raise_at(job.step() + 1)
        return at

    def finish(self, kind: str, job: TrainingJob, victim: str) -> None:
        job.cancel()
        if kind == "node_fail":
            self.cluster.start_slurmd(victim)
        job.kill_leftovers()  # SIGSTOPped ranks Slurm has not killed yet

    def act_run(self, kind: str, trainer: Trainer, index: int) -> Run:
        job = self.start(kind, ACT, trainer)
        victim = job.node_list()[1]
        result = Run(kind, trainer.name, index, job.job_id, "act", victim)
        try:
            fault = self.inject(kind, job, victim)
            self._follow(kind, job, victim, fault, result)
            time.sleep(WATCH_S)
            result.requeues = job.restarts()
        except TimedOut as exc:
            result.error = str(exc)
        finally:
            self.finish(kind, job, victim)
        return result

    def _follow(self, kind: str, job: TrainingJob, victim: str, fault: float, run: Run) -> None:
        avoid = victim if kind in EVIDENCE_AGAINST_NODE else None
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            now = time.time()
            info = job.info()
            if run.requeued_s is None and job.restarts(info) >= 1:
                run.requeued_s = now - fault
            if kind == "app_bug":
                if info.get("JobState") not in ("RUNNING", "COMPLETING", "PENDING"):
                    run.stopped_s = now - fault
                    break
            elif run.running_again_s is None:
                if job.running(restarts=1, avoid=avoid):
                    run.running_again_s = now - fault
            elif job.iterations_after_resume():
                run.resumed_s = now - fault
                break
            time.sleep(POLL_S)
        else:
            run.error = f"not recovered within {RUN_TIMEOUT_S:g} s"
        detected = self.medic.first_detection_at(job.job_id, fault)
        acted = self.medic.first_action_done_at(job.job_id)
        run.detection_s = detected - fault if detected else None
        if kind in RECOVERED and detected and acted:
            run.action_s = acted - detected

    def reference_run(self, kind: str, trainer: Trainer, index: int) -> Run:
        """Observe mode (Slurm alone): fault -> Slurm shows the job out of RUNNING, polled like
        medic's loop; for a node failure, which Slurm recovers by itself (it requeues the job
        once it declares the node DOWN), also -> RUNNING again on healthy nodes."""
        job = self.start(kind, OBSERVE, trainer)
        victim = job.node_list()[1]
        result = Run(kind, trainer.name, index, job.job_id, "observe", victim)
        limit = self.args.reference_hang_wait if kind == "hang" else RUN_TIMEOUT_S
        try:
            fault = self.inject(kind, job, victim)
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                info = job.info()
                now = time.time() - fault
                if result.not_running_s is None and (
                    info.get("JobState") != "RUNNING" or job.restarts(info) > 0
                ):
                    result.not_running_s = now
                    if kind != "node_fail":
                        break
                if kind == "node_fail" and job.running(restarts=1, avoid=victim):
                    result.running_again_s = now
                    break
                time.sleep(self.interval)
            result.requeues = job.restarts()
            with contextlib.suppress(TimedOut):
                detected = poll(
                    "medic's detection",
                    lambda: self.medic.first_detection_at(job.job_id, fault),
                    timeout=10,
                )
                result.detection_s = detected - fault
        finally:
            self.finish(kind, job, victim)
        if result.not_running_s is None and kind != "hang":
            result.error = f"still RUNNING {limit:g} s after the fault"
        return result


# --- figures -------------------------------------------------------------------------------
def _values(runs: list[Run], attr: str) -> list[float]:
    return [v for r in runs if (v := getattr(r, attr)) is not None]


def figures(runs: list[Run]) -> dict[str, object]:
    stats: dict[str, object] = {"runs": len(runs), "failed": sum(bool(r.error) for r in runs)}
    for attr, name in (
        ("detection_s", "detection"),
        ("action_s", "action"),
        ("requeued_s", "requeued"),
        ("running_again_s", "running_again"),
        ("resumed_s", "resumed"),
        ("stopped_s", "stopped"),
    ):
        values = _values(runs, attr)
        if values:
            stats[f"{name}_p50_s"] = percentile(values, 50)
            stats[f"{name}_p95_s"] = percentile(values, 95)
    stats["requeues"] = sorted(r.requeues for r in runs if r.requeues is not None)
    return stats


def issue_aims(act: list[Run], reference: list[Run]) -> dict[str, bool]:
    """Issue 10's aims, per trainer: Xid 79 RUNNING again <= 7 s with exactly one requeue; a node
    failure RUNNING again before Slurm alone; a hang restarted once; an error on every rank
    stopped at the first attempt."""
    met: dict[str, bool] = {}
    for trainer in sorted({r.trainer for r in act}):
        mine = [r for r in act if r.trainer == trainer]

        def of(kind: str, runs: list[Run] = mine) -> list[Run]:
            return [r for r in runs if r.kind == kind]

        xid = _values(of("xid79"), "running_again_s")
        if xid:
            met[f"{trainer}.xid79_running_again_p50_le_7s"] = (
                percentile(xid, 50) <= XID79_RUNNING_AGAIN_AIM_S
            )
        for kind, wanted in (("xid79", 1), ("node_fail", 1), ("hang", 1), ("app_bug", 0)):
            if of(kind):
                met[f"{trainer}.{kind}_requeues_{wanted}"] = all(
                    r.requeues == wanted for r in of(kind)
                )
        ours = _values(of("node_fail"), "running_again_s")
        alone = _values(of("node_fail", reference), "running_again_s")
        if ours and alone:
            met[f"{trainer}.node_fail_before_slurm_alone"] = percentile(ours, 50) < percentile(
                alone, 50
            )
    return met


def summary(act: list[Run], reference: list[Run], args: argparse.Namespace) -> dict[str, object]:
    kinds = {
        f"{t.name}.{k}": figures([r for r in act if r.kind == k and r.trainer == t.name])
        for t in args.trainer_list
        for k in args.kinds
    }
    recovered = [r for r in act if r.kind in RECOVERED]
    overall: dict[str, object] = {
        "detection_p50_s": percentile(_values(act, "detection_s"), 50),
        "detection_p95_s": percentile(_values(act, "detection_s"), 95),
    }
    for attr, name in (
        ("action_s", "action"),
        ("running_again_s", "running_again"),
        ("resumed_s", "resumed"),
    ):
        overall[f"{name}_p50_s"] = percentile(_values(recovered, attr), 50)
        overall[f"{name}_p95_s"] = percentile(_values(recovered, attr), 95)
    plain: dict[str, object] = {}
    for kind in args.kinds:
        runs = [r for r in reference if r.kind == kind]
        if not runs:
            continue
        values = _values(runs, "not_running_s")
        plain[kind] = {
            "runs": len(runs),
            "not_running_p50_s": percentile(values, 50),
            "not_running_p95_s": percentile(values, 95),
            "still_running": sum(r.not_running_s is None for r in runs),
            "running_again_p50_s": percentile(_values(runs, "running_again_s"), 50),
            "requeues": sorted(r.requeues for r in runs if r.requeues is not None),
            "medic_detection_p50_s": percentile(_values(runs, "detection_s"), 50),
        }
    if "hang" in plain:
        plain["hang"]["waited_s"] = args.reference_hang_wait  # type: ignore[index]
    met = {key: (overall.get(key) or float("inf")) <= aim for key, aim in AIMS.items()}
    return {
        **overall,
        "kinds": kinds,
        "reference_plain": plain,
        "aims": AIMS,
        "aims_met_overall": met,
        "issue10_aims_met": issue_aims(act, reference),
        "runs_per_kind": args.runs,
        "hang_floor_s": args.hang_floor,
        "loop_interval_s": 0.2,
        "failed_runs": [asdict(r) for r in [*act, *reference] if r.error],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per fault kind (act mode)")
    parser.add_argument(
        "--reference-runs", type=int, default=3, help="plain-approach runs per fault kind"
    )
    parser.add_argument(
        "--reference-hang-wait",
        type=float,
        default=15.0,
        help="seconds to wait for Slurm to notice a hang in the reference (it never does)",
    )
    parser.add_argument("--hang-floor", type=float, default=3.0, help="detect.hang_floor_seconds")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--trainers",
        nargs="+",
        choices=[t.name for t in TRAINERS],
        default=[t.name for t in TRAINERS],
        help="training programs (tests/slurm/e2e: train.py Megatron-style, train_ds.py DeepSpeed)",
    )
    parser.add_argument("--install", action="store_true", help="apt-get install Slurm if missing")
    args = parser.parse_args(argv)
    args.trainer_list = [t for t in TRAINERS if t.name in args.trainers]
    if os.geteuid() != 0:
        print(json.dumps({"error": "run as root: the local Slurm cluster's daemons run as root"}))
        return 2
    started = time.monotonic()
    state = Path(tempfile.mkdtemp(prefix="medic-bench-slurm-"))
    cluster = LocalSlurm(state / "slurm", nodes=3, install=args.install)
    try:
        cluster.up(timeout_s=120)
    except DevClusterError as exc:
        cluster.down(purge=True)
        print(json.dumps({"error": f"the local Slurm cluster did not start: {exc}"}))
        return 1
    overrides = {"detect.hang_floor_seconds": args.hang_floor}
    medic = Medic(medic_settings(cluster, state / "medic.db", **overrides)).start()
    act: list[Run] = []
    reference: list[Run] = []
    try:
        bench = Bench(cluster, medic, args)
        plan: list[tuple[Callable[[str, Trainer, int], Run], list[Run], str, Trainer, int]] = [
            (bench.act_run, act, kind, trainer, i)
            for i in range(args.runs)
            for trainer in args.trainer_list
            for kind in args.kinds
        ]
        plan += [  # Slurm alone does not depend on the trainer's output: the first trainer
            (bench.reference_run, reference, kind, args.trainer_list[0], i)
            for i in range(args.reference_runs)
            for kind in args.kinds
            if kind != "hang" or i == 0  # Slurm never notices a hang: once is enough
        ]
        for run, results, kind, trainer, index in plan:
            result = run(kind, trainer, index)
            results.append(result)
            shown = {
                k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(result).items()
            }
            print(json.dumps(shown), flush=True)
    finally:
        medic.close()
        cluster.down(purge=True)
    result = summary(act, reference, args)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    result["state_dir"] = str(state)  # medic.db and the daemons' logs stay for post-mortems
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
