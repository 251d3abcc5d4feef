"""One attempt of a simulated training job: start-up, iterations, checkpoints and the ways it dies.

:class:`Training` drives a running job through the event queue and writes its log lines (see
docs/simulator.md for the exact lines). It owns no nodes: when an attempt stops it calls back the
cluster, which frees the nodes and schedules the queue. Every event carries the job's ``run``
token and is dropped when the attempt it belonged to is gone (requeued, cancelled, ended).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from medic.config.settings import SimLogProfile, SimSettings
from medic.domain.cluster import JobState
from medic.domain.faults import FaultKind
from medic.schedulers.sim import render
from medic.schedulers.sim.events import EventQueue, LineBuffer
from medic.schedulers.sim.state import GPUS_PER_NODE, SimJob, SimNode

__all__ = [
    "APP_EXIT_SECONDS",
    "HANG_WATCHDOG_SECONDS",
    "NODE_FAIL_SECONDS",
    "STRAGGLER_FACTOR",
    "Training",
]

STRAGGLER_FACTOR = 1.4
"""A straggler node computes this much slower; synchronous training makes the whole job wait."""
HANG_WATCHDOG_SECONDS = 600.0
"""A hung collective is only reported by PyTorch's own 600 s NCCL watchdog, whatever
``nccl_timeout_seconds`` says (that setting shortens the cascade after a crash, which is only a
symptom; a hang has nothing else to show)."""
APP_EXIT_SECONDS = 1.0
"""From a Python traceback (or CUDA OOM) to the job's FAILED state."""
NODE_FAIL_SECONDS = 1.0
"""From a node going DOWN to its job ending in NODE_FAIL."""
_COMPUTE_SHARE = 0.85
"""Share of an iteration spent in forward-backward (the rest is the all-reduce)."""
_SEQ_LEN = 4096
_PEAK_TFLOPS = 400.0
_NUMEL = 26_214_400
_NOISE_SHARE = 0.01
"""``production`` profile: share of iterations that also print a harmless warning."""

OnEnd = Callable[[SimJob, tuple[SimNode, ...]], None]


