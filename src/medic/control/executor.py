"""The controller: carries out one generation of advice on the scheduler, step by step.

A requeue is three steps (requeue-hold, exclude nodes, release) and a stop is one (cancel). Before
every step the controller re-reads the job from the scheduler and skips a step whose effect is
already there, so a controller killed mid-recovery and restarted neither repeats nor skips a step.
Each step is written to the ledger under an idempotency key and to the audit trail before it is
issued and again with its outcome.

The ledger is a :class:`~medic.ports.ControllerLedger`: the store itself when the controller
runs inside the control loop (embedded default), the HTTP client of the advice API when it runs as
``medic controller`` next to the scheduler. :func:`run_controller` is that remote process's loop:
it polls the advice feed, reconciles act-mode advice and runs the fail-open watchdog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from medic.control.exclusion_ledger import note_added
from medic.domain.actions import ActionKind, ActionRecord, ActionStatus, idempotency_key
from medic.domain.advice import Advice, AdviceAction, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job, JobState
from medic.domain.ids import NodeName
from medic.errors import MedicError, NotFoundError, PermanentError, TransientError
from medic.ports import Clock, ControllerLedger, Scheduler

__all__ = ["ACTOR", "Controller", "Outcome"]

logger = logging.getLogger(__name__)

ACTOR = "medic-controller"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one reconcile call achieved for one advice generation."""

    status: Reconciliation
    reason: str
    first_effect_at: datetime | None = None
    """When this call's first scheduler command completed (None when it issued none)."""


RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Pause before each new try of a step the scheduler failed (a transient error), in order."""
GIVE_UP_SECONDS = 300.0
"""A step still failing this long after its first failure is given up: the advice is abandoned
with the last error, audited once."""


@dataclass(frozen=True, slots=True)
class _Step:
    kind: ActionKind
    is_done: Callable[[Job], bool]
    issue: Callable[[], None]
    wait: Callable[[Job], str | None] = lambda _job: None
    """Why the step must not be issued yet in this state (None: it may)."""


@dataclass(slots=True)
class _Failures:
    """A step the scheduler failed: when first, how often, the last error."""

    first: datetime
    next_try: datetime
    count: int
    error: str


class Controller:
    """Reconciles the scheduler towards advice. Safe to call again at any time.

    ``before_hold`` runs right before a requeue-hold is issued, with the job as just read (the
    remote controller journals the job's original exclusions there for the watchdog); when it
    raises, nothing is issued. ``before_release`` runs right before a release, with the held job
    as just read (node repair takes off there the exclusions medic added for nodes that are back
    in service); a failure there is logged and the job released all the same.
    """

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        clock: Clock,
        ledger: ControllerLedger,
        actor: str = ACTOR,
        before_hold: Callable[[Advice, Job], None] | None = None,
        before_release: Callable[[Job], None] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._ledger = ledger
        self._clock = clock
        self._actor = actor
        self._before_hold = before_hold
        self._before_release = before_release
        self._failures: dict[str, _Failures] = {}

    def reconcile(self, advice: Advice) -> Outcome:
        """Take the next missing steps of ``advice`` and report where it stands.

        Each step is planned from the job as just read: skipped when its effect is there (or
        not needed in that state: a queued job needs no requeue), deferred while the state says
        not yet (a job still completing), and issued at most once per advice generation. A step
        the scheduler refuses is re-planned from the state read after the refusal; one that
        fails is retried after a growing pause and given up after ``GIVE_UP_SECONDS``.

        Raises ``TransientError`` when the scheduler is unreachable (retry on a later pass).
        """
        try:
            job = self._scheduler.get_job(advice.job_id)
        except NotFoundError:
            return self._report(advice, Outcome(Reconciliation.ABANDONED, "job no longer exists"))
        abandoned = _abandon_reason(advice, job)
        if abandoned:
            return self._report(advice, Outcome(Reconciliation.ABANDONED, abandoned))
        first_effect: datetime | None = None
        steps = self._steps(advice)
        issued = self._issued(advice, steps)
        for step in steps:
            job = self._scheduler.get_job(advice.job_id)
            if step.is_done(job) or step.kind in issued:
                self._record_skip(advice, step.kind)
                continue
            held_back = step.wait(job) or self._backing_off(advice, step.kind)
            if held_back:
                return self._report(
                    advice, Outcome(Reconciliation.PENDING, held_back, first_effect)
                )
            self._before(advice, step.kind, job)
            try:
                done_at = self._execute(advice, step)
            except PermanentError as exc:
                if step.is_done(self._scheduler.get_job(advice.job_id)):
                    continue  # refused because the state moved on (it started, it was requeued)
                reason = f"{step.kind.value} refused by the scheduler: {exc}"
                return self._report(advice, Outcome(Reconciliation.ABANDONED, reason, first_effect))
            except TransientError as exc:
                given_up = self._failed(advice, step.kind, exc)
                if given_up is None:
                    raise
                return self._report(
                    advice, Outcome(Reconciliation.ABANDONED, given_up, first_effect)
                )
            issued.add(step.kind)
            first_effect = first_effect or done_at
        job = self._scheduler.get_job(advice.job_id)
        if all(s.is_done(job) or s.kind in issued for s in steps) and _converged(advice, job):
            return self._report(
                advice, Outcome(Reconciliation.CONVERGED, "desired state observed", first_effect)
            )
        return self._report(
            advice, Outcome(Reconciliation.PENDING, "waiting for the scheduler", first_effect)
        )

    def _before(self, advice: Advice, kind: ActionKind, job: Job) -> None:
        """The hooks run right before a step is issued (see the class docstring)."""
        if kind is ActionKind.REQUEUE_HOLD and self._before_hold is not None:
            self._before_hold(advice, job)
        if kind is ActionKind.RELEASE and self._before_release is not None:
            try:
                self._before_release(job)
            except MedicError as exc:  # the release matters more than the exclusions
                logger.warning("job %s: before release: %s", advice.job_id, exc)

    # ------------------------------------------------------------------ once, bounded
    def _issued(self, advice: Advice, steps: list[_Step]) -> set[ActionKind]:
        """The steps this generation already issued successfully: never again (a stale read
        must not requeue a job twice). Read once per call, one ledger lookup a step."""
        found = set()
        for step in steps:
            record = self._ledger.get_action(
                idempotency_key(advice.id, advice.generation, step.kind)
            )
            if record is not None and record.status is ActionStatus.SUCCEEDED:
                found.add(step.kind)
        return found

    def _backing_off(self, advice: Advice, kind: ActionKind) -> str | None:
        failures = self._failures.get(idempotency_key(advice.id, advice.generation, kind))
        if failures is None or self._clock.now() >= failures.next_try:
            return None
        return f"{kind.value} failed ({failures.error}); tried again from {failures.next_try}"

    def _failed(self, advice: Advice, kind: ActionKind, exc: Exception) -> str | None:
        """Count a failure of the step; the reason to give up, or None to retry later."""
        key = idempotency_key(advice.id, advice.generation, kind)
        now = self._clock.now()
        failures = self._failures.setdefault(key, _Failures(now, now, 0, ""))
        failures.count += 1
        failures.error = str(exc)
        pause = RETRY_SECONDS[min(failures.count, len(RETRY_SECONDS)) - 1]
        failures.next_try = now + timedelta(seconds=pause)
        spent = (now - failures.first).total_seconds()
        if spent < GIVE_UP_SECONDS:
            return None
        del self._failures[key]
        return (
            f"{kind.value} failed {failures.count} times over {spent:.0f} s, giving up: "
            f"{failures.error}"
        )

    def _steps(self, advice: Advice) -> list[_Step]:
        sched, job_id, attempt = self._scheduler, advice.job_id, advice.attempt
        if advice.action is AdviceAction.STOP:
            reason = f"medic: {advice.reason}"
            return [
                _Step(
                    ActionKind.CANCEL,
                    # Any ended job will not run again unless someone requeues it; cancelling
                    # it would only fail ("already completed"). A COMPLETING job is ending
                    # (Slurm shows it so for KillWait seconds after a crash or a cancel):
                    # cancelling it again on every pass would repeat the command. Issued once
                    # per generation: a person who requeues a job medic stopped has the last
                    # word (a new failure makes a new generation).
                    lambda j: j.state.is_terminal or j.state is JobState.COMPLETING,
                    lambda: sched.cancel(job_id, reason),
                )
            ]
        if advice.action is not AdviceAction.REQUEUE:
            return []
        excluded = advice.exclude_nodes
        steps = [
            _Step(
                ActionKind.REQUEUE_HOLD,
                # Requeued already (by medic, a person or the scheduler itself, e.g. after a
                # node failure), or queued and not running: nothing to end.
                lambda j: j.restart_count > attempt or j.state is JobState.PENDING,
                lambda: sched.requeue_hold(job_id),
                # A job still completing may be someone's cancel (Slurm says CANCELLED only
                # once its processes are gone), and requeueing it meanwhile can leave its
                # resources half released: wait for the state it ends in.
                lambda j: (
                    "waiting for the job to finish completing"
                    if j.state is JobState.COMPLETING
                    else None
                ),
            )
        ]
        if excluded:
            steps.append(
                _Step(
                    ActionKind.EXCLUDE_NODES,
                    lambda j: excluded <= j.excluded_nodes or _runs_elsewhere(j, attempt, excluded),
                    lambda: self._exclude(advice, excluded),
                )
            )
        steps.append(
            _Step(
                ActionKind.RELEASE,
                # A hold on the attempt medic never requeued is someone else's: left alone.
                lambda j: not j.held or j.restart_count <= attempt,
                lambda: sched.release(job_id),
            )
        )
        return steps

    def _exclude(self, advice: Advice, excluded: frozenset[NodeName]) -> None:
        """Add ``excluded`` to the job's exclusions and record, one ledger row per node, those
        medic added (not the job's own): only those are taken off again once their node is back
        in service (:mod:`medic.repair.exclusions`)."""
        before = self._scheduler.get_job(advice.job_id).excluded_nodes
        self._scheduler.set_excluded_nodes(advice.job_id, excluded | before)
        note_added(self._ledger, advice, excluded - before, self._clock.now())

    def _execute(self, advice: Advice, step: _Step) -> datetime:
        key = idempotency_key(advice.id, advice.generation, step.kind)
        now = self._clock.now()
        record = ActionRecord(
            key=key,
            cluster=advice.cluster,
            kind=step.kind,
            status=ActionStatus.STARTED,
            job_id=advice.job_id,
            node=None,
            advice_id=advice.id,
            started_at=now,
        )
        # A False here means an earlier run (or a replica) began this step and did not see it
        # take effect: the scheduler state says it is still needed, so issuing it again is right.
        self._ledger.begin_action(record)
        self._audit(advice, AuditKind.ACTION_STARTED, step.kind, {"key": key})
        try:
            step.issue()
        except (TransientError, PermanentError) as exc:
            self._ledger.finish_action(key, ActionStatus.FAILED, self._clock.now(), str(exc))
            self._audit(advice, AuditKind.ACTION_FAILED, step.kind, {"key": key, "error": str(exc)})
            raise
        done = self._clock.now()
        self._ledger.finish_action(key, ActionStatus.SUCCEEDED, done)
        self._audit(
            advice,
            AuditKind.ACTION_SUCCEEDED,
            step.kind,
            {"key": key, "seconds": (done - now).total_seconds()},
        )
        logger.info(
            "job %s: %s done (advice %s g%s)",
            advice.job_id,
            step.kind,
            advice.id,
            advice.generation,
        )
        return done

    def _record_skip(self, advice: Advice, kind: ActionKind) -> None:
        key = idempotency_key(advice.id, advice.generation, kind)
        existing = self._ledger.get_action(key)
        if existing is not None and existing.status in (
            ActionStatus.SUCCEEDED,
            ActionStatus.SKIPPED,
        ):
            return
        now = self._clock.now()
        if existing is None:
            self._ledger.begin_action(
                ActionRecord(
                    key=key,
                    cluster=advice.cluster,
                    kind=kind,
                    status=ActionStatus.STARTED,
                    job_id=advice.job_id,
                    node=None,
                    advice_id=advice.id,
                    started_at=now,
                )
            )
        # The scheduler already shows the step's effect (done by a run that died before
        # recording it, or by someone else): record that nothing was issued.
        self._ledger.finish_action(key, ActionStatus.SKIPPED, now)
        self._audit(advice, AuditKind.ACTION_SKIPPED, kind, {"key": key})

    def _report(self, advice: Advice, outcome: Outcome) -> Outcome:
        if advice.observed_generation == advice.generation and advice.status is outcome.status:
            return outcome
        self._ledger.report_reconciliation(
            advice.id, advice.generation, outcome.status, outcome.reason, self._clock.now()
        )
        if outcome.status.is_final:
            self._audit(
                advice,
                AuditKind.RECONCILIATION,
                None,
                {"status": outcome.status.value, "reason": outcome.reason},
            )
        return outcome

    def _audit(
        self,
        advice: Advice,
        kind: AuditKind,
        action: ActionKind | None,
        payload: dict[str, object],
    ) -> None:
        self._ledger.append_audit(
            AuditEvent(
                time=self._clock.now(),
                actor=self._actor,
                kind=kind,
                subject_type=SubjectType.JOB,
                subject_id=advice.job_id,
                cluster=advice.cluster,
                action=(action or advice.action).value,
                mode=advice.mode,
                payload={"advice_id": advice.id, "generation": advice.generation, **payload},
            )
        )


def _runs_elsewhere(job: Job, attempt: int, excluded: frozenset[NodeName]) -> bool:
    """The job already runs a later attempt on none of the nodes to exclude (the scheduler
    requeued and started it first): an exclusion can no longer be set, nor is it needed now."""
    return (
        job.restart_count > attempt
        and job.state is JobState.RUNNING
        and not excluded & set(job.nodes)
    )


def _abandon_reason(advice: Advice, job: Job) -> str | None:
    """Why the advice no longer applies to the job, or None when it still does."""
    if advice.action is AdviceAction.REQUEUE and job.state is JobState.CANCELLED:
        # A cancel is final, whoever issued it: medic never brings a cancelled job back.
        return "job cancelled: a cancelled job is never requeued"
    if (
        advice.action is AdviceAction.REQUEUE
        and job.restart_count <= advice.attempt
        and job.state is JobState.COMPLETED
    ):
        return f"job already {job.state.value}"
    if advice.action is AdviceAction.STOP and job.state is JobState.COMPLETED:
        return "job already completed"
    return None


def _converged(advice: Advice, job: Job) -> bool:
    """Beyond every step being done: a stop has converged once the job really ended."""
    return job.state.is_terminal if advice.action is AdviceAction.STOP else True
