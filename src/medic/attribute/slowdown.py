"""A slow job names its straggler only with the node's own evidence (issue 12, rule 6).

In synchronous training every rank waits for the slowest, so a job's step time or tokens per
second (Megatron's elapsed time per iteration, torchtitan's tps) drops on every rank at once and
cannot say which node is slow. What can is a line from that node that explains slowness: its
kernel reporting its CPUs thermally throttled, DCGM reporting its GPU's clocks throttled, its NFS
server not responding, corrected PCIe errors on its GPU's link (the catalogue marks such
signatures with the constant ``effect: slowdown``).

The rule, over one attempt's detections: when the job is slower than its own baseline (the
progress tracker's ``medic.straggler.slow_job`` finding, :mod:`medic.detect.progress`), each node
with a slowdown line from shortly before the slowness began (:data:`LEAD_SECONDS`) onwards is a
straggler: a ``medic.straggler.slow_node`` finding (a non-fatal root that implicates the node, as
the live tracker's own; the policy excludes the node at the next restart). When such lines come
from :data:`~medic.attribute.network.SYSTEMIC_NODES` nodes or more, or from more than half of the
job's nodes, they are the site's (a hot machine room, a power cap), not a node's: nobody is named.
Without a slow job a slowdown line stays what the catalogue says (a confirmation), and a slow job
without any stays a job-level observation that names nobody.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from medic.attribute.network import SYSTEMIC_NODES
from medic.attribute.reports import SLOW_NODE_SIGNATURE_ID
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import NodeName, SignatureId

__all__ = ["LEAD_SECONDS", "SLOW_JOB_SIGNATURE_ID", "apply_slowdown_rules"]

SLOW_JOB_SIGNATURE_ID = SignatureId("medic.straggler.slow_job")
"""Same string as ``medic.detect.signatures.SLOW_JOB_SIGNATURE_ID`` (the layers contract keeps
attribution from importing the detectors)."""
LEAD_SECONDS = 120.0
"""How long before the measured start of the slowness a node's slowdown line still explains it:
the throughput watch needs several slow iterations before its smoothed median falls."""
EFFECT_FIELD = "effect"
SLOWDOWN = "slowdown"


def _start(slow_job: Detection) -> float:
    """When the job's slowness began (the finding's time less its ``slow_s``), as a timestamp."""
    try:
        slow_s = max(float(slow_job.fields.get("slow_s", "0")), 0.0)
    except ValueError:
        slow_s = 0.0
    return slow_job.time.timestamp() - slow_s


def apply_slowdown_rules(
    detections: Sequence[Detection], nodes: Sequence[NodeName]
) -> list[Detection]:
    """The detections plus a slow-node finding per straggler the rule above names (appended)."""
    slow_jobs = [d for d in detections if d.signature_id == SLOW_JOB_SIGNATURE_ID]
    if not slow_jobs:
        return list(detections)
    slow_job = slow_jobs[0]
    since = _start(slow_job) - LEAD_SECONDS
    first: dict[NodeName, Detection] = {}
    for d in sorted(detections, key=lambda d: (d.time.timestamp(), d.seq)):
        if d.fields.get(EFFECT_FIELD) != SLOWDOWN or d.node is None:
            continue
        if d.time.timestamp() >= since and (not nodes or d.node in nodes):
            first.setdefault(d.node, d)
    known = len(set(nodes)) or len(first)
    if not first or len(first) >= SYSTEMIC_NODES or len(first) * 2 > known:
        return list(detections)
    derived = [
        replace(
            d,
            signature_id=SLOW_NODE_SIGNATURE_ID,
            # A line the catalogue keeps as noise (a corrected PCIe error) is the GPU's link.
            domain=FaultDomain.HARDWARE if d.domain is FaultDomain.NONE else d.domain,
            role=Role.ROOT,
            severity=Severity.WARNING,
            action=JobAction.NONE,
            rank=None,
            implicates_node=True,
            fields={**d.fields, "cause": d.signature_id, "slow_job": slow_job.text},
        )
        for d in first.values()
    ]
    return [*detections, *derived]
