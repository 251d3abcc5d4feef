"""Shared harness of the integration tests: the control loop (or the controller) against the
simulated cluster and a SQLite store, in virtual time only.

Nothing here reads the wall clock: a :class:`~medic.testing.FakeClock` drives both the simulator
and medic, and :meth:`Harness.run` advances it in small steps with one loop pass per step. The port
proxies record what medic did (every mutating scheduler command, every log line it read) and can
break one dependency on purpose (a failing read, an exception from the store, a process killed
around a scheduler command).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pytest

from medic.config.settings import (
    DetectSettings,
    LoopSettings,
    PolicySettings,
    SchedulerSettings,
    Settings,
    SimSettings,
)
from medic.control.loop import ControlLoop, PassReport
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.actions import ActionRecord
from medic.domain.advice import Advice
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.cluster import Job, JobSpec, Mode
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.logs import LogLine
from medic.errors import TransientError
from medic.ports import Clock, LogSource, Scheduler, Store
from medic.schedulers.sim import SimCluster
from medic.store import SqlStore, create_store
from medic.telemetry.metrics import NullMetrics
from medic.testing import FakeClock

__all__ = [
    "ACTION_KINDS",
    "CLUSTER",
    "MUTATING",
    "SIM",
    "Call",
    "Crash",
    "FaultyStore",
    "Harness",
    "MakeHarness",
    "RecordingLogs",
    "RecordingScheduler",
]

CLUSTER = ClusterName("t")
MUTATING = ("requeue_hold", "set_excluded_nodes", "release", "cancel", "drain_node", "resume_node")
"""The scheduler calls that change something; every other call is a read."""
ACTION_KINDS = frozenset(
    {
        AuditKind.ACTION_STARTED,
        AuditKind.ACTION_SUCCEEDED,
        AuditKind.ACTION_FAILED,
        AuditKind.ACTION_SKIPPED,
        AuditKind.RECONCILIATION,
    }
)
"""Audit kinds the controller writes: none of them may appear for an observed job."""

SIM = SimSettings(
    nodes=12,
    partitions=2,
    jobs=0,
    nodes_per_job=2,
    seed=1,
    iteration_seconds=0.5,
    checkpoint_every=10,
    nccl_timeout_seconds=5.0,
    startup_seconds=1.0,
    # Broken nodes stay broken for the whole test: a requeue that did not exclude the faulty node
    # fails again at start, so a missing exclusion cannot go unnoticed.
    node_repair_seconds=3600.0,
)
"""A small, fast cluster: partitions p0 (node001-006) and p1 (node007-012), an iteration every
0.5 s, a checkpoint every 5 s, the NCCL cascade 5 s after a crash. Tests with several jobs put
them in different partitions, so a node one job broke is never handed to another."""

_SAVED = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)")


class Crash(BaseException):
    """The process is killed: a BaseException, so nothing in medic catches it (as with SIGKILL,
    the code after the crash point never runs)."""


@dataclass(frozen=True, slots=True)
class Call:
    """One mutating scheduler command that reached the scheduler."""

    name: str
    args: tuple[Any, ...]
    at: datetime

    @property
    def target(self) -> Any:
        """The job id (or node name) the command addressed."""
        return self.args[0]


class RecordingScheduler:
    """``Scheduler`` proxy that records every mutating call that reached the scheduler.

    It can also fail reads (``failing_get_job``: job ids whose ``get_job`` raises
    ``TransientError``; ``failing_listing``: ``list_nodes``/``list_jobs`` raise it) and crash the
    process around a mutating call: ``crash_before=N`` raises :class:`Crash` instead of issuing
    the N-th mutating call (1-based, counted on this proxy), ``crash_after=N`` raises it right
    after the N-th call took effect.
    """

    def __init__(
        self,
        inner: Scheduler,
        clock: Clock,
        *,
        crash_before: int | None = None,
        crash_after: int | None = None,
    ) -> None:
        self.inner = inner
        self.clock = clock
        self.calls: list[Call] = []
        self.failing_get_job: set[JobId] = set()
        self.failing_listing = False
        self.crash_before = crash_before
        self.crash_after = crash_after
        self.attempted = 0
        """Mutating calls medic made on this proxy, including one that crashed before it."""

    @property
    def cluster(self) -> ClusterName:
        return self.inner.cluster

    # --- reads --------------------------------------------------------------------------------
    def list_nodes(self) -> Sequence[Any]:
        if self.failing_listing:
            raise TransientError("scheduler busy (test): list_nodes")
        return self.inner.list_nodes()

    def list_jobs(self) -> Sequence[Job]:
        if self.failing_listing:
            raise TransientError("scheduler busy (test): list_jobs")
        return self.inner.list_jobs()

    def get_job(self, job_id: JobId) -> Job:
        if job_id in self.failing_get_job:
            raise TransientError(f"scheduler busy (test): get_job {job_id}")
        return self.inner.get_job(job_id)

    # --- writes -------------------------------------------------------------------------------
    def requeue_hold(self, job_id: JobId) -> None:
        self._mutate("requeue_hold", job_id)

    def set_admin_comment(self, job_id: JobId, text: str) -> None:
        # medic's hold mark, not a step of the plan: neither recorded nor a crash point
        self.inner.set_admin_comment(job_id, text)

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        self._mutate("set_excluded_nodes", job_id, frozenset(nodes))

    def release(self, job_id: JobId) -> None:
        self._mutate("release", job_id)

    def cancel(self, job_id: JobId, reason: str) -> None:
        self._mutate("cancel", job_id, reason)

    def drain_node(self, node: NodeName, reason: str) -> None:
        self._mutate("drain_node", node, reason)

    def resume_node(self, node: NodeName, reason: str) -> None:
        self._mutate("resume_node", node, reason)

    def _mutate(self, name: str, *args: Any) -> None:
        self.attempted += 1
        if self.crash_before == self.attempted:
            raise Crash(f"killed before {name}")
        getattr(self.inner, name)(*args)
        self.calls.append(Call(name, args, self.clock.now()))
        if self.crash_after == self.attempted:
            raise Crash(f"killed after {name}")

    # --- queries for assertions ---------------------------------------------------------------
    def names(self, target: str | None = None) -> list[str]:
        """The mutating commands issued (for one job or node), in order."""
        return [c.name for c in self.calls if target is None or c.target == target]

    def count(self, name: str, target: str | None = None) -> int:
        return self.names(target).count(name)


class RecordingLogs:
    """``LogSource`` proxy that keeps every line it handed to medic."""

    def __init__(self, inner: LogSource) -> None:
        self.inner = inner
        self.lines: list[LogLine] = []

    def read_new(self, jobs: Sequence[Job]) -> Sequence[LogLine]:
        lines = self.inner.read_new(jobs)
        self.lines.extend(lines)
        return lines

    def of_job(self, job_id: JobId) -> list[LogLine]:
        return [line for line in self.lines if line.job_id == job_id]


@dataclass(slots=True)
class _Fault:
    job_id: JobId
    error: Exception
    remaining: int | None
    """Calls that still fail; None: until healed."""
    raised: int = 0


def _names(arg: object, job_id: JobId) -> bool:
    if isinstance(arg, list | tuple):
        return any(isinstance(row, tuple) and row and row[0] == job_id for row in arg)
    return arg == job_id


class FaultyStore:
    """``Store`` proxy that delegates everything, except that :meth:`fail` makes one method raise
    for one job (the job id is the method's second argument, after the cluster, or the first
    item of one of its rows: ``update_progress_many``)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self._faults: dict[str, _Fault] = {}

    def fail(
        self, method: str, job_id: JobId, error: Exception, *, times: int | None = None
    ) -> None:
        self._faults[method] = _Fault(job_id, error, times)

    def heal(self, method: str) -> None:
        self._faults.pop(method, None)

    def raised(self, method: str) -> int:
        fault = self._faults.get(method)
        return 0 if fault is None else fault.raised

    def armed(self, method: str) -> bool:
        fault = self._faults.get(method)
        return fault is not None and (fault.remaining is None or fault.remaining > 0)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._faults:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            fault = self._faults.get(name)
            hit = fault is not None and len(args) > 1 and _names(args[1], fault.job_id)
            if fault is not None and hit and (fault.remaining is None or fault.remaining > 0):
                if fault.remaining is not None:
                    fault.remaining -= 1
                fault.raised += 1
                raise fault.error
            return attr(*args, **kwargs)

        return call


