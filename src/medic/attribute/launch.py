"""Launch failures name their node (issue 12, rule 2).

A job that never started because one node could not launch its part shows it in that node's own
lines: pyxis/enroot could not import or start the container (``slurmstepd-node003: error: pyxis:
...``), PMIx or PMI-2 wire-up failed there, ssh or pdsh could not reach it (``ssh: connect to host
node003 port 22: Connection refused``, ``pdsh@login: node003: ssh exited with exit code 255``),
srun reports ``Task launch for StepId=... failed on node node003``, its ranks find fewer GPUs than
they were started for (``CUDA error: invalid device ordinal``). When such evidence comes from a
strict minority of the job's nodes (and fewer than
:data:`~medic.attribute.network.SYSTEMIC_NODES`), those nodes are implicated; on every node alike
(a registry down, a wrong image name) it names nobody.

pyxis/enroot lines in the job's combined output often carry no host (``slurmstepd: error: pyxis:
...`` without ``-node003``); srun's own lines then say which node's task failed (``srun: error:
node003: task 2: Exited with exit code 1``, ``Task launch for StepId=... failed on node node003``,
``Node failure on node003``): an unplaced launch failure is placed on the nodes those lines name,
when they are a strict minority of the job (``placed_by_srun``). Every node failing alike still
names nobody.

A JAX process that never reached the coordination service's start-up barrier is named by its
task number in its peers' timeout (``/job:jax_worker/replica:0/task:2``,
``jax.barrier_task_missing``); under srun that is the Slurm task, so the line is placed on the
node srun's own lines ran that task on (``srun: error: node003: task 2: Killed``) and is then a
launch failure like the others.

A node that printed nothing while every other node did (``silent_nodes``, given by the caller
that reads the logs) never started its part either: when the attempt failed and nothing else
implicates a node, it is implicated with a derived finding (:data:`SILENT_NODE_SIGNATURE_ID`).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from medic.attribute.network import SYSTEMIC_NODES
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import JobId, NodeName, SignatureId

__all__ = [
    "LAUNCH_SIGNATURE_PREFIXES",
    "SILENT_NODE_SIGNATURE_ID",
    "launch_failures",
    "placed_by_srun",
    "silent_node_findings",
]

SILENT_NODE_SIGNATURE_ID = SignatureId("medic.launch.silent_node")
LAUNCH_SIGNATURE_PREFIXES = (
    "pyxis.",
    "enroot.",
    "spank.",
    "docker.",
    "container.",
    "pmix.",
    "slurm.task_launch_failed",
    "slurm.pmix_error",
    "slurm.pmix_init_failed",
    "slurm.pmi2_error",
    "slurm.tmpdir_failed",
    "slurm.execve_failed",
    "gpu.container_cli_error",
    "jax.barrier_task_missing",
    "pdsh.ssh_failed",
    "ssh.connect_failed",
    # A node that sees fewer GPUs than the job's ranks (a GPU off the bus, a gres or
    # CUDA_VISIBLE_DEVICES set-up of its own); on every node it is the job's nproc_per_node
    # (policy.deterministic_errors stops it).
    "cuda.invalid_device_ordinal",
)


def _is_launch(d: Detection) -> bool:
    return (
        d.signature_id.startswith(LAUNCH_SIGNATURE_PREFIXES)
        and d.role in (Role.ROOT, Role.CASCADE)
        and d.domain is not FaultDomain.NONE
    )


def _minority(count: int, total: int) -> bool:
    return 0 < count < SYSTEMIC_NODES and count * 2 < max(total, 2) + (1 if total == 2 else 0)


_SRUN_NAMES_NODE = frozenset(
    {
        "slurm.task_exit",
        "slurm.task_launch_failed",
        "slurm.task_launch_failed_node_local",
        "slurm.node_failure",
    }
)
"""srun's lines that name the node whose task failed (exit code, launch, node failure)."""
_SRUN_NAMES_TASKS = frozenset(
    {"slurm.task_exit", "slurm.task_exit_sigterm", "slurm.task_killed", "slurm.task_terminated"}
)
"""srun's lines that say which tasks ran on a node (as they ended)."""


