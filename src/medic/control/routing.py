"""Which job each detection of a pass is evidence for.

Job lines name their job. A kernel line names only its node: it is copied to every job on that
node that can still use it, the jobs running there and a job that just ended badly there whose
failure is not decided yet (a kernel line often arrives a pass after the crash it explains, for at
most :data:`KERNEL_LAG_SECONDS`). Pure: the caller says which jobs await evidence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from medic.attribute.blame import fan_out_kernel
from medic.control.watch import JobWatch
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection
from medic.domain.ids import JobId, NodeName

__all__ = ["ENDED_BADLY", "KERNEL_LAG_SECONDS", "awaits_evidence", "route"]

ENDED_BADLY = (JobState.FAILED, JobState.NODE_FAIL, JobState.TIMEOUT)
KERNEL_LAG_SECONDS = 30.0
"""How long after an attempt ended badly a kernel line on its nodes still counts as its evidence
(while its failure is not decided)."""


def route(
    detections: Sequence[Detection], jobs: Sequence[Job], awaits: Callable[[Job], bool]
) -> dict[JobId, list[Detection]]:
    """The detections grouped by job, kernel ones copied to the jobs running on their node and
    to those ``awaits`` says still take evidence."""
    on_node: dict[NodeName, list[JobId]] = defaultdict(list)
    if any(d.job_id is None for d in detections):
        for job in jobs:
            if job.state is JobState.RUNNING or awaits(job):
                for node in job.nodes:
                    on_node[node].append(job.id)
    routed: dict[JobId, list[Detection]] = defaultdict(list)
    for det in fan_out_kernel(detections, on_node):
        if det.job_id is not None:
            routed[det.job_id].append(det)
    return routed


def awaits_evidence(job: Job, watch: JobWatch | None, now: datetime, settle: float) -> bool:
    """The job's current attempt ended badly, recently, and is not decided yet."""
    if job.state not in ENDED_BADLY and job.state is not JobState.COMPLETING:
        return False
    if watch is None or watch.attempt != job.restart_count or watch.decided:
        return False  # a requeue in progress (new attempt), or decided already
    if watch.ended_at is None:
        return True
    return now - watch.ended_at <= timedelta(seconds=max(settle, KERNEL_LAG_SECONDS))