@dataclass
class Harness:
    """One simulated cluster, one store and the control loop between them."""

    clock: FakeClock
    sim: SimCluster
    store: SqlStore
    scheduler: RecordingScheduler
    logs: RecordingLogs
    settings: Settings
    loop: ControlLoop = field(init=False)
    reports: list[PassReport] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.loop = self.build_loop()

    # --- medic --------------------------------------------------------------------------------
    def build_loop(
        self, *, scheduler: Scheduler | None = None, store: Store | None = None
    ) -> ControlLoop:
        return ControlLoop(
            scheduler=scheduler or self.scheduler,
            logs=self.logs,
            store=store or self.store,
            modes=self.store,
            diagnoser=SignatureDiagnoser(),
            clock=self.clock,
            metrics=NullMetrics(),
            settings=self.settings,
        )

    def restart(
        self, *, scheduler: Scheduler | None = None, store: Store | None = None
    ) -> ControlLoop:
        """A new medic process: a fresh loop (no in-memory state) on the same store and cluster."""
        self.loop = self.build_loop(scheduler=scheduler, store=store)
        return self.loop

    def run(self, seconds: float, step: float = 0.2) -> None:
        """Advance virtual time by ``seconds``, one loop pass every ``step`` seconds."""
        for _ in range(round(seconds / step)):
            self.clock.advance(step)
            self.reports.append(self.loop.run_once())

    def run_until(
        self, condition: Callable[[], bool], *, within: float, step: float = 0.2
    ) -> float:
        """Run passes until ``condition()`` holds; the virtual seconds it took."""
        start = self.clock.now()
        for _ in range(round(within / step)):
            self.clock.advance(step)
            self.reports.append(self.loop.run_once())
            if condition():
                return (self.clock.now() - start).total_seconds()
        raise AssertionError(f"condition not met within {within} s of virtual time")

    # --- cluster ------------------------------------------------------------------------------
    def submit(
        self,
        name: str,
        *,
        partition: str = "p0",
        comment: str | None = None,
        num_nodes: int = 2,
        train_iters: int = 100_000,
    ) -> JobId:
        spec = JobSpec(name, num_nodes, partition, comment, train_iters)
        return self.sim.workload.submit(spec)

    def job(self, job_id: JobId) -> Job:
        """The job as the scheduler has it now (read past the proxy: not a medic call)."""
        return self.sim.scheduler.get_job(job_id)

    def inject(self, kind: FaultKind, job_id: JobId, node: NodeName | None = None) -> FaultRecord:
        """Inject ``kind`` into the job, on its last node unless told (deterministic)."""
        if node is None and kind not in (FaultKind.APP_BUG, FaultKind.CUDA_OOM):
            node = self.job(job_id).nodes[-1]
        return self.sim.fault_injector.inject(kind, job_id, node)

    def saved_checkpoints(self, job_id: JobId, until: datetime | None = None) -> list[int]:
        """Steps of the checkpoints the job's logs say were saved (up to ``until``)."""
        steps = []
        for line in self.logs.of_job(job_id):
            match = _SAVED.search(line.text)
            if match and (until is None or line.time <= until):
                steps.append(int(match.group(1)))
        return steps

    # --- store --------------------------------------------------------------------------------
    def audit(self, job_id: JobId | None = None, kind: AuditKind | None = None) -> list[AuditEvent]:
        return self.store.query_audit(cluster=CLUSTER, job_id=job_id, kind=kind, limit=100_000)

    def kinds(self, job_id: JobId) -> list[AuditKind]:
        return [e.kind for e in self.audit(job_id)]

    def advice(self, job_id: JobId) -> Advice | None:
        return self.store.advice_for_job(CLUSTER, job_id)

    def verdicts(self, job_id: JobId) -> list[Verdict]:
        return self.store.list_verdicts(CLUSTER, job_id)

    def detections(self, job_id: JobId, attempt: int | None = None) -> list[Detection]:
        return self.store.list_detections(CLUSTER, job_id, attempt)

    def actions(self, job_id: JobId) -> list[ActionRecord]:
        return self.store.list_actions(CLUSTER, job_id)


