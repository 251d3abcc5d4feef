"""Mutable state of the simulated cluster's nodes and jobs, and its translation to domain types.

Only the simulator mutates these records; the ports hand out the frozen ``Node`` / ``Job``
snapshots built by :meth:`SimNode.to_domain` and :meth:`SimJob.to_domain`.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from medic.domain.cluster import Job, JobState, Node, NodeState
from medic.domain.faults import FaultKind
from medic.domain.ids import ClusterName, JobId, NodeName

__all__ = ["GPUS_PER_NODE", "SimJob", "SimNode"]

GPUS_PER_NODE = 8


@dataclass(slots=True, eq=False)
class SimNode:
    """One simulated machine. Allocation is exclusive: a node runs at most one job."""

    name: NodeName
    index: int
    """0-based position in the cluster; also gives the node's address 10.0.a.b."""
    partition: str
    seed: int
    job: SimJob | None = None
    drain_reason: str | None = None
    """Set while drained (the drain flag and its reason)."""
    down_reason: str | None = None
    """Set while the node is DOWN: ``Not responding`` after a node failure, or rebooting."""
    broken: FaultKind | None = None
    """Hardware fault that makes every attempt placed here fail at start, until repaired."""
    broken_gpu: int = 0
    repair_gen: int = 0
    """Bumped at every new break and every reboot, so a stale repair event is ignored."""
    slow: bool = False
    """Straggler: compute runs 1.4x slower until the node is rebooted."""
    rebooting: bool = False
    boot_count: int = 0
    _snapshot: Node | None = None

    @property
    def is_free(self) -> bool:
        """True when the scheduler may place a new job here (it may still be secretly broken)."""
        return self.job is None and self.drain_reason is None and self.down_reason is None

    @property
    def state(self) -> NodeState:
        if self.down_reason is not None:
            return NodeState.DOWN
        if self.drain_reason is not None:
            return NodeState.DRAINING if self.job is not None else NodeState.DRAINED
        return NodeState.ALLOCATED if self.job is not None else NodeState.IDLE

    @property
    def boot_id(self) -> str:
        # Derived from (seed, name, boot count) so it is deterministic and costs nothing until
        # someone asks; it changes at every reboot, as a real /proc boot_id does.
        digest = hashlib.sha256(f"{self.seed}:{self.name}:{self.boot_count}".encode()).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def to_domain(self) -> Node:
        state = self.state
        reason = self.drain_reason if self.drain_reason is not None else self.down_reason
        snap = self._snapshot
        # The benchmark lists 2,000 nodes several times a second; reuse the frozen snapshot
        # while nothing visible changed.
        if snap is None or snap.state is not state or snap.reason != reason:
            snap = Node(
                name=self.name,
                state=state,
                partitions=(self.partition,),
                gpus=GPUS_PER_NODE,
                reason=reason,
            )
            self._snapshot = snap
        return snap


@dataclass(slots=True, eq=False)
class SimJob:
    """One submitted job and its current attempt."""

    id: JobId
    name: str
    partition: str
    num_nodes: int
    train_iters: int
    comment: str | None
    order: int
    """Submission order: FIFO position, kept across requeues (as Slurm keeps the priority)."""
    submit_time: datetime
    rng: random.Random
    """Per-job jitter of the metrics, so one job's lines do not depend on other jobs."""
    state: JobState = JobState.PENDING
    held: bool = False
    excluded: frozenset[NodeName] = frozenset()
    admin_comment: str | None = None
    restart_count: int = 0
    nodes: tuple[SimNode, ...] = ()
    start_time: datetime | None = None
    end_time: datetime | None = None
    exit_code: int | None = None
    run: int = 0
    """Bumped whenever an attempt starts or stops: events carry it and are ignored when stale, so
    a requeued attempt is never failed by a leftover event of the previous one."""
    step: int = 0
    """Last completed iteration (continues across attempts from the loaded checkpoint)."""
    saved_step: int = 0
    """Newest saved checkpoint; the next attempt resumes from it."""
    alive: bool = False
    """True while the current attempt's ranks make progress (False after a fatal fault)."""
    bug_steps: dict[int, FaultKind] = field(default_factory=dict)
    """Application faults by the step at which they strike, on every attempt."""
    _snapshot: Job | None = None
    _snapshot_key: tuple[object, ...] = ()

    @property
    def world(self) -> int:
        return self.num_nodes * GPUS_PER_NODE

    @property
    def global_batch(self) -> int:
        return 32 * self.world

    def to_domain(self, cluster: ClusterName) -> Job:
        # Every change visible in a Job moves one of these (start, stop and requeue bump ``run``),
        # so the frozen snapshot is reused while the key holds: list_jobs runs every loop pass.
        key: tuple[object, ...] = (cluster, self.run, self.state, self.held, self.restart_count)
        key = (*key, self.excluded, self.admin_comment)
        if self._snapshot is not None and self._snapshot_key == key:
            return self._snapshot
        self._snapshot_key = key
        self._snapshot = Job(
            id=self.id,
            cluster=cluster,
            name=self.name,
            state=self.state,
            partition=self.partition,
            nodes=tuple(n.name for n in self.nodes),
            excluded_nodes=self.excluded,
            restart_count=self.restart_count,
            held=self.held,
            num_nodes=self.num_nodes,
            submit_time=self.submit_time,
            start_time=self.start_time,
            end_time=self.end_time,
            exit_code=self.exit_code,
            comment=self.comment,
            admin_comment=self.admin_comment,
        )
        return self._snapshot
