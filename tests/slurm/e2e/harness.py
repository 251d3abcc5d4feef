"""What the end-to-end tests and ``benchmarks/bench_slurm_recovery.py`` share: the training job
under ``sbatch`` + ``srun`` (one of two trainers: ``train.py``, Megatron-style, and
``train_ds.py``, DeepSpeed under ``srun --label``), its faults, medic built on real Slurm, and
readers of the scheduler's and the store's state.

No pytest here: the benchmark imports it too. Times are ``time.time()`` (the wall clock), which
is what the store's timestamps use.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TypeVar
from unittest import mock

import medic.wiring as wiring
from medic.config.loading import load_settings
from medic.config.settings import Acting, Settings, SlurmSettings
from medic.control.tasks import LoopThread
from medic.dev.slurm import LocalSlurm, SlurmEnv
from medic.domain.actions import ActionRecord, ActionStatus
from medic.domain.advice import Advice
from medic.domain.audit import AuditEvent
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.ids import ClusterName, JobId
from medic.schedulers.slurm import CommandResult, CommandRunner
from medic.services import Services
from medic.wiring import build

__all__ = [
    "ACT",
    "CLUSTER",
    "DEEPSPEED",
    "FINISHED",
    "MEGATRON",
    "OBSERVE",
    "TRAIN",
    "TRAINERS",
    "Medic",
    "RecordingRunner",
    "TimedOut",
    "Trainer",
    "TrainingJob",
    "fields",
    "is_mark",
    "medic_settings",
    "poll",
    "scontrol_job",
    "xid79_line",
]

TRAIN = Path(__file__).resolve().with_name("train.py")


@dataclass(frozen=True)
class Trainer:
    """A training program of the e2e suite and how to read its own log (the harness's view,
    not medic's: medic reads the log with its signature catalogue)."""

    name: str
    program: Path
    srun_args: tuple[str, ...]
    loaded: str
    """Regex whose group 1 is the step a resumed attempt loaded (one match per load)."""
    iteration: str
    """Regex whose group 1 is a completed step's number."""


MEGATRON = Trainer(
    "megatron",
    TRAIN,
    (),
    r"successfully loaded checkpoint from \S+ \[ t 1/1, p 1/1 \] at iteration (\d+)",
    r"\] iteration +(\d+)/",
)
"""``train.py``: Megatron-LM's lines behind ``[rankN]:`` prefixes."""
DEEPSPEED = Trainer(
    "deepspeed",
    TRAIN.with_name("train_ds.py"),
    ("--label",),
    r"(?m)^ *0: .*\[Torch\] Loaded checkpoint from \S+/global_step(\d+)/mp_rank_00_model_states",
    r"(?m)^ *0: .*\[Rank 0\] step=(\d+), skipped=",
)
"""``train_ds.py``: DeepSpeed's logger under ``srun --label`` (``N: `` prefixes, no ``[rankN]``)."""
TRAINERS = (MEGATRON, DEEPSPEED)
CLUSTER = ClusterName("medic")
ACT = '{"medic": {"mode": "act"}}'
OBSERVE = '{"medic": {"mode": "observe"}}'
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")

T = TypeVar("T")


class TimedOut(AssertionError):
    """A :func:`poll` ran out of time."""


def poll(what: str, probe: Callable[[], T | None], *, timeout: float, every: float = 0.1) -> T:
    """Call ``probe`` until it returns something truthy and return that; raise ``TimedOut``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise TimedOut(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
        time.sleep(every)


# ------------------------------------------------------------------------------------ Slurm
def fields(text: str) -> dict[str, str]:
    """``Key=value`` pairs of a one-line ``scontrol show ... -o`` record."""
    return {m.group(1): m.group(2) for m in re.finditer(r"(?:^|\s)([\w/:]+)=(\S*)", text)}


def scontrol_job(env: SlurmEnv, job_id: str) -> dict[str, str]:
    """The job as ``scontrol show job -o`` prints it ({} when slurmctld no longer knows it)."""
    done = env.run("scontrol", "show", "job", "-o", job_id, timeout=30)
    return fields(done.stdout) if done.returncode == 0 else {}


def xid79_line(node: str, pid: int, gpu_bus: int = 0x3A) -> str:
    """A kernel log line as ``/var/log/kern.log`` shows an Xid 79 (GPU fallen off the bus)."""
    stamp = datetime.now().strftime("%b %d %H:%M:%S")
    uptime = time.monotonic()
    return (
        f"{stamp} {node} kernel: [{uptime:12.6f}] NVRM: Xid (PCI:0000:{gpu_bus:02x}:00): 79, "
        f"pid={pid}, name=python, GPU has fallen off the bus."
    )


@dataclass
class TrainingJob:
    """One submitted run of ``train.py``: ``nodes`` x ``tasks_per_node`` ranks."""

    env: SlurmEnv
    name: str
    comment: str
    nodes: int = 2
    tasks_per_node: int = 8
    step_seconds: float = 0.25
    checkpoint_every: int = 5
    job_id: str = ""
    submitted_at: float = 0.0
    extra_args: list[str] = field(default_factory=list)
    trainer: Trainer = MEGATRON

    @property
    def dir(self) -> Path:
        return self.env.shared_dir / self.name

    @property
    def out(self) -> Path:
        return self.env.shared_dir / f"{self.name}.out"

    def submit(self) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        script = self.dir.parent / f"{self.name}.sh"
        train = [sys.executable, str(self.trainer.program), "--dir", str(self.dir)]
        train += ["--step-seconds", str(self.step_seconds)]
        train += ["--checkpoint-every", str(self.checkpoint_every), *self.extra_args]
        script.write_text(
            "#!/bin/bash\n"
            f"# medic e2e training job {self.name}: restart ${{SLURM_RESTART_COUNT:-0}}\n"
            f"exec srun --kill-on-bad-exit=1 {' '.join([*self.trainer.srun_args, *train])}\n"
        )
        argv = ["sbatch", "--parsable", f"--job-name={self.name}", f"--nodes={self.nodes}"]
        argv += [f"--ntasks-per-node={self.tasks_per_node}", "--requeue", "--open-mode=append"]
        argv += [f"--output={self.out}", f"--comment={self.comment}", str(script)]
        done = self.env.run(*argv)
        if done.returncode != 0:
            raise RuntimeError(f"sbatch failed: {done.stderr.strip()}")
        self.job_id = done.stdout.strip().split(";")[0]
        self.submitted_at = time.time()
        return self.job_id

    # --- the scheduler's view -------------------------------------------------------------
    def info(self) -> dict[str, str]:
        return scontrol_job(self.env, self.job_id)

    def restarts(self, info: dict[str, str] | None = None) -> int:
        return int((info or self.info()).get("Restarts", "0") or 0)

    def running(self, *, restarts: int = 0, avoid: str | None = None) -> dict[str, str] | None:
        """The job's record once it is RUNNING with at least ``restarts`` restarts and (when
        ``avoid`` is given) not on that node."""
        info = self.info()
        if info.get("JobState") != "RUNNING" or self.restarts(info) < restarts:
            return None
        if avoid is not None and avoid in self.node_list(info):
            return None
        return info

    def node_list(self, info: dict[str, str] | None = None) -> list[str]:
        info = info or self.info()
        done = self.env.run("scontrol", "show", "hostnames", info.get("NodeList", ""))
        return done.stdout.split() if done.returncode == 0 else []

    def cancel(self) -> None:
        if self.job_id:
            self.env.run("scancel", self.job_id)

    # --- the program's view ---------------------------------------------------------------
    def step(self, restart: int = 0) -> int:
        """The last step every rank of attempt ``restart`` completed (0: none yet)."""
        try:
            return int((self.dir / f"run{restart}" / "step").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def ranks(self, restart: int = 0) -> dict[int, tuple[int, str, int]]:
        """rank -> (step, node, pid) of attempt ``restart``, from the ranks' barrier files."""
        found: dict[int, tuple[int, str, int]] = {}
        for path in (self.dir / f"run{restart}").glob("rank*"):
            with contextlib.suppress(OSError, ValueError):
                step, node, pid = path.read_text().split()
                found[int(path.name[4:])] = (int(step), node, int(pid))
        return found

    def pids_on(self, node: str, restart: int = 0) -> list[int]:
        return sorted(pid for _s, n, pid in self.ranks(restart).values() if n == node)

    def is_rank(self, pid: int) -> bool:
        """True while ``pid`` is one of this job's ranks (a pid from a rank file may have been
        reused by another process since)."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        program = str(self.trainer.program).encode()
        return program in argv and str(self.dir).encode() in argv

    def signal_ranks(self, node: str, sig: signal.Signals, restart: int = 0) -> list[int]:
        """Send ``sig`` to every rank of the attempt that runs on ``node``; return their pids."""
        pids = [pid for pid in self.pids_on(node, restart) if self.is_rank(pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def kill_leftovers(self) -> None:
        """SIGKILL any rank of any attempt still alive (SIGSTOPped ones Slurm did not reap)."""
        for run in self.dir.glob("run*"):
            restart = int(run.name[3:]) if run.name[3:].isdigit() else -1
            for _step, _node, pid in self.ranks(restart).values():
                if self.is_rank(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def raise_at(self, step: int) -> None:
        """Every rank raises ``KeyError('labels')`` from ``step`` on (this and later attempts)."""
        (self.dir / "faults").mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "faults" / ".raise_at.tmp"
        tmp.write_text(f"{step}\n")
        os.replace(tmp, self.dir / "faults" / "raise_at")

    def log(self) -> str:
        try:
            return self.out.read_text(errors="replace")
        except OSError:
            return ""

    def loaded_steps(self) -> list[int]:
        """The step each resume of the job loaded, in order (the trainer's own words)."""
        return [int(m) for m in re.findall(self.trainer.loaded, self.log())]

    def iterations_after_resume(self) -> list[int]:
        """Steps completed after the last checkpoint load ([] before any load)."""
        text = self.log()
        loads = list(re.finditer(self.trainer.loaded, text))
        if not loads:
            return []
        return [int(m) for m in re.findall(self.trainer.iteration, text[loads[-1].end() :])]

    def checkpoint_step(self) -> int:
        try:
            return int((self.dir / "checkpoint" / "latest").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0


# ------------------------------------------------------------------------------------ medic
def medic_settings(cluster: LocalSlurm, db: Path, **overrides: object) -> Settings:
    """medic on the local cluster: Slurm adapter, its kernel logs, a SQLite store; cluster-wide
    observe (jobs opt in to act with their comment)."""
    template = str(cluster.kernel_log(cluster.node_names[0]).parent / "{node}.log")
    values: dict[str, object] = {
        "store.url": f"sqlite:///{db}",
        "scheduler.kind": "slurm",
        "scheduler.cluster": CLUSTER,
        "scheduler.mode": "observe",
        "slurm.slurm_conf": str(cluster.env.slurm_conf),
        "slurm.kernel_log_template": template,
        "loop.interval_seconds": 0.2,
    }
    return load_settings(env={}, overrides=values | overrides)


class RecordingRunner:
    """A ``CommandRunner`` that records every Slurm command medic runs (time, argv)."""

    def __init__(self, inner: CommandRunner) -> None:
        self.inner = inner
        self.commands: list[tuple[float, tuple[str, ...]]] = []
        self._lock = threading.Lock()

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        with self._lock:
            self.commands.append((time.time(), tuple(argv)))
        return self.inner.run(argv, timeout=timeout)

    def mutating(self, job_id: str | None = None) -> list[tuple[str, ...]]:
        """The commands that change something (not a read, not a hold mark), for ``job_id``
        when given."""
        return [argv for argv in self._changes(job_id) if not is_mark(argv)]

    def marks(self, job_id: str | None = None) -> list[tuple[str, ...]]:
        """The ``scontrol update ... AdminComment=`` commands: medic's hold mark, put on before a
        requeue-hold and taken off at convergence (``medic.domain.holds``)."""
        return [argv for argv in self._changes(job_id) if is_mark(argv)]

    def _changes(self, job_id: str | None) -> list[tuple[str, ...]]:
        with self._lock:
            found = [argv for _at, argv in self.commands if not _is_read(argv)]
        if job_id is None:
            return found
        return [argv for argv in found if job_id in argv or f"JobId={job_id}" in argv]


def is_mark(argv: Sequence[str]) -> bool:
    """An update of a job's admin comment: medic's hold mark, not a scheduling step."""
    return any(word.startswith("AdminComment=") for word in argv)


def _is_read(argv: tuple[str, ...]) -> bool:
    if argv[0] in ("squeue", "sinfo", "sacct"):
        return True
    return argv[0] == "scontrol" and len(argv) > 1 and argv[1] in ("show", "listpids", "ping")


class Medic:
    """medic built with ``build(settings)``, its loop in a :class:`LoopThread`.

    ``record``: every Slurm command medic runs goes through a :class:`RecordingRunner`
    (``self.runners``, one per runner the composition root makes).
    ``embedded_controller=False``: the engine publishes advice but carries none out (a remote
    controller does): ``controller.acting: remote``.
    """

    def __init__(
        self, settings: Settings, *, embedded_controller: bool = True, record: bool = False
    ) -> None:
        if not embedded_controller:
            remote = replace(settings.controller, acting=Acting.REMOTE)
            settings = replace(settings, controller=remote)
        self.settings = settings
        self.record = record
        self.runners: list[RecordingRunner] = []
        if record:
            original = wiring.runner_from_settings

            def recording(slurm: SlurmSettings) -> CommandRunner:
                self.runners.append(RecordingRunner(original(slurm)))
                return self.runners[-1]

            with mock.patch.object(wiring, "runner_from_settings", recording):
                self.services: Services = build(settings)
        else:
            self.services = build(settings)
        self.store = self.services.store
        self.thread = LoopThread(self.services.loop)
        self._started = False

    def start(self) -> Medic:
        self.thread.start()
        self._started = True
        return self

    def __enter__(self) -> Medic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._started:
            self.thread.stop()
            self._started = False
        self.services.close()

    def mutating(self, job_id: str | None = None) -> list[tuple[str, ...]]:
        """The scheduler commands medic issued that change something, its hold marks left out
        (needs ``record``)."""
        assert self.record, "built without record=True"
        return [argv for runner in self.runners for argv in runner.mutating(job_id)]

    def marks(self, job_id: str | None = None) -> list[tuple[str, ...]]:
        """medic's hold-mark updates (needs ``record``)."""
        assert self.record, "built without record=True"
        return [argv for runner in self.runners for argv in runner.marks(job_id)]

    # --- what the store holds for one job ---------------------------------------------------
    def job_state(self, job_id: str) -> str:
        """The job's state as medic last stored it ("" before it first saw the job)."""
        job = self.store.get_job(CLUSTER, JobId(job_id))
        return job.state.value if job is not None else ""

    def detections(self, job_id: str) -> list[Detection]:
        return self.store.list_detections(CLUSTER, JobId(job_id))

    def verdicts(self, job_id: str) -> list[Verdict]:
        return self.store.list_verdicts(CLUSTER, JobId(job_id))

    def advice(self, job_id: str) -> Advice | None:
        return self.store.advice_for_job(CLUSTER, JobId(job_id))

    def actions(self, job_id: str) -> list[ActionRecord]:
        return self.store.list_actions(CLUSTER, JobId(job_id))

    def audit(self, job_id: str) -> list[AuditEvent]:
        events: list[AuditEvent] = []
        while True:
            after = events[-1].id if events else None
            page = self.store.query_audit(job_id=JobId(job_id), after_id=after, limit=500)
            events += page
            if len(page) < 500:
                return events

    def first_detection_at(self, job_id: str, since: float = 0.0) -> float:
        """Epoch seconds when the first evidence (not a progress line) about the job was stored
        at or after ``since`` (0: none yet)."""
        evidence = {d.signature_id for d in self.detections(job_id)}
        for event in self.audit(job_id):
            at = event.time.timestamp()
            if event.kind.value == "detection" and event.signature_id in evidence and at >= since:
                return at
        return 0.0

    def first_action_done_at(self, job_id: str) -> float:
        """Epoch seconds when the job's first scheduler command succeeded (0: none yet)."""
        done = [
            a.finished_at
            for a in self.actions(job_id)
            if a.status is ActionStatus.SUCCEEDED and a.finished_at is not None
        ]
        return min(done).timestamp() if done else 0.0

    def trail(self, job_id: str) -> list[tuple[str, str | None]]:
        """The job's audit trail as (kind, action) pairs, oldest first."""
        return [(e.kind.value, e.action) for e in self.audit(job_id)]
