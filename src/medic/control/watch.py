"""In-memory state the control loop keeps per watched job attempt.

Only derived, rebuildable state lives here (progress cadence, the evidence gathered so far in the
current attempt); every decision is in the store, so a restarted medic re-derives this from fresh
scheduler state and new log lines without repeating a decision.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime

from medic.attribute.blame import is_fatal
from medic.detect.progress import ProgressTracker
from medic.domain.attempts import Progress
from medic.domain.cluster import Job, Mode
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import JobId, NodeName

__all__ = ["JobWatch", "of_attempt"]


@dataclass(slots=True)
class JobWatch:
    """Evidence and progress of one job's current attempt."""

    job_id: JobId
    attempt: int
    mode: Mode
    max_attempts_without_progress: int | None = None
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    evidence: list[Detection] = field(default_factory=list)
    """Non-progress detections of this attempt, in arrival order."""
    recent_progress: deque[Detection] = field(default_factory=lambda: deque(maxlen=8))
    """The latest progress lines: attribution reads the step a failure happened at from them."""
    first_fatal_at: datetime | None = None
    """When the first detection saying the attempt is failing was stored."""
    ended_at: datetime | None = None
    """When the loop first saw the attempt ended badly (failed, node failure, time limit)."""
    decided: bool = False
    """A verdict and advice exist for this attempt; nothing more to decide."""
    exclusion_advised: bool = False
    """A straggler's exclude-at-next-restart is advised for this attempt: nothing more to decide
    until a fatal fault (which is decided on its own evidence)."""
    seen_signatures: set[str] = field(default_factory=set)
    down_nodes: set[NodeName] = field(default_factory=set)
    """Nodes of this attempt already reported down by the scheduler."""
    saved_progress: Progress = field(default_factory=Progress)
    saved_progress_at: datetime | None = None
    retry_after: datetime | None = None
    """Evaluation is paused until then after an error (poison-pill guard)."""
    started: bool = False
    """The loop has seen this attempt run (or end after running). Until then the job's log lines
    are the previous attempt's teardown (a requeue's or a cancel's), never this attempt's."""
    fatal_while_running: bool = False
    """The first fatal detection arrived while the job still ran: a failure of its own, not the
    teardown of someone's cancel."""
    last_job: Job | None = None
    """The job as last seen in this attempt (its nodes place ranks when the attempt is decided
    after the scheduler already requeued it)."""
    node_wait_since: datetime | None = None
    """Since when a decision waits for the scheduler to declare a not-responding node down."""
    straggler_seen: bool = False
    """A straggler finding is among the evidence (it is decided without a fatal fault)."""
    seen_job: Job | None = None
    """The job as it was at the last full evaluation (a quiet job is skipped while unchanged)."""
    next_due: datetime | None = None
    """When a time-driven check (hang, straggler, a progress save) falls due without any new
    line or state change; None: none will."""

    def add(self, detection: Detection, stored_at: datetime) -> bool:
        """Take one detection of this attempt; True when its signature is new in the attempt."""
        if detection.role is Role.PROGRESS:
            self.tracker.observe(detection)
            self.recent_progress.append(detection)
            return False
        self.evidence.append(detection)
        if detection.signature_id.startswith("medic.straggler."):
            self.straggler_seen = True
        if self.first_fatal_at is None and is_fatal(detection):
            self.first_fatal_at = stored_at
        new = detection.signature_id not in self.seen_signatures
        self.seen_signatures.add(detection.signature_id)
        return new

    def quiet(self, job: Job, now: datetime) -> bool:
        """Nothing can have changed for the job since its last full evaluation, given that no
        line and no node state of it is new: the same attempt in the same scheduler state, no
        decision pending (a failing attempt waits for its settle time, an ended one for its
        verdict), no back-off running, and no time-driven check due."""
        return (
            self.seen_job == job
            and self.attempt == job.restart_count
            and self.retry_after is None
            and (
                self.decided
                or (
                    self.first_fatal_at is None
                    and self.ended_at is None
                    and not (self.straggler_seen and not self.exclusion_advised)
                )
            )
            and (self.next_due is None or now < self.next_due)
        )

    @property
    def previous_attempt(self) -> int:
        """The attempt whose teardown lines arrive before this one has been seen running."""
        return max(0, self.attempt - 1)

    def next_attempt(self, attempt: int) -> JobWatch:
        """A fresh watch for the job's next attempt, keeping its options."""
        return JobWatch(
            job_id=self.job_id,
            attempt=attempt,
            mode=self.mode,
            max_attempts_without_progress=self.max_attempts_without_progress,
        )


def of_attempt(det: Detection, attempt: int) -> Detection:
    """The detection stamped with the attempt it belongs to (the matcher leaves -1)."""
    return det if det.attempt == attempt else replace(det, attempt=attempt)