class Training:
    """Runs attempts of jobs on nodes the cluster allocated."""

    def __init__(
        self, events: EventQueue, lines: LineBuffer, settings: SimSettings, on_end: OnEnd
    ) -> None:
        self._events = events
        self._lines = lines
        self._s = settings
        self._on_end = on_end
        # Pids, ports and GPUs in fault lines: its own generator so fault details never shift
        # the metric jitter of jobs (or the other way round).
        self.rng = random.Random(f"{settings.seed}:details")
        self.production = settings.log_profile is SimLogProfile.PRODUCTION

    # --- life cycle -------------------------------------------------------------------------
    def start(self, job: SimJob, nodes: tuple[SimNode, ...]) -> None:
        """Begin a new attempt on ``nodes`` (already marked as running the job)."""
        ev = self._events
        job.run += 1
        job.state = JobState.RUNNING
        job.nodes = nodes
        job.start_time = ev.when()
        job.end_time = None
        job.exit_code = None
        job.step = job.saved_step
        job.alive = True
        for i, node in enumerate(nodes):
            rank = i * GPUS_PER_NODE
            self._lines.job(job.id, node.name, rank, render.init_line(rank, job.world))
            if self.production:
                self._nccl_set_up(job, node, rank)
        startup = self._s.startup_seconds
        if job.saved_step > 0:
            ev.after(startup / 2, self._resume, job, job.run)
        if any(n.broken is not None for n in nodes):
            # The broken GPU/link is hit as soon as the job does real work.
            ev.after(startup, self._fail_at_start, job, job.run)
        else:
            ev.after(startup + self._iteration_seconds(job), self._iterate, job, job.run)

    def stop(self, job: SimJob, state: JobState, exit_code: int | None = None) -> None:
        """End the current attempt: ``state`` PENDING for a requeue, a terminal state otherwise."""
        nodes = job.nodes
        job.run += 1
        job.alive = False
        job.state = state
        for node in nodes:
            node.job = None
        if state is JobState.PENDING:
            job.nodes = ()
            job.start_time = job.end_time = job.exit_code = None
        else:
            job.end_time = self._events.when()
            job.exit_code = exit_code
        self._on_end(job, nodes)

    def _nccl_set_up(self, job: SimJob, node: SimNode, first: int) -> None:
        a, b = divmod(node.index + 1, 256)
        pid = self.rng.randrange(10_000, 99_999)
        for local in range(GPUS_PER_NODE):
            rank = first + local
            for text in render.nccl_init_lines(
                node.name, pid + local, local, rank, job.world, f"10.0.{a}.{b}"
            ):
                self._lines.job(job.id, node.name, rank, text)

    # --- faults -----------------------------------------------------------------------------
    def hardware_failure(self, job: SimJob, node: SimNode, kind: FaultKind) -> None:
        """Kernel line and rank errors on the faulty node now; the surviving ranks' NCCL
        watchdog and the job's FAILED state after ``nccl_timeout_seconds``."""
        self._crash(job, [(node, kind)])

    def node_failure(self, job: SimJob) -> None:
        """The job's ranks vanish silently; the scheduler ends it in NODE_FAIL shortly after."""
        job.alive = False
        self._events.after(NODE_FAIL_SECONDS, self._end, job, job.run, JobState.NODE_FAIL, None)

    def hang(self, job: SimJob, node: SimNode) -> None:
        """The ranks stop without a word until PyTorch's 600 s watchdog fires on the peers."""
        job.alive = False
        self._events.after(HANG_WATCHDOG_SECONDS, self._peer_timeout, job, job.run, (node,), True)

    # --- events -----------------------------------------------------------------------------
    def _iteration_seconds(self, job: SimJob) -> float:
        slow = any(n.slow for n in job.nodes)
        return self._s.iteration_seconds * (STRAGGLER_FACTOR if slow else 1.0)

    def _resume(self, job: SimJob, run: int) -> None:
        if job.run != run:
            return
        for text in render.resume_lines(job.id, job.saved_step):
            self._lines.job(job.id, job.nodes[0].name, 0, text)

    def _fail_at_start(self, job: SimJob, run: int) -> None:
        if job.run != run or not job.alive:
            return
        broken = [n for n in job.nodes if n.broken is not None]
        if not broken:  # repaired during start-up after all
            self._events.after(self._iteration_seconds(job), self._iterate, job, run)
            return
        self._crash(job, [(n, n.broken) for n in broken if n.broken is not None])

    def _crash(self, job: SimJob, faulty: list[tuple[SimNode, FaultKind]]) -> None:
        job.alive = False
        for node, kind in faulty:
            self._hardware_lines(job, node, kind)
        bad = tuple(node for node, _ in faulty)
        self._events.after(
            self._s.nccl_timeout_seconds, self._peer_timeout, job, job.run, bad, False
        )

    def _iterate(self, job: SimJob, run: int) -> None:
        if job.run != run or not job.alive:
            return
        step = job.step + 1
        kind = job.bug_steps.get(step)
        if kind is not None:
            self._app_failure(job, step, kind)
            return
        job.step = step
        base = self._s.iteration_seconds
        dt = self._iteration_seconds(job)
        jitter = job.rng.random
        emit = self._lines.job
        jid = job.id
        if not self.production:
            compute_ms = base * 1000.0 * _COMPUTE_SHARE
            for i, node in enumerate(job.nodes):
                rank = i * GPUS_PER_NODE
                factor = STRAGGLER_FACTOR if node.slow else 1.0
                ms = compute_ms * factor * (0.98 + 0.04 * jitter())
                emit(jid, node.name, rank, render.timing_line(rank, step, ms))
        iter_ms = dt * 1000.0 * (0.99 + 0.02 * jitter())
        last = job.world - 1 if self.production else 0
        text = render.iteration_line(
            self._events.when(),
            step,
            job.train_iters,
            global_batch=job.global_batch,
            iter_ms=iter_ms,
            tflops=_PEAK_TFLOPS * base * 1000.0 / iter_ms,
            tokens_per_s=job.global_batch * _SEQ_LEN * 1000.0 / iter_ms,
            loss=render.lm_loss(step, 2.0 * jitter() - 1.0),
            grad_norm=0.8 + 1.5 * math.exp(-step / 500.0) + 0.05 * jitter(),
            rank=last,
        )
        first = job.nodes[0].name
        emit(jid, job.nodes[-1].name if self.production else first, last, text)
        if self.production and jitter() < _NOISE_SHARE:
            i = int(jitter() * len(job.nodes))
            rank = i * GPUS_PER_NODE + int(jitter() * GPUS_PER_NODE)
            emit(jid, job.nodes[i].name, rank, render.noise_line(rank, step))
        if step % self._s.checkpoint_every == 0:
            for line in render.checkpoint_lines(jid, step):
                emit(jid, first, 0, line)
            job.saved_step = step
        if step >= job.train_iters:
            self.stop(job, JobState.COMPLETED, 0)
            return
        self._events.after(dt, self._iterate, job, run)

    def _app_failure(self, job: SimJob, step: int, kind: FaultKind) -> None:
        job.alive = False
        emit = self._lines.job
        for i, node in enumerate(job.nodes):
            first = i * GPUS_PER_NODE
            if kind is FaultKind.CUDA_OOM:
                emit(job.id, node.name, first, render.oom_line(first, 0))
                continue
            for rank in range(first, first + GPUS_PER_NODE):
                for text in render.app_bug_lines(rank):
                    emit(job.id, node.name, rank, text)
        self._events.after(APP_EXIT_SECONDS, self._end, job, job.run, JobState.FAILED, 1)

    def _peer_timeout(self, job: SimJob, run: int, faulty: tuple[SimNode, ...], hang: bool) -> None:
        if job.run != run:
            return
        peers = [(i, n) for i, n in enumerate(job.nodes) if n not in faulty]
        if not peers and hang:
            # A single-node job has no other node: its own rank 0 reports the timeout.
            peers = [(i, n) for i, n in enumerate(job.nodes)]
        when = self._events.when()
        for i, node in peers:
            rank = i * GPUS_PER_NODE
            text = render.watchdog_line(rank, when, job.step * 8 + 3, _NUMEL)
            self._lines.job(job.id, node.name, rank, text)
        self.stop(job, JobState.FAILED, 1)

    def _end(self, job: SimJob, run: int, state: JobState, exit_code: int | None) -> None:
        if job.run == run:
            self.stop(job, state, exit_code)

    def _hardware_lines(self, job: SimJob, node: SimNode, kind: FaultKind) -> None:
        rng = self.rng
        first = job.nodes.index(node) * GPUS_PER_NODE
        emit = self._lines.job
        if kind is FaultKind.IB_LINK_DOWN:
            self._lines.kernel(node.name, render.ib_kernel())
            peers = [n for n in job.nodes if n is not node] or [node]
            text = render.ib_victim(
                node.name,
                rng.randrange(10_000, 99_999),
                rng.randrange(10_000, 99_999),
                0,
                peers[0].index,
                rng.randrange(30_000, 60_000),
            )
            emit(job.id, node.name, first, text)
            return
        pid = rng.randrange(10_000, 99_999)
        if kind is FaultKind.ECC_DBE:
            self._lines.kernel(node.name, render.ecc_kernel(node.broken_gpu, pid))
            victim = render.ecc_victim
        else:
            self._lines.kernel(node.name, render.xid79_kernel(node.broken_gpu, pid))
            victim = render.xid79_victim
        for rank in range(first, first + GPUS_PER_NODE):
            emit(job.id, node.name, rank, victim(rank))
