"""Hang detection: a job that stopped making progress for much longer than it usually takes.

The threshold adapts to the job: ``max(hang_k x p95 of its progress intervals, hang_floor)``, learnt
from the attempt's own iteration and checkpoint lines. Until :data:`MIN_INTERVALS` intervals are
known the p95 is unreliable, so the threshold is conservative: ``max(hang_k x longest interval,
2 x hang_floor)``. Before the attempt's first progress line (process start, checkpoint load,
compilation) the normal silence is unknown and can be long, and a false hang restarts a healthy job
(repeated restarts end in a no-progress STOP): that phase is left to the NCCL watchdog and the
scheduler.

Pure functions over numbers and times: no I/O, no clock reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from medic.config.settings import DetectSettings
from medic.detect.signatures import HANG_SIGNATURE_ID
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import JobId

__all__ = ["MIN_INTERVALS", "hang_detection", "hang_threshold", "percentile"]

MIN_INTERVALS = 3
"""Progress intervals needed before the job's normal rhythm is considered known."""


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of non-empty ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def hang_threshold(intervals: Sequence[float], settings: DetectSettings) -> float:
    """Seconds of silence after the last progress line that count as a hang."""
    if len(intervals) < MIN_INTERVALS:
        # A job that hangs right after its first iterations must still be caught, long before
        # the 600 s NCCL watchdog; with so few samples, stay well clear of normal jitter.
        longest = max(intervals, default=0.0)
        return max(settings.hang_k * longest, 2 * settings.hang_floor_seconds)
    return max(settings.hang_k * percentile(intervals, 95.0), settings.hang_floor_seconds)


def hang_detection(
    *,
    job_id: JobId | None,
    attempt: int,
    now: datetime,
    silence: float,
    threshold: float,
    p95_interval: float,
    last_step: int | None,
) -> Detection:
    """The derived finding: a root cause on no particular node, calling for a restart.

    Domain ``system_software``: a silent stall is most often a deadlock in the communication
    stack or a stuck collective; nothing in the logs names a node, so none is implicated.
    """
    step = "unknown" if last_step is None else str(last_step)
    return Detection(
        job_id=job_id,
        attempt=attempt,
        signature_id=HANG_SIGNATURE_ID,
        domain=FaultDomain.SYSTEM_SOFTWARE,
        role=Role.ROOT,
        severity=Severity.ERROR,
        action=JobAction.RESTART,
        time=now,
        implicates_node=False,
        text=(
            f"no training progress for {silence:.1f} s (threshold {threshold:.1f} s,"
            f" p95 interval {p95_interval:.2f} s, last step {step})"
        ),
        fields={
            "silence_s": f"{silence:.3f}",
            "threshold_s": f"{threshold:.3f}",
            "p95_interval_s": f"{p95_interval:.3f}",
            "last_step": step,
        },
    )
