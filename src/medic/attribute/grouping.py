"""Grouping: the detections of one attempt, placed on their nodes, ordered and split by role.

A detection belongs to the attempt when it is the job's (or unstamped: ``job_id`` None) and of the
attempt (or unstamped: ``attempt`` -1). Placement:

- a detection with a rank but no node is placed on the node that runs the rank: an explicit
  ``rank_nodes`` mapping when given, else the default layout ``rank = node_index *
  gpus_per_node + local_rank`` over the job's node list (Slurm's block distribution, the
  simulator's layout). A rank outside the job stays unplaced.
- a scheduler-domain detection that implicates a node and names it in its ``node`` field ("Node
  failure on node003", printed by srun on another host) is placed on the node it names: the line
  is about that node, not about the host that printed it.

Then the context rules rewrite or add detections: launch failures of a minority of nodes
implicate them (:mod:`medic.attribute.launch`), the attempt's Xids are reinterpreted in context
(:mod:`medic.attribute.xid`), peers' errors pointing at one node implicate it and the same fault
on many nodes implicates none (:mod:`medic.attribute.network`), and per-rank reports name a
straggler or a dead process (:mod:`medic.attribute.reports`), and a slow job names a node with
its own slowdown evidence (:mod:`medic.attribute.slowdown`). Implicated nodes outside the first
NVLink domain to fail, and the healthy ends of the NVLink links of a node that lost its GPU, are
victims (:mod:`medic.attribute.fate`).

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from medic.attribute.fate import fate_victims, link_victims
from medic.attribute.launch import launch_failures
from medic.attribute.network import apply_network_rules
from medic.attribute.reports import apply_report_rules
from medic.attribute.slowdown import apply_slowdown_rules
from medic.attribute.xid import apply_xid_rules
from medic.domain.cluster import Job
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role
from medic.domain.ids import NodeName

__all__ = [
    "DEFAULT_GPUS_PER_NODE",
    "AttemptEvents",
    "is_fatal",
    "node_of_rank",
    "order",
    "place",
    "strength",
    "utc",
]

DEFAULT_GPUS_PER_NODE = 8
"""Ranks per node in the default rank layout."""


def is_fatal(detection: Detection) -> bool:
    """True when the detection means the job's attempt is failing (root or cascade that calls for
    a restart or a stop)."""
    return detection.role in (Role.ROOT, Role.CASCADE) and detection.action in (
        JobAction.RESTART,
        JobAction.STOP,
    )


def utc(when: datetime) -> datetime:
    """Domain times are timezone-aware UTC; a naive one is read as UTC instead of raising on
    comparison."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def order(d: Detection) -> tuple[datetime, int, str, str, int]:
    """Sort key: time, then position in its source, then a stable tie-break."""
    return (utc(d.time), d.seq, d.signature_id, d.node or "", -1 if d.rank is None else d.rank)


def strength(d: Detection) -> int:
    """How strongly a root explains a failure: evidence against its node, then infrastructure,
    then application."""
    if d.implicates_node and d.node is not None:
        return 3
    return 2 if d.domain is not FaultDomain.APPLICATION else 1


def node_of_rank(
    rank: int,
    nodes: Sequence[NodeName],
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    rank_nodes: Mapping[int, NodeName] | None = None,
) -> NodeName | None:
    """The node that runs global ``rank``: ``rank_nodes`` first, then the default layout over
    ``nodes``; None when neither knows it."""
    if rank_nodes is not None and rank in rank_nodes:
        return rank_nodes[rank]
    if rank < 0 or gpus_per_node < 1:
        return None
    index = rank // gpus_per_node
    return nodes[index] if index < len(nodes) else None


def place(
    detections: Iterable[Detection],
    nodes: Sequence[NodeName],
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    rank_nodes: Mapping[int, NodeName] | None = None,
) -> list[Detection]:
    """The detections with their node filled in where the rank or the line says it (see the
    module docstring); the others unchanged."""
    result: list[Detection] = []
    for d in detections:
        named = d.fields.get("node")
        if d.domain is FaultDomain.SCHEDULER and d.implicates_node and named:
            d = replace(d, node=NodeName(named))
        elif d.node is None and d.rank is not None:
            node = node_of_rank(d.rank, nodes, gpus_per_node=gpus_per_node, rank_nodes=rank_nodes)
            if node is not None:
                d = replace(d, node=node)
        result.append(d)
    return result


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class AttemptEvents:
    """The detections of one attempt: placed, Xid rules applied, sorted and split by role."""

    def __init__(
        self,
        job: Job,
        attempt: int,
        detections: Iterable[Detection],
        *,
        gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
        rank_nodes: Mapping[int, NodeName] | None = None,
    ) -> None:
        mine = [
            d
            for d in detections
            if (d.job_id is None or d.job_id == job.id) and d.attempt in (attempt, -1)
        ]
        placed = place(mine, job.nodes, gpus_per_node=gpus_per_node, rank_nodes=rank_nodes)
        contextual = apply_network_rules(
            apply_xid_rules(launch_failures(placed, job.nodes)), job.nodes
        )

        def rank_node(rank: int) -> NodeName | None:
            return node_of_rank(rank, job.nodes, gpus_per_node=gpus_per_node, rank_nodes=rank_nodes)

        reported = apply_report_rules(link_victims(contextual), job.nodes, rank_node)
        own = sorted(apply_slowdown_rules(reported, job.nodes), key=order)
        self.all = own
        """Every detection of the attempt, context rules applied, in order (noise included)."""
        self.nodes = tuple(job.nodes)
        # A "fault" in domain none is a contradiction (a malformed signature): not evidence.
        faults = [d for d in own if d.domain is not FaultDomain.NONE]
        self.roots = [d for d in faults if d.role is Role.ROOT and is_fatal(d)]
        self.cascades = [d for d in faults if d.role is Role.CASCADE and is_fatal(d)]
        self.warnings = [d for d in faults if d.role is Role.ROOT and not is_fatal(d)]
        self.confirmations = [d for d in faults if d.role is Role.CONFIRMATION]
        self.implicating = [
            d
            for d in faults
            if d.implicates_node and d.node is not None and d.role in (Role.ROOT, Role.CONFIRMATION)
        ]
        self.victims = fate_victims(own, self.implicating)
        """Nodes with evidence of their own outside the first NVLink domain to fail."""
        steps = [(utc(d.time), _int(d.fields.get("step"))) for d in own if d.role is Role.PROGRESS]
        known = [(t, s) for t, s in steps if s is not None]
        self._step_times = [t for t, _ in known]
        self._step_max: list[int] = []
        for _, step in known:
            self._step_max.append(max(step, self._step_max[-1]) if self._step_max else step)

    def step_at(self, when: datetime) -> int | None:
        """The newest step seen at or before ``when`` (None before any)."""
        index = bisect_right(self._step_times, utc(when))
        return self._step_max[index - 1] if index else None

    def implicated(
        self, failed_nodes: frozenset[NodeName], *, failing: bool = False
    ) -> frozenset[NodeName]:
        """Nodes with direct evidence against them, plus the nodes the scheduler reports failed.

        ``failing``: the attempt failed on a fatal root, and a warning (a root that calls for no
        action on the job, such as a row remap marked for the next GPU reset) neither caused nor
        explains that failure: it names no node then (node repair still takes it)."""
        own = frozenset(
            d.node
            for d in self.implicating
            if d.node is not None and not (failing and d.role is Role.ROOT and not is_fatal(d))
        )
        return (own - self.victims) | failed_nodes