def placed_by_srun(detections: Sequence[Detection], nodes: Sequence[NodeName]) -> list[NodeName]:
    """The nodes srun names as failing (see the module docstring), when they are a strict
    minority of the job's; empty otherwise."""
    known = set(nodes)
    named = {
        NodeName(d.fields["node"])
        for d in detections
        if d.signature_id in _SRUN_NAMES_NODE and d.fields.get("node") in known
    }
    if len(known) < 2 or not _minority(len(named), len(known)):
        return []
    return sorted(named)


_TASK_MISSING = SignatureId("jax.barrier_task_missing")
_TASK_RANGE = re.compile(r"(\d{1,7})(?:-(\d{1,7}))?")


def _task_numbers(spec: str) -> list[int]:
    """srun's task list (``2``, ``8-15``, ``2,4-5,7``, ``[0-3]``) as numbers; at most 4,096."""
    found: list[int] = []
    for m in _TASK_RANGE.finditer(spec):
        low = int(m[1])
        high = int(m[2]) if m[2] else low
        found.extend(range(low, min(high, low + 4096) + 1))
    return found[:4096]


def _place_missing_tasks(detections: Sequence[Detection], known: set[NodeName]) -> list[Detection]:
    """JAX's missing-task lines with ``node`` set to the node srun ran that task on (see the
    module docstring); unchanged when srun's lines do not say."""
    if not any(d.signature_id == _TASK_MISSING for d in detections):
        return list(detections)
    task_node: dict[int, NodeName] = {}
    for d in detections:
        if d.signature_id in _SRUN_NAMES_TASKS and d.fields.get("node") in known:
            for number in _task_numbers(d.fields.get("task", "")):
                task_node.setdefault(number, NodeName(d.fields["node"]))
    result = []
    for d in detections:
        task = d.fields.get("task", "")
        if d.signature_id == _TASK_MISSING and task.isdigit() and int(task) in task_node:
            d = replace(d, fields={**d.fields, "node": task_node[int(task)]})
        result.append(d)
    return result


def launch_failures(detections: Sequence[Detection], nodes: Sequence[NodeName]) -> list[Detection]:
    """The detections, launch failures of a minority of nodes rewritten to implicate their node
    (as roots: the node could not start its part)."""
    known = set(nodes)
    detections = _place_missing_tasks(detections, known)
    placed: dict[int, NodeName] = {}
    unplaced: list[int] = []
    for i, d in enumerate(detections):
        if not _is_launch(d):
            continue
        named = d.fields.get("node")
        node = NodeName(named) if named in known else d.node
        if node is not None and node in known:
            placed[i] = node
        elif node is None:
            unplaced.append(i)
    by_srun = placed_by_srun(detections, nodes) if unplaced else []
    if by_srun:
        detections = [*detections]
        for i in unplaced:  # one copy per node srun names (usually one)
            placed[i] = by_srun[0]
            for node in by_srun[1:]:
                detections.append(replace(detections[i], node=node))
                placed[len(detections) - 1] = node
    failing = set(placed.values())
    if len(known) < 2 or not _minority(len(failing), len(known)):
        return list(detections)
    result = list(detections)
    for i, node in placed.items():
        d = result[i]
        domain = FaultDomain.SYSTEM_SOFTWARE if d.domain is FaultDomain.APPLICATION else d.domain
        result[i] = replace(
            d,
            node=node,
            domain=domain,
            role=Role.ROOT,
            action=JobAction.RESTART,
            implicates_node=True,
            fields={**d.fields, "launch": "true", "node_action": "escalate"},
        )
    return result


def silent_node_findings(
    job_id: JobId | None,
    attempt: int,
    silent: Iterable[NodeName],
    nodes: Sequence[NodeName],
    when: datetime,
) -> list[Detection]:
    """One derived root per silent node, when they are a strict minority of the job."""
    quiet = sorted(set(silent) & set(nodes))
    if len(nodes) < 2 or not _minority(len(quiet), len(nodes)):
        return []
    return [
        Detection(
            job_id=job_id,
            attempt=attempt,
            signature_id=SILENT_NODE_SIGNATURE_ID,
            domain=FaultDomain.SYSTEM_SOFTWARE,
            role=Role.ROOT,
            severity=Severity.ERROR,
            action=JobAction.RESTART,
            time=when,
            node=node,
            implicates_node=True,
            text="",
            fields={"node_action": "escalate", "finding": f"{node} printed nothing"},
        )
        for node in quiet
    ]
