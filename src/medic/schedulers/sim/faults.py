"""Fault injection into the simulated cluster: pick the victim, apply the effect, record it.

Effects, as docs/simulator.md lists them:

- ``xid79``, ``ecc_dbe``, ``ib_link_down``: kernel line and rank errors on the node now, NCCL
  watchdog on the other nodes and FAILED after ``nccl_timeout_seconds``; the node stays broken
  (a new attempt placed there fails at start the same way) until ``node_repair_seconds`` pass or
  it is rebooted.
- ``node_fail``: the node goes DOWN (``Not responding``) until repaired or rebooted; the job ends
  in NODE_FAIL a second later, without a line.
- ``hang``: the job goes silent and stays RUNNING until the 600 s watchdog, then FAILED.
- ``straggler``: the node computes 1.4x slower (and the whole job with it) until rebooted.
- ``app_bug``, ``cuda_oom``: strike at the job's next step, on this and on every later attempt.

The choice of job and node uses the cluster's seeded generator, so a run is reproducible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from medic.domain.cluster import JobState
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import JobId, NodeName
from medic.errors import PermanentError
from medic.schedulers.sim import node_lifecycle
from medic.schedulers.sim.state import GPUS_PER_NODE, SimJob, SimNode

if TYPE_CHECKING:
    from medic.schedulers.sim.cluster import SimCluster

__all__ = ["inject"]

_HARDWARE = frozenset({FaultKind.GPU_FELL_OFF_BUS, FaultKind.ECC_DBE, FaultKind.IB_LINK_DOWN})
_APPLICATION = frozenset({FaultKind.APP_BUG, FaultKind.CUDA_OOM})


def inject(
    sim: SimCluster, kind: FaultKind, job_id: JobId | None, node_name: NodeName | None
) -> FaultRecord:
    """Apply ``kind`` to a running job (and one of its nodes) and return the record."""
    job, node = _target(sim, job_id, node_name)
    step: int = job.step
    at_node: NodeName | None = node.name
    if kind in _HARDWARE:
        node.broken_gpu = sim.fault_rng.randrange(GPUS_PER_NODE)
        node_lifecycle.break_node(sim, node, kind)
        sim.training.hardware_failure(job, node, kind)
    elif kind is FaultKind.NODE_FAIL:
        node_lifecycle.break_node(sim, node, kind)
        sim.training.node_failure(job)
    elif kind is FaultKind.HANG:
        sim.training.hang(job, node)
    elif kind is FaultKind.STRAGGLER:
        node.slow = True
    else:
        assert kind in _APPLICATION
        # The bug lives in the code or the data, not in a node: it fires at the next step and at
        # that same step on every later attempt.
        step = job.step + 1
        job.bug_steps.setdefault(step, kind)
        at_node = None
    return FaultRecord(
        id=len(sim.fault_records) + 1,
        kind=kind,
        job_id=job.id,
        node=at_node,
        time=sim.events.when(),
        step=step,
    )


def _target(
    sim: SimCluster, job_id: JobId | None, node_name: NodeName | None
) -> tuple[SimJob, SimNode]:
    node = sim.node(node_name) if node_name is not None else None
    if job_id is not None:
        job = sim.job(job_id)
    elif node is not None:
        if node.job is None:
            raise PermanentError(f"no job runs on {node.name}")
        job = node.job
    else:
        candidates = [j for j in sim.jobs.values() if _can_take(j)]
        if not candidates:
            raise PermanentError("no running job to inject a fault into")
        job = sim.fault_rng.choice(candidates)
    if not _can_take(job):
        raise PermanentError(f"job {job.id} is not running healthily ({job.state.value})")
    if node is None:
        node = sim.fault_rng.choice(job.nodes)
    elif node.job is not job:
        raise PermanentError(f"job {job.id} does not run on {node.name}")
    return job, node


def _can_take(job: SimJob) -> bool:
    """Running, with live ranks: a job already dying of an earlier fault takes no other."""
    return job.state is JobState.RUNNING and job.alive
