"""The fail-open watchdog of the remote controller: a job medic holds is never left held.

A requeue is hold -> exclude -> release. When the controller dies, or the control plane goes away,
between the hold and the release, the job would wait in the queue for good. So before every
requeue-hold the controller journals the job's excluded nodes as they were, and on every poll the
watchdog looks at each journalled job:

* the scheduler no longer shows it held by medic (released, ended, gone): forget it;
* its advice converged: forget it; a newer generation of advice arrived: restart the wait;
* held for ``watchdog_timeout_seconds`` without either: put its original excluded nodes back and
  release it (act mode), or only record that it would (observe mode).

The journal is a small JSON file, rewritten atomically (temporary file, fsync, rename) on every
change and locked so that one controller process owns it. It also keeps the watchdog's history and
an outbox of audit events and reconciliation reports, delivered to the API when it answers: every
watchdog action is audited, even one taken while the control plane was down.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from medic.control.journal import Hold, Journal
from medic.domain.actions import ActionKind
from medic.domain.advice import Advice, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job, Mode
from medic.domain.ids import AdviceId
from medic.errors import (
    ConflictError,
    MedicError,
    NotFoundError,
    PermanentError,
    StoreError,
    TransientError,
)
from medic.ports import Clock, Scheduler

__all__ = ["WATCHDOG", "Watchdog", "WatchdogApi"]

logger = logging.getLogger(__name__)

WATCHDOG = "medic-watchdog"


class WatchdogApi(Protocol):
    """The part of the advice API the watchdog uses (``MedicApiClient`` in production)."""

    def get_advice(self, advice_id: AdviceId) -> Advice | None: ...

    def append_audit(self, event: AuditEvent) -> int: ...

    def report_reconciliation(
        self,
        advice_id: AdviceId,
        observed_generation: int,
        status: Reconciliation,
        reason: str,
        now: datetime,
    ) -> Advice: ...


class Watchdog:
    """Releases jobs medic left held (module docstring). One instance per controller process."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        api: WatchdogApi,
        journal: Journal,
        clock: Clock,
        timeout_seconds: float,
        mode: Mode,
        actor: str = WATCHDOG,
    ) -> None:
        self._scheduler = scheduler
        self._api = api
        self._journal = journal
        self._clock = clock
        self._timeout = timeout_seconds
        self._mode = mode
        self._actor = actor
        # The API failed during this poll: do not wait on it again for every held job.
        self._api_down = False

    def record_hold(self, advice: Advice, job: Job) -> None:
        """The controller's ``before_hold`` hook: journal the job's constraints as they are."""
        now = self._clock.now()
        earlier = self._journal.hold(job.id)
        if earlier is not None and earlier.releasing:
            # A release of ours that the process did not live to journal: record it first.
            self._released(earlier, now, confirmed=True)
        hold = Hold(
            job_id=job.id,
            cluster=advice.cluster,
            advice_id=advice.id,
            generation=advice.generation,
            attempt=advice.attempt,
            original_excluded=job.excluded_nodes,
            held_at=now,
            since=now,
        )
        self._journal.commit(put=hold)

    def is_released(self, advice: Advice) -> bool:
        return self._journal.is_released(advice.id, advice.generation)

    def check(self) -> None:
        """One poll over the journalled jobs; a failure with one job never stops the others."""
        for hold in self._journal.holds():
            try:
                self._check(hold)
            except MedicError as exc:
                logger.warning("watchdog: job %s: %s (will retry)", hold.job_id, exc)

    def flush(self) -> bool:
        """Deliver the outbox in order; False when the API could not take all of it now."""
        self._api_down = False
        while outbox := self._journal.outbox():
            item = outbox[0]
            try:
                self._deliver(item)
            except (ConflictError, PermanentError) as exc:
                # Superseded generation, unknown advice, refused event: retrying cannot help.
                logger.warning("watchdog: dropping undeliverable %s: %s", item["type"], exc)
            except (TransientError, StoreError) as exc:
                logger.info("watchdog: API unavailable, %d record(s) queued: %s", len(outbox), exc)
                self._api_down = True
                return False
            self._journal.delivered()
        return True

    # ------------------------------------------------------------------ one job
    def _check(self, hold: Hold) -> None:
        now = self._clock.now()
        try:
            job = self._scheduler.get_job(hold.job_id)
        except NotFoundError:
            job = None
        if job is None or not (job.held and job.restart_count > hold.attempt):
            if hold.releasing:
                # Our release took effect but the process died before journalling it.
                self._released(hold, now, confirmed=True)
            else:
                self._journal.commit(drop=hold.job_id)
            return
        current = self._follow_advice(hold, now)
        if current is None:
            return
        held_for = (now - current.since).total_seconds()
        if held_for < self._timeout:
            return
        if self._mode is Mode.OBSERVE:
            if not current.observed:
                self._observe(current, now, held_for)
            return
        self._release(current, job, now, held_for)

    def _follow_advice(self, hold: Hold, now: datetime) -> Hold | None:
        """The hold after looking at its advice; None when the advice converged (entry gone)."""
        if self._api_down:
            return hold
        try:
            advice = self._api.get_advice(hold.advice_id)
        except MedicError as exc:
            # Unreachable control plane: the wait goes on and ends in a release (fail open).
            logger.info("watchdog: cannot read advice %s: %s", hold.advice_id, exc)
            self._api_down = isinstance(exc, TransientError | StoreError)
            return hold
        if advice is None:
            return hold
        if (
            advice.status is Reconciliation.CONVERGED
            and advice.observed_generation == advice.generation
        ):
            self._journal.commit(drop=hold.job_id)
            return None
        if advice.generation > hold.generation and not hold.releasing:
            hold = replace(hold, generation=advice.generation, since=now)
            self._journal.commit(put=hold)
        return hold

    def _observe(self, hold: Hold, now: datetime, held_for: float) -> None:
        reason = (
            f"observe mode: would restore the excluded nodes and release after {held_for:.0f} s"
        )
        event = self._event(hold, AuditKind.ACTION_SKIPPED, now, reason=reason)
        self._journal.commit(
            put=replace(hold, observed=True),
            outbox=[event],
            history=[self._record(hold, now, "would-release", held_for)],
        )
        logger.warning(
            "watchdog (observe): would release job %s (held %.0f s)", hold.job_id, held_for
        )

    def _release(self, hold: Hold, job: Job, now: datetime, held_for: float) -> None:
        if not hold.releasing:
            hold = replace(hold, releasing=True)
            started = self._event(hold, AuditKind.ACTION_STARTED, now, held_seconds=held_for)
            self._journal.commit(put=hold, outbox=[started])
        try:
            if job.excluded_nodes != hold.original_excluded:
                self._scheduler.set_excluded_nodes(hold.job_id, hold.original_excluded)
            self._scheduler.release(hold.job_id)
        except (TransientError, PermanentError) as exc:
            failed = self._event(hold, AuditKind.ACTION_FAILED, self._clock.now(), error=str(exc))
            self._journal.commit(outbox=[failed])
            raise
        self._released(hold, self._clock.now(), confirmed=False)
        logger.warning("watchdog: released job %s after %.0f s held", hold.job_id, held_for)

    def _released(self, hold: Hold, now: datetime, *, confirmed: bool) -> None:
        held_for = (now - hold.held_at).total_seconds()
        reason = (
            f"watchdog released the job with its original excluded nodes after {held_for:.0f} s"
            " without convergence"
        )
        succeeded = self._event(
            hold, AuditKind.ACTION_SUCCEEDED, now, held_seconds=held_for, confirmed=confirmed
        )
        reconciled = self._event(
            hold,
            AuditKind.RECONCILIATION,
            now,
            status=Reconciliation.ABANDONED.value,
            reason=reason,
        )
        report = {"type": "reconciliation", "advice_id": hold.advice_id}
        report |= {"generation": hold.generation, "status": "abandoned", "reason": reason}
        self._journal.commit(
            drop=hold.job_id,
            outbox=[succeeded, reconciled, report],
            history=[self._record(hold, now, "released", held_for)],
        )

    # ------------------------------------------------------------------ records
    def _event(self, hold: Hold, kind: AuditKind, now: datetime, **extra: object) -> dict[str, Any]:
        """An outbox item with one audit event in the controller's payload shape."""
        payload: dict[str, object] = {
            "advice_id": hold.advice_id,
            "generation": hold.generation,
            "key": f"watchdog/{hold.advice_id}/g{hold.generation}/{ActionKind.RELEASE.value}",
            "original_excluded_nodes": sorted(hold.original_excluded),
            # The API stamps its own time on delivery, which may be much later.
            "occurred_at": now.isoformat(),
            **extra,
        }
        return {
            "type": "audit",
            "kind": kind.value,
            "actor": self._actor,
            "job_id": hold.job_id,
            "cluster": hold.cluster,
            "action": ActionKind.RELEASE.value,
            "mode": self._mode.value,
            "payload": payload,
        }

    def _record(self, hold: Hold, now: datetime, what: str, held_for: float) -> dict[str, Any]:
        return {
            "time": now.isoformat(),
            "what": what,
            "mode": self._mode.value,
            "held_seconds": round(held_for, 3),
            **hold.to_json(),
        }

    def _deliver(self, item: dict[str, Any]) -> None:
        now = self._clock.now()
        if item["type"] == "reconciliation":
            self._api.report_reconciliation(
                AdviceId(int(item["advice_id"])),
                int(item["generation"]),
                Reconciliation(item["status"]),
                str(item["reason"]),
                now,
            )
            return
        self._api.append_audit(
            AuditEvent(
                time=now,
                actor=item["actor"],
                kind=AuditKind(item["kind"]),
                subject_type=SubjectType.JOB,
                subject_id=item["job_id"],
                cluster=item["cluster"],
                action=item["action"],
                mode=Mode(item["mode"]),
                payload=dict(item["payload"]),
            )
        )
