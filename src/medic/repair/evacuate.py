"""Moving a job off a node under repair: requeue it held, exclude the node, release it.

Three scheduler commands, one at a time, so a retry finishes what a failure left. The dangerous
gap is between the requeue-hold and the release: a medic that stops there leaves the job held
(pending forever) unless the next one knows the hold was medic's. That knowledge is durable: every
step is in the audit trail before it runs (``repair-step-started``), so an engine that did not
hold the job itself (a restart, another replica taking the repair over) reads the node's repair
steps back and finishes the release. A hold that the trail does not attribute to this repair is
someone else's and is left alone.
"""

from __future__ import annotations

from collections.abc import Callable

from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job, JobState
from medic.domain.ids import JobId, NodeName
from medic.domain.repairs import Repair
from medic.errors import MedicError, NotFoundError, PermanentError
from medic.ports import AuditQuery, Scheduler

__all__ = ["HOLD", "RELEASE", "Evacuation"]

HOLD, RELEASE = "requeue_hold", "release"
_PAGE = 500

Do = Callable[..., None]
"""``do(repair, step, work, **detail)``: run one audited command (``Lifecycle.do``)."""


class Evacuation:
    """Moves jobs off repaired nodes (see the module docstring)."""

    def __init__(self, scheduler: Scheduler, audit: AuditQuery, do: Do) -> None:
        self._scheduler = scheduler
        self._audit = audit
        self._do = do
        self._held: set[tuple[int, str]] = set()
        """(repair, job) that this engine requeued held and has not released yet."""
        self._refused: set[tuple[int, str]] = set()
        """(repair, job) the scheduler refused to move for good: the repair interrupts it."""

    def move_off(self, repair: Repair, job: Job, exclusions: frozenset[NodeName]) -> bool:
        """Requeue ``job`` held, exclude the node, release it. False: try again next pass."""
        sched, node, mark = self._scheduler, repair.node, (repair.id, str(job.id))
        on_node = node in job.nodes and not job.state.is_terminal
        running = on_node and job.state is not JobState.PENDING
        held = job.state is JobState.PENDING and job.held
        ours = held and (mark in self._held or self._held_by(repair, str(job.id)))
        if mark in self._refused or not (running or ours):
            return True
        excluded = frozenset(job.excluded_nodes | {node} | exclusions)
        try:
            if running:
                self._do(repair, HOLD, lambda: sched.requeue_hold(job.id), job=job.id)
                self._held.add(mark)
            self._do(
                repair,
                "exclude_nodes",
                lambda: sched.set_excluded_nodes(job.id, excluded),
                job=job.id,
                nodes=sorted(excluded),
            )
            self._do(repair, RELEASE, lambda: sched.release(job.id), job=job.id)
            self._held.discard(mark)
        except PermanentError:
            self._refused.add(mark)  # recorded; the repair interrupts it
        except MedicError:
            return False
        return True

    def release_left(self, repair: Repair) -> bool:
        """Release the jobs ``repair`` holds (it was cancelled between a job's requeue-hold and
        its release). False: the scheduler did not answer, try again next pass."""
        for job_id in repair.interrupted_jobs:
            mark = (repair.id, job_id)
            try:
                job = self._scheduler.get_job(JobId(job_id))
            except NotFoundError:
                continue
            except MedicError:
                return False
            held = job.state is JobState.PENDING and job.held
            ours = held and (mark in self._held or self._held_by(repair, job_id))
            if ours and not self._release(repair, job):
                return False
            self._held.discard(mark)
        return True

    def _release(self, repair: Repair, job: Job) -> bool:
        try:
            self._do(repair, RELEASE, lambda: self._scheduler.release(job.id), job=job.id)
        except PermanentError:
            return True  # recorded (step failed): a person looks at it
        except MedicError:
            return False
        return True

    def _held_by(self, repair: Repair, job: str) -> bool:
        """True when the audit trail says this repair started holding ``job`` and never
        released it (only read for a held job this engine does not remember holding). A hold
        the scheduler refused for good did not happen: whoever holds the job now, it is not
        this repair."""
        held = False
        for event in self._steps(repair):
            payload = event.payload
            if payload.get("repair_id") != repair.id or payload.get("job") != job:
                continue
            step, kind = payload.get("step"), event.kind
            refused = kind is AuditKind.REPAIR_STEP_FAILED and bool(payload.get("permanent"))
            released = kind is AuditKind.REPAIR_STEP_SUCCEEDED and step == RELEASE
            if kind is AuditKind.REPAIR_STEP_STARTED and step == HOLD:
                held = True
            elif (refused and step == HOLD) or released:
                held = False
        return held

    def _steps(self, repair: Repair) -> list[AuditEvent]:
        """The repair node's step events since the repair was created, oldest first."""
        steps: list[AuditEvent] = []
        after: int | None = None
        while True:
            page = self._audit.query_audit(
                cluster=repair.cluster,
                subject_type=SubjectType.NODE.value,
                subject_id=str(repair.node),
                since=repair.created_at,
                after_id=after,
                limit=_PAGE,
            )
            steps.extend(e for e in page if e.kind in _STEP_KINDS)
            if len(page) < _PAGE:
                return steps
            after = page[-1].id


_STEP_KINDS = frozenset(
    {AuditKind.REPAIR_STEP_STARTED, AuditKind.REPAIR_STEP_SUCCEEDED, AuditKind.REPAIR_STEP_FAILED}
)
