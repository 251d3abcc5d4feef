"""Thin facades that expose a :class:`~medic.schedulers.sim.cluster.SimCluster` through medic's
ports (``Scheduler``, ``LogSource``, ``NodeProvider``, ``FaultInjector``, ``Workload``).

Each facade only delegates; the cluster advances virtual time on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from medic.domain.cluster import Job, JobSpec, Node
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.logs import LogLine
from medic.domain.repairs import RepairAction

if TYPE_CHECKING:
    from medic.schedulers.sim.cluster import SimCluster

__all__ = ["SimFaultInjector", "SimLogSource", "SimNodeProvider", "SimScheduler", "SimWorkload"]


class SimScheduler:
    """``Scheduler`` port of the simulated cluster."""

    def __init__(self, sim: SimCluster) -> None:
        self._sim = sim

    @property
    def cluster(self) -> ClusterName:
        return self._sim.cluster

    def list_nodes(self) -> Sequence[Node]:
        return self._sim.list_nodes()

    def list_jobs(self) -> Sequence[Job]:
        return self._sim.list_jobs()

    def get_job(self, job_id: JobId) -> Job:
        return self._sim.get_job(job_id)

    def requeue_hold(self, job_id: JobId) -> None:
        self._sim.requeue_hold(job_id)

    def set_admin_comment(self, job_id: JobId, text: str) -> None:
        self._sim.set_admin_comment(job_id, text)

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        self._sim.set_excluded_nodes(job_id, nodes)

    def release(self, job_id: JobId) -> None:
        self._sim.release(job_id)

    def cancel(self, job_id: JobId, reason: str) -> None:
        self._sim.cancel(job_id, reason)

    def drain_node(self, node: NodeName, reason: str) -> None:
        self._sim.drain_node(node, reason)

    def resume_node(self, node: NodeName, reason: str) -> None:
        self._sim.resume_node(node, reason)


class SimLogSource:
    """``LogSource`` port: every line emitted since the previous call, whatever ``jobs`` says
    (the simulator has no files to tail)."""

    def __init__(self, sim: SimCluster) -> None:
        self._sim = sim

    def read_new(self, jobs: Sequence[Job]) -> Sequence[LogLine]:
        return self._sim.read_new()


class SimNodeProvider:
    """``NodeProvider`` port: reboots, boot ids and every repair action on simulated nodes."""

    def __init__(self, sim: SimCluster) -> None:
        self._sim = sim

    def reboot(self, node: NodeName, reason: str) -> None:
        self._sim.reboot(node, reason)

    def can(self, action: RepairAction) -> bool:
        return True  # the simulator does every action (docs/simulator.md)

    def boot_id(self, node: NodeName) -> str:
        return self._sim.boot_id(node)

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        self._sim.execute(node, action, repair_id)

    def rejoined(self, node: NodeName, action: RepairAction, boot_id_before: str | None) -> bool:
        return self._sim.rejoined(node, action, boot_id_before)

    def in_flight(self, node: NodeName, action: RepairAction) -> bool | None:
        return self._sim.in_flight(node, action)


class SimFaultInjector:
    """``FaultInjector`` port: faults with the effects documented in docs/simulator.md."""

    def __init__(self, sim: SimCluster) -> None:
        self._sim = sim

    def inject(
        self, kind: FaultKind, job_id: JobId | None = None, node: NodeName | None = None
    ) -> FaultRecord:
        return self._sim.inject(kind, job_id, node)

    def faults(self) -> list[FaultRecord]:
        return self._sim.faults()


class SimWorkload:
    """``Workload`` port: submits jobs to the simulated queue."""

    def __init__(self, sim: SimCluster) -> None:
        self._sim = sim

    def submit(self, spec: JobSpec) -> JobId:
        return self._sim.submit(spec)
