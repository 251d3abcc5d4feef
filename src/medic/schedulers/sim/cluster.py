"""The simulated GPU cluster: nodes, jobs, FIFO scheduling and every operation the ports expose.

:class:`SimCluster` holds all state. Each public method first advances the simulation to the
injected clock's ``now()`` (see :mod:`medic.schedulers.sim.events`), then acts at that instant.
The port facades (:mod:`medic.schedulers.sim.adapters`) are attributes of the cluster::

    sim = SimCluster(clock, SimSettings(nodes=32))
    job_id = sim.workload.submit(JobSpec("pretrain", num_nodes=4))
    ...  # time passes on the clock
    sim.fault_injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id)
    lines = sim.logs.read_new(sim.scheduler.list_jobs())

Nodes ``node001``... (zero-padded to at least three digits, wider on clusters of 1,000 nodes or
more so names sort) are split into partitions ``p0``... in contiguous blocks, so a multi-node job
gets neighbouring nodes. Scheduling is FIFO by submission order, first fit: a job that does not fit
now does not block the jobs behind it (:mod:`medic.schedulers.sim.placement`). A job submitted
without a partition goes to ``p0``. Faults, reboots and repairs of a node are
:mod:`medic.schedulers.sim.node_lifecycle`'s.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Concatenate, ParamSpec, TypeVar

from medic.config.settings import SimLogProfile, SimSettings
from medic.domain.cluster import Job, JobSpec, JobState, Node
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.logs import LogLine
from medic.domain.repairs import RepairAction
from medic.errors import ConfigError, NotFoundError, PermanentError
from medic.ports import Clock
from medic.schedulers.sim import faults, node_lifecycle, render
from medic.schedulers.sim.adapters import (
    SimFaultInjector,
    SimLogSource,
    SimNodeProvider,
    SimScheduler,
    SimWorkload,
)
from medic.schedulers.sim.events import EventQueue, LineBuffer
from medic.schedulers.sim.node_lifecycle import REBOOT_SECONDS
from medic.schedulers.sim.placement import Placement
from medic.schedulers.sim.state import SimJob, SimNode
from medic.schedulers.sim.training import Training

__all__ = ["RETENTION_SECONDS", "SimCluster"]

RETENTION_SECONDS = 600.0
"""How long an ended job stays in ``list_jobs`` (and ``get_job``) so medic sees its final state."""

_REQUEUEABLE = frozenset(
    {JobState.FAILED, JobState.NODE_FAIL, JobState.TIMEOUT, JobState.PREEMPTED}
)
_SIM = ClusterName("sim")

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _public(
    method: Callable[Concatenate[SimCluster, _P], _R],
) -> Callable[Concatenate[SimCluster, _P], _R]:
    """Every public operation: under the lock, after advancing to the clock's now, and followed
    by a scheduling pass (what it changed may let a pending job start at once)."""

    @functools.wraps(method)
    def wrapper(self: SimCluster, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock, self.meter():
            self._advance()
            try:
                return method(self, *args, **kwargs)
            finally:
                self._placement.schedule_if_dirty()

    return wrapper


class SimCluster:
    """A deterministic simulated cluster driven by an injected clock."""

    def __init__(self, clock: Clock, settings: SimSettings, cluster: ClusterName = _SIM) -> None:
        _validate(settings)
        self.clock = clock
        self.settings = settings
        self.cluster = cluster
        self.events = EventQueue(clock.now())
        self.lines = LineBuffer(self.events)
        self.training = Training(self.events, self.lines, settings, self._attempt_ended)
        self.fault_rng = random.Random(f"{settings.seed}:faults")
        self.fault_records: list[FaultRecord] = []
        self.partitions = tuple(f"p{i}" for i in range(settings.partitions))
        self.nodes: dict[NodeName, SimNode] = {}
        self._placement = Placement(self.partitions, self._started)
        width = max(3, len(str(settings.nodes)))
        for i in range(settings.nodes):
            part = self.partitions[i * settings.partitions // settings.nodes]
            node = SimNode(NodeName(f"node{i + 1:0{width}d}"), i, part, settings.seed)
            self.nodes[node.name] = node
            self._placement.add_node(node)
        self._all_nodes = tuple(self.nodes.values())
        self.jobs: dict[JobId, SimJob] = {}
        self.repairs: list[tuple[NodeName, RepairAction, int, datetime]] = []
        """Repairs carried out through :meth:`execute`: (node, action, repair id, time)."""
        self._next_order = 0
        self._node_list: list[Node] | None = None
        """Cached ``list_nodes`` answer; dropped whenever a node changes."""
        # The demo's API thread and the control loop may call in concurrently.
        self._lock = threading.RLock()
        self.meter: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext
        """Entered around every public call (advancing included): the scale benchmark sets it to
        stop its clock there, so that the simulator's own work never counts as medic's."""
        if settings.log_profile is SimLogProfile.PRODUCTION:
            self.events.after(0.0, self._kernel_noise)
        self.scheduler = SimScheduler(self)
        self.logs = SimLogSource(self)
        self.node_provider = SimNodeProvider(self)
        self.fault_injector = SimFaultInjector(self)
        self.workload = SimWorkload(self)

    # --- time -------------------------------------------------------------------------------
    def advance(self) -> None:
        """Process everything due up to the clock's now (a clock going backwards is ignored)."""
        with self._lock, self.meter():
            self._advance()

    def _advance(self) -> None:
        self.events.run_until(
            self.events.seconds(self.clock.now()), self._placement.schedule_if_dirty
        )
        self._placement.schedule_if_dirty()

    # --- workload and queries ---------------------------------------------------------------
    @_public
    def submit(self, spec: JobSpec) -> JobId:
        partition = spec.partition or self.partitions[0]
        if partition not in self._placement.size:
            raise PermanentError(f"unknown partition {partition!r}")
        if not 1 <= spec.num_nodes <= self._placement.size[partition]:
            raise PermanentError(
                f"{spec.num_nodes} nodes requested; partition {partition} has "
                f"{self._placement.size[partition]}"
            )
        if spec.train_iters < 1:
            raise PermanentError("train_iters must be at least 1")
        self._next_order += 1
        job_id = JobId(str(self._next_order))
        job = SimJob(
            id=job_id,
            name=spec.name,
            partition=partition,
            num_nodes=spec.num_nodes,
            train_iters=spec.train_iters,
            comment=spec.comment,
            order=self._next_order,
            submit_time=self.events.when(),
            rng=random.Random(f"{self.settings.seed}:job:{job_id}"),
        )
        self.jobs[job_id] = job
        self._placement.submitted(job)
        return job_id

    @_public
    def list_nodes(self) -> list[Node]:
        if self._node_list is None:
            self._node_list = [n.to_domain() for n in self.nodes.values()]
        return list(self._node_list)

    @_public
    def list_jobs(self) -> list[Job]:
        return [j.to_domain(self.cluster) for j in self.jobs.values()]

    @_public
    def get_job(self, job_id: JobId) -> Job:
        return self.job(job_id).to_domain(self.cluster)

    @_public
    def read_new(self) -> list[LogLine]:
        return self.lines.drain()

    # --- scheduler actions ------------------------------------------------------------------
    @_public
    def requeue_hold(self, job_id: JobId) -> None:
        job = self.job(job_id)
        if job.state is JobState.PENDING:
            job.held = True
            return
        if job.state is JobState.RUNNING:
            job.held = True
            job.restart_count += 1
            self.training.stop(job, JobState.PENDING)
        elif job.state in _REQUEUEABLE:
            job.held = True
            job.restart_count += 1
            job.run += 1  # forget the retention timer of the ended attempt
            job.state = JobState.PENDING
            job.nodes = ()
            job.start_time = job.end_time = job.exit_code = None
            self._placement.enqueue(job)
        else:
            raise PermanentError(f"job {job_id} is {job.state.value}; it cannot be requeued")

    @_public
    def set_admin_comment(self, job_id: JobId, text: str) -> None:
        self.job(job_id).admin_comment = text or None

    @_public
    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        job = self.job(job_id)
        if job.state is not JobState.PENDING:
            raise PermanentError(
                f"job {job_id} is {job.state.value}; excluded nodes change only while pending"
            )
        job.excluded = frozenset(nodes)
        self._placement.dirty = True

    @_public
    def release(self, job_id: JobId) -> None:
        job = self.job(job_id)
        if job.state is JobState.PENDING and job.held:
            job.held = False
            self._placement.dirty = True

    @_public
    def cancel(self, job_id: JobId, reason: str) -> None:
        # ``reason`` only matters for a real scheduler's records; the sim keeps none.
        job = self.job(job_id)
        if job.state is JobState.RUNNING:
            self.training.stop(job, JobState.CANCELLED)
        elif job.state is JobState.PENDING:
            job.run += 1
            job.state = JobState.CANCELLED
            job.end_time = self.events.when()
            self._attempt_ended(job, ())

    @_public
    def drain_node(self, node: NodeName, reason: str) -> None:
        sim_node = self.node(node)
        sim_node.drain_reason = reason
        self.touch(sim_node)

    @_public
    def resume_node(self, node: NodeName, reason: str) -> None:
        sim_node = self.node(node)
        sim_node.drain_reason = None
        self.touch(sim_node)

    # --- node provider ----------------------------------------------------------------------
    @_public
    def reboot(self, node: NodeName, reason: str) -> None:
        """Power-cycle: a job running there dies (NODE_FAIL), the node is DOWN for
        ``REBOOT_SECONDS``, then healthy (hardware faults and slowness gone) with a new boot id.
        A drain survives the reboot, as in Slurm. Rebooting a rebooting node does nothing."""
        node_lifecycle.restart(self, self.node(node), reason or "reboot", REBOOT_SECONDS)

    @_public
    def boot_id(self, node: NodeName) -> str:
        return self.node(node).boot_id

    @_public
    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        """Carry out a repair (:func:`~medic.schedulers.sim.node_lifecycle.execute`)."""
        node_lifecycle.execute(self, node, action, repair_id)

    @_public
    def rejoined(self, node: NodeName, action: RepairAction, boot_id_before: str | None) -> bool:
        return node_lifecycle.rejoined(self.node(node), action, boot_id_before)

    @_public
    def in_flight(self, node: NodeName, action: RepairAction) -> bool | None:
        """True while the node restarts (a restarting repair under way); every other action
        is over the moment it is carried out."""
        return self.node(node).rebooting

    # --- faults -----------------------------------------------------------------------------
    @_public
    def inject(
        self, kind: FaultKind, job_id: JobId | None = None, node: NodeName | None = None
    ) -> FaultRecord:
        record = faults.inject(self, kind, job_id, node)
        self.fault_records.append(record)
        return record

    @_public
    def faults(self) -> list[FaultRecord]:
        return list(self.fault_records)

    # --- lookups ----------------------------------------------------------------------------
    def job(self, job_id: JobId) -> SimJob:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise NotFoundError(f"no job {job_id} in cluster {self.cluster}") from None

    def node(self, node: NodeName) -> SimNode:
        try:
            return self.nodes[node]
        except KeyError:
            raise NotFoundError(f"no node {node} in cluster {self.cluster}") from None

    # --- internals --------------------------------------------------------------------------
    def touch(self, node: SimNode) -> None:
        """Keep the free-node index and the node listing in step with ``node`` after any change
        to it (every change of a node's state or reason goes through here or _started)."""
        self._node_list = None
        self._placement.touch(node)

    def _attempt_ended(self, job: SimJob, nodes: tuple[SimNode, ...]) -> None:
        for node in nodes:
            self.touch(node)
        if job.state is JobState.PENDING:
            self._placement.enqueue(job)
        elif job.state.is_terminal:
            self.events.after(RETENTION_SECONDS, self._forget, job, job.run)

    def _forget(self, job: SimJob, run: int) -> None:
        if job.run == run and job.state.is_terminal:
            del self.jobs[job.id]

    def _kernel_noise(self) -> None:
        """``production`` profile: a harmless kernel line on one node, a few nodes a minute per
        thousand nodes (at least three a minute in all)."""
        node = self.fault_rng.choice(self._all_nodes)
        self.lines.kernel(node.name, render.kernel_noise_line(self.fault_rng.randrange(100)))
        per_minute = max(3.0, 4.0 * len(self.nodes) / 1000.0)
        self.events.after(60.0 / per_minute, self._kernel_noise)

    def _started(self, job: SimJob, nodes: tuple[SimNode, ...]) -> None:
        self._node_list = None
        self.training.start(job, nodes)


def _validate(s: SimSettings) -> None:
    checks = [
        ("sim.nodes", s.nodes >= 1, "must be at least 1"),
        ("sim.partitions", 1 <= s.partitions <= s.nodes, "must be between 1 and sim.nodes"),
        ("sim.iteration_seconds", s.iteration_seconds > 0, "must be positive"),
        ("sim.checkpoint_every", s.checkpoint_every >= 1, "must be at least 1"),
        ("sim.nccl_timeout_seconds", s.nccl_timeout_seconds >= 0, "must not be negative"),
        ("sim.startup_seconds", s.startup_seconds >= 0, "must not be negative"),
        ("sim.node_repair_seconds", s.node_repair_seconds >= 0, "must not be negative"),
    ]
    for setting, ok, message in checks:
        if not ok:
            raise ConfigError(setting, message)
