"""Moving the jobs off a node under repair: advice the controller carries out, then the wait.

When a repair takes its node (``draining``), each job the wait interrupted that still runs there
gets advice owned by the repair (``repair_id``): requeue the attempt it runs, excluding the node
and the nodes job recovery avoids (the pass's placement exclusions), in act mode, rule
:data:`EVACUATION_RULE`. Job recovery's controller carries it out, hold -> exclude -> release,
with its ledger (idempotency keys, at most one requeue per generation, each step re-planned from
the job as just read) and its audit records (``action-*``, ``reconciliation``): the one embedded
in the control loop, which reconciles act-mode advice after the repair pass (so the repair sees
the outcome a pass later), or a remote ``medic controller``. The repair never calls the
scheduler's requeue, exclude or release itself.

The repair leaves ``draining`` once each of its jobs is settled:

- its advice for this repair converged, or the job left the node (ended, gone, queued again:
  whoever moved it);
- its advice was abandoned (the scheduler refused for good, the job was cancelled meanwhile, a
  remote controller's watchdog released it): the repair goes on, the job is one it interrupts
  (recorded on the repair when the wait ended, as it always was).

Nothing of this is in memory: an engine that restarted, or took the repair over, reads the same
advice back, and the controller finishes a hold whatever happened to the repair (cancelled
meanwhile: the advice stays active until it converged).

Job recovery publishes advice for the same job too (one advice row per job, each new decision a
new generation). It decides an attempt once: advice already published for the attempt, the
repair's included, counts as its decision, so it does not publish over an evacuation; a job that
fails again after the move is a new attempt, and job recovery's advice for it replaces the
repair's, which is fine: the job is off the node. The other way round, an act-mode requeue or
stop of the running attempt that already takes the job off the node (job recovery's, or another
repair's of a job on two nodes under repair) is waited for rather than replaced; any other
advice for a job still on the node is superseded by the repair's, keeping its exclusions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import datetime

from medic.domain.advice import Advice, AdviceAction, AdviceRequest, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job, JobState, Mode
from medic.domain.ids import JobId, NodeName
from medic.domain.repairs import Repair
from medic.errors import MedicError, NotFoundError
from medic.ports import Scheduler
from medic.repair.alerts import ENGINE, RepairStores

__all__ = ["EVACUATION_RULE", "Evacuation"]

EVACUATION_RULE = "repair-evacuation"
"""The rule of the advice a repair publishes to move a job off its node."""


class _Job(enum.Enum):
    MOVING = "moving"
    """Still on its way off the node (advice published, not converged yet)."""
    OFF = "off"
    REFUSED = "refused"
    """The repair's advice for it was abandoned: the repair interrupts it."""


class Evacuation:
    """Publishes the repairs' evacuation advice and tells when a node's jobs are off."""

    def __init__(
        self, store: RepairStores, scheduler: Scheduler, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._scheduler = scheduler
        self._now = clock
        self._cluster = scheduler.cluster

    def settled(self, repair: Repair, exclusions: frozenset[NodeName]) -> tuple[str, ...] | None:
        """Move ``repair``'s interrupted jobs off its node (advice, published once); None while
        one is still on its way (or the scheduler did not answer): ask again next pass. Once
        all are settled, the jobs whose move was abandoned (they end with the repair)."""
        refused: list[str] = []
        moving = False
        for job_id in repair.interrupted_jobs:
            try:
                job = self._scheduler.get_job(JobId(job_id))
            except NotFoundError:
                continue
            except MedicError:
                return None
            where = self._job(repair, job, exclusions)
            moving = moving or where is _Job.MOVING
            if where is _Job.REFUSED:
                refused.append(job_id)
        return None if moving else tuple(refused)

    def _job(self, repair: Repair, job: Job, exclusions: frozenset[NodeName]) -> _Job:
        current = self._store.advice_for_job(self._cluster, job.id)
        on_node = _runs_on(job, repair.node)
        if current is not None and current.repair_id == repair.id:
            if current.is_active:
                return _Job.MOVING
            abandoned = current.status is Reconciliation.ABANDONED
            return _Job.REFUSED if abandoned and on_node else _Job.OFF  # never published again
        if not on_node:
            return _Job.OFF  # left the node: whoever moved it (the repair's advice superseded)
        if current is not None and _moves_off(current, job, repair.node):
            return _Job.MOVING  # someone else's advice takes it off already: wait for it
        self._publish(repair, job, current, exclusions)
        return _Job.MOVING

    def _publish(
        self,
        repair: Repair,
        job: Job,
        current: Advice | None,
        exclusions: frozenset[NodeName],
    ) -> None:
        excluded = frozenset({repair.node}) | exclusions
        if (
            current is not None
            and current.attempt == job.restart_count
            and current.action in (AdviceAction.REQUEUE, AdviceAction.EXCLUDE_NEXT)
        ):
            excluded |= current.exclude_nodes  # what job recovery found against the attempt
        action = repair.action.value
        request = AdviceRequest(
            cluster=self._cluster,
            job_id=job.id,
            attempt=job.restart_count,
            action=AdviceAction.REQUEUE,
            exclude_nodes=excluded,
            reason=f"node {repair.node} under repair {repair.id} ({action})",
            mode=Mode.ACT,
            rule=EVACUATION_RULE,
            repair_id=repair.id,
        )
        now = self._now()
        advice = self._store.publish_advice(request, now)
        if current is not None and (current.id, current.generation) == (
            advice.id,
            advice.generation,
        ):
            return  # nothing new (another engine published the same a moment ago)
        payload: dict[str, object] = {
            "advice_id": advice.id,
            "generation": advice.generation,
            "attempt": advice.attempt,
            "exclude_nodes": sorted(advice.exclude_nodes),
            "rule": advice.rule,
            "reason": advice.reason,
            "repair_id": repair.id,
        }
        event = AuditEvent(
            time=now,
            actor=ENGINE,
            kind=AuditKind.ADVICE,
            subject_type=SubjectType.JOB,
            subject_id=job.id,
            cluster=self._cluster,
            action=advice.action.value,
            mode=advice.mode,
            payload=payload,
        )
        self._store.append_audit(event)


def _runs_on(job: Job, node: NodeName) -> bool:
    """The job still runs (or ends) on ``node``: not queued, not ended."""
    return node in job.nodes and not job.state.is_terminal and job.state is not JobState.PENDING


def _moves_off(advice: Advice, job: Job, node: NodeName) -> bool:
    """``advice`` (not the repair's) already takes the job's running attempt off ``node``: a
    controller carries it out (act mode, not converged) and it stops the job or requeues it
    away from the node."""
    return (
        advice.is_active
        and advice.mode is Mode.ACT
        and advice.attempt >= job.restart_count
        and (
            advice.action is AdviceAction.STOP
            or (advice.action is AdviceAction.REQUEUE and node in advice.exclude_nodes)
        )
    )