class MakeHarness(Protocol):
    def __call__(
        self,
        *,
        mode: Mode = ...,
        sim: SimSettings = ...,
        policy: PolicySettings = ...,
        detect: DetectSettings = ...,
        loop: LoopSettings = ...,
    ) -> Harness: ...


@pytest.fixture
def make_harness(tmp_path: Path) -> Iterator[MakeHarness]:
    """Builds harnesses; each gets its own SQLite file, closed at teardown."""
    stores: list[SqlStore] = []

    def make(
        *,
        mode: Mode = Mode.OBSERVE,
        sim: SimSettings = SIM,
        policy: PolicySettings = PolicySettings(),  # noqa: B008 - frozen value object
        detect: DetectSettings = DetectSettings(),  # noqa: B008 - frozen value object
        loop: LoopSettings = LoopSettings(),  # noqa: B008 - frozen value object
    ) -> Harness:
        clock = FakeClock()
        cluster = SimCluster(clock, sim, cluster=CLUSTER)
        store = create_store(f"sqlite:///{tmp_path}/medic-{len(stores)}.db")
        stores.append(store)
        settings = Settings(
            scheduler=SchedulerSettings(cluster=CLUSTER, mode=mode),
            sim=sim,
            detect=detect,
            policy=policy,
            loop=loop,
        )
        return Harness(
            clock=clock,
            sim=cluster,
            store=store,
            scheduler=RecordingScheduler(cluster.scheduler, clock),
            logs=RecordingLogs(cluster.logs),
            settings=settings,
        )

    yield make
    for store in stores:
        store.close()
