"""The controller: carries out one generation of advice on the scheduler, step by step.

The steps are :mod:`medic.control.plans`'. Before every step the controller re-reads the job from
the scheduler and skips a step whose effect is already there, so a controller killed
mid-recovery and restarted neither repeats nor skips a step. Each step is written to the ledger
under an idempotency key and to the audit trail before it is issued and again with its outcome;
with a lease (replicas, ``docs/replicas.md``) under the lease's fencing token.

The ledger is a :class:`~medic.ports.ControllerLedger`: the store itself when the controller
runs inside the control loop (embedded default), the HTTP client of the advice API when it runs as
``medic controller`` next to the scheduler. :func:`run_controller` is that remote process's loop:
it polls the advice feed, reconciles act-mode advice and runs the fail-open watchdog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from medic.control.exclusion_ledger import note_added
from medic.control.hold_marks import mark_hold, unmark_hold
from medic.control.leases import LeaseKeeper
from medic.control.plans import Step, abandon_reason, converged, plan
from medic.control.retries import StepRetries
from medic.domain.actions import ActionKind, ActionRecord, ActionStatus, idempotency_key
from medic.domain.advice import Advice, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job
from medic.domain.ids import NodeName
from medic.domain.leases import Fence
from medic.errors import (
    ConflictError,
    FencedError,
    MedicError,
    NotFoundError,
    PermanentError,
    TransientError,
)
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


class Controller:
    """Reconciles the scheduler towards advice. Safe to call again at any time.

    ``before_hold`` runs right before a requeue-hold is issued, with the job as just read (the
    remote controller journals the job's original exclusions there for the watchdog); when it
    raises, nothing is issued. ``before_release`` runs right before a release, with the held job
    as just read (node repair takes off there the exclusions medic added for nodes that are back
    in service); a failure there is logged and the job released all the same.

    With ``lease`` every step is recorded under its fencing token (the store refuses a stale
    one) and issued only while the lease is this process's by its own deadline; a caller runs
    :meth:`reconcile` only while it holds the lease. A step found begun with no outcome (its
    process died or lost the lease between the two records) is in doubt: its outcome is read
    from the scheduler and recorded, as succeeded when its effect is there, else as failed
    (it did not take effect) and issued again. It is never recorded as skipped: that record
    means nothing was issued.
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
        lease: LeaseKeeper | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._ledger = ledger
        self._clock = clock
        self._actor = actor
        self._before_hold = before_hold
        self._before_release = before_release
        self._lease = lease
        self._retries = StepRetries(clock)

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
        abandoned = abandon_reason(advice, job)
        if abandoned:
            return self._report(advice, Outcome(Reconciliation.ABANDONED, abandoned))
        first_effect: datetime | None = None
        steps = plan(advice, self._scheduler, self._exclude)
        records = self._records(advice, steps)
        issued = {
            k for k, r in records.items() if r is not None and r.status is ActionStatus.SUCCEEDED
        }
        for step in steps:
            job = self._scheduler.get_job(advice.job_id)
            if self._settled(advice, step, records[step.kind], job, issued):
                continue
            key = idempotency_key(advice.id, advice.generation, step.kind)
            held_back = step.wait(job) or self._retries.backing_off(key, step.kind.value)
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
                given_up = self._retries.failed(key, step.kind.value, exc)
                if given_up is None:
                    raise
                return self._report(
                    advice, Outcome(Reconciliation.ABANDONED, given_up, first_effect)
                )
            issued.add(step.kind)
            first_effect = first_effect or done_at
        job = self._scheduler.get_job(advice.job_id)
        if all(s.is_done(job) or s.kind in issued for s in steps) and converged(advice, job):
            if ActionKind.REQUEUE_HOLD in issued:  # medic held it, so medic marked it
                unmark_hold(self._scheduler, advice, job)
            return self._report(
                advice, Outcome(Reconciliation.CONVERGED, "desired state observed", first_effect)
            )
        return self._report(
            advice, Outcome(Reconciliation.PENDING, "waiting for the scheduler", first_effect)
        )

    def _before(self, advice: Advice, kind: ActionKind, job: Job) -> None:
        """The hooks run right before a step is issued (see the class docstring); before a
        requeue-hold, the job is marked for the fail-open watchdog (:mod:`medic.domain.holds`)."""
        if kind is ActionKind.REQUEUE_HOLD:
            mark_hold(self._scheduler, advice, job, self._clock.now())
        if kind is ActionKind.REQUEUE_HOLD and self._before_hold is not None:
            self._before_hold(advice, job)
        if kind is ActionKind.RELEASE and self._before_release is not None:
            try:
                self._before_release(job)
            except MedicError as exc:  # the release matters more than the exclusions
                logger.warning("job %s: before release: %s", advice.job_id, exc)

    # ------------------------------------------------------------------ once, bounded
    def _records(self, advice: Advice, steps: list[Step]) -> dict[ActionKind, ActionRecord | None]:
        """The ledger's record of each step of this generation (one lookup a step): a step that
        succeeded is never issued again (a stale read must not requeue a job twice)."""
        return {
            step.kind: self._ledger.get_action(
                idempotency_key(advice.id, advice.generation, step.kind)
            )
            for step in steps
        }

    def _settled(
        self,
        advice: Advice,
        step: Step,
        record: ActionRecord | None,
        job: Job,
        issued: set[ActionKind],
    ) -> bool:
        """True when ``step`` needs nothing issued: done, by a try in doubt (recorded now, added
        to ``issued``), by an earlier try or by someone else (recorded as skipped)."""
        if record is not None and record.status is ActionStatus.STARTED:
            if self._resolve(advice, step, record, job):
                issued.add(step.kind)
                return True
            record = self._ledger.get_action(record.key)
        if step.is_done(job) or step.kind in issued:
            self._record_skip(advice, step.kind, record)
            return True
        return False

    def _resolve(self, advice: Advice, step: Step, record: ActionRecord, job: Job) -> bool:
        """Record the outcome of a step in doubt (see the class docstring) from ``job``, as just
        read; True when it took effect."""
        fence = self._fence()  # only the lease's holder decides what another one left
        took_effect = step.is_done(job)
        begun_by = f"{record.holder or 'a controller'} (token {record.token})"
        if took_effect:
            why = f"begun by {begun_by} with no outcome recorded; the scheduler shows its effect"
        else:
            why = (
                f"begun by {begun_by} with no outcome recorded; the scheduler shows no effect, so "
                "it did not take effect: issued again"
            )
        status = ActionStatus.SUCCEEDED if took_effect else ActionStatus.FAILED
        owner = (
            None if record.holder is None or record.token is None else (record.holder, record.token)
        )
        kind = AuditKind.ACTION_SUCCEEDED if took_effect else AuditKind.ACTION_FAILED
        payload: dict[str, object] = {"key": record.key, "recovered": why}
        if fence is not None:
            payload["token"] = fence.token
        event = self._event(advice, kind, step.kind, payload)
        error = None if took_effect else why
        self._ledger.finish_action(record.key, status, self._clock.now(), error, owner, event)
        logger.warning("job %s: %s in doubt: %s", advice.job_id, step.kind, why)
        return took_effect

    def _fence(self) -> Fence | None:
        return None if self._lease is None else self._lease.fence()

    def _exclude(self, advice: Advice, excluded: frozenset[NodeName]) -> None:
        """Add ``excluded`` to the job's exclusions and record, one ledger row per node, those
        medic added (not the job's own): only those are taken off again once their node is back
        in service (:mod:`medic.repair.exclusions`)."""
        before = self._scheduler.get_job(advice.job_id).excluded_nodes
        self._scheduler.set_excluded_nodes(advice.job_id, excluded | before)
        note_added(self._ledger, advice, excluded - before, self._clock.now())

    def _execute(self, advice: Advice, step: Step) -> datetime:
        key = idempotency_key(advice.id, advice.generation, step.kind)
        now = self._clock.now()
        fence = self._fence()
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
        owner = None if fence is None else (fence.holder, fence.token)
        audit: dict[str, object] = (
            {"key": key} if fence is None else {"key": key, "token": fence.token}
        )
        # The step and its audit event are recorded together (one transaction in the store).
        started = self._event(advice, AuditKind.ACTION_STARTED, step.kind, audit)
        if not self._ledger.begin_action(record, fence, started):
            if fence is not None:
                # Recorded by another run since this one read the ledger: a later pass decides.
                raise ConflictError(f"{key} was begun by another controller meanwhile")
            # Unfenced, an earlier run began this step and did not see it take effect: the
            # scheduler state says it is still needed, so issuing it again is right.
            self._ledger.append_audit(started)
        if self._lease is not None and not self._lease.may_act():
            # Frozen past the lease between the two records: another process may act now.
            error = "not issued: this controller's lease ran out before it was issued"
            self._finish(advice, step.kind, ActionStatus.FAILED, audit, owner, error)
            raise FencedError(f"{key}: {error}")
        try:
            step.issue()
        except (TransientError, PermanentError) as exc:
            self._finish(advice, step.kind, ActionStatus.FAILED, audit, owner, str(exc))
            raise
        done = self._clock.now()
        seconds = (done - now).total_seconds()
        self._finish(
            advice, step.kind, ActionStatus.SUCCEEDED, {**audit, "seconds": seconds}, owner
        )
        logger.info(
            "job %s: %s done (advice %s g%s)",
            advice.job_id,
            step.kind,
            advice.id,
            advice.generation,
        )
        return done

    def _finish(
        self,
        advice: Advice,
        kind: ActionKind,
        status: ActionStatus,
        payload: dict[str, object],
        owner: tuple[str, int] | None,
        error: str | None = None,
    ) -> None:
        """The ledger's and the trail's record of a step's outcome. The trail records it even
        when the ledger no longer has this try (another holder took the step over meanwhile)."""
        key = str(payload["key"])
        if error is not None:
            payload = {**payload, "error": error}
        succeeded = status is ActionStatus.SUCCEEDED
        event_kind = AuditKind.ACTION_SUCCEEDED if succeeded else AuditKind.ACTION_FAILED
        event = self._event(advice, event_kind, kind, payload)
        try:
            self._ledger.finish_action(key, status, self._clock.now(), error, owner, event)
        except ConflictError as exc:
            logger.warning("job %s: %s", advice.job_id, exc)
            self._audit(advice, event_kind, kind, {**payload, "ledger": str(exc)})

    def _record_skip(self, advice: Advice, kind: ActionKind, existing: ActionRecord | None) -> None:
        if existing is not None and existing.status in (
            ActionStatus.SUCCEEDED,
            ActionStatus.SKIPPED,
        ):
            return
        key = idempotency_key(advice.id, advice.generation, kind)
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
                ),
                self._fence(),
            )
        # The scheduler already shows the step's effect, and no try of medic's is in doubt (a
        # failed one, or none): done by someone else. Record that nothing was issued.
        skipped = self._event(advice, AuditKind.ACTION_SKIPPED, kind, {"key": key})
        self._ledger.finish_action(key, ActionStatus.SKIPPED, now, event=skipped)

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
        self._ledger.append_audit(self._event(advice, kind, action, payload))

    def _event(
        self,
        advice: Advice,
        kind: AuditKind,
        action: ActionKind | None,
        payload: dict[str, object],
    ) -> AuditEvent:
        return AuditEvent(
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
