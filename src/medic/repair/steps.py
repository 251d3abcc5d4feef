"""Repair steps on the cluster, audited before and after, the slow ones off the control loop.

A repair's commands are of two kinds. Scheduler commands (drain, requeue, exclude, release) take
milliseconds and run inside the loop pass (:meth:`Steps.now`). Operator hooks (reprovision,
power-cycle: up to ``repair.hook_timeout_seconds``) and the revalidation suite (up to
``validation_timeout_seconds`` per test) can take an hour; run inside the pass they would stop
job recovery for every job on the cluster while one node is rebuilt. :meth:`Steps.poll` starts
such a step in a daemon thread and answers None while it runs; a later pass collects the result.

The loop waits for a step it just started, up to ``settle_seconds`` in all per pass (however
many steps it starts), so a quick one (the simulator, ``scontrol reboot``) finishes in the pass
that started it and the lifecycle reads the same as before. A step whose repair moved on
without it (another replica took the repair over, or failed it) is abandoned at the next pass
(:meth:`Steps.abandon`): audited as failed, so every started step has its end in the trail.
A step's work must touch nothing the loop thread uses unsynchronised once that wait is over:
hooks and validation commands only run processes.

What runs lives only in this process; what was asked for is durable. ``repair-step-started`` is
in the trail before a command is issued and its outcome after, so an engine that takes a repair
over (its engine stopped mid-step, :mod:`medic.repair.leases`) reads the step back with
:func:`read_record`: never started, started with no outcome (in doubt: the engine stopped, or
abandoned it), succeeded, failed, or refused for good. :mod:`medic.repair.execution` decides
from that and the node. At the takeover, :func:`close_in_doubt` gives each step left in doubt
its outcome in the trail, explicitly unknown, so no ``repair-step-started`` stays without one.
Threads are daemons so that stopping medic never waits for an operator's hook.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.repairs import Repair
from medic.errors import MedicError, PermanentError
from medic.ports import AuditQuery

__all__ = [
    "RECOVERED",
    "Audit",
    "StepOutcome",
    "StepRecord",
    "Steps",
    "close_in_doubt",
    "read_record",
]

T = TypeVar("T")
Audit = Callable[[AuditKind, Repair, dict[str, Any], datetime], None]
"""Appends one repair event: (kind, repair, payload, time)."""
RECOVERED = "recovered"
"""Payload key of a step issued again by an engine that found it in doubt (why, in words)."""
_ABANDONED = "abandoned"
_PAGE = 500
_STEP_KINDS = frozenset(
    {AuditKind.REPAIR_STEP_STARTED, AuditKind.REPAIR_STEP_SUCCEEDED, AuditKind.REPAIR_STEP_FAILED}
)


class StepOutcome(enum.StrEnum):
    """What the audit trail says of a repair's last run of one step."""

    NOT_STARTED = "not-started"
    """No ``repair-step-started``: the command was never issued."""
    IN_DOUBT = "in-doubt"
    """Started with no outcome (or abandoned by an engine that lost the repair): it may have run."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """A transient error: it may be issued again."""
    REFUSED = "refused"
    """A permanent error: issuing it again would fail the same way."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    outcome: StepOutcome
    started_at: datetime | None = None
    """When the last run was started."""
    error: str | None = None
    """The last run's error (failed, refused)."""
    recoveries: int = 0
    """Runs issued again by an engine that found the step in doubt (:data:`RECOVERED`)."""


@dataclass(frozen=True, slots=True)
class _Running:
    future: Future[Any]
    payload: dict[str, Any]
    started: datetime
    repair: Repair


class Steps:
    """Runs and audits a repair's steps (see the module docstring)."""

    def __init__(
        self, audit: Audit, clock: Callable[[], datetime], *, settle_seconds: float = 1.0
    ) -> None:
        self._audit = audit
        self._now = clock
        self._settle = settle_seconds
        self._settle_until = time.monotonic() + settle_seconds
        self._running: dict[tuple[int, str], _Running] = {}

    def begin_pass(self) -> None:
        """A new pass: it may again wait up to ``settle_seconds`` for steps it starts."""
        self._settle_until = time.monotonic() + self._settle

    def abandon(self, keep: Callable[[int, str], bool]) -> None:
        """Forget the steps ``keep(repair_id, step)`` says nobody will collect (their repair
        moved on), each audited as failed; their threads finish on their own."""
        for key, running in list(self._running.items()):
            if not keep(*key):
                del self._running[key]
                payload = {**running.payload, "error": "abandoned: the repair moved on"}
                payload |= {"permanent": False, _ABANDONED: True}
                self._audit(AuditKind.REPAIR_STEP_FAILED, running.repair, payload, self._now())

    def now(self, repair: Repair, step: str, work: Callable[[], T], **detail: Any) -> T:
        """Run ``work`` in this pass, audited before and after; re-raises its error."""
        payload, started = self._started(repair, step, detail), self._now()
        future: Future[T] = Future()
        _run_into(future, work)
        self._finished(repair, _Running(future, payload, started, repair))
        return future.result()

    def poll(
        self, repair: Repair, step: str, work: Callable[[], T], **detail: Any
    ) -> Future[T] | None:
        """Start ``work`` in the background the first time; None while it runs, then its finished
        future once (its ``result()`` re-raises the step's error). Audited like :meth:`now`."""
        key = (repair.id, step)
        running = self._running.get(key)
        if running is None:
            payload = self._started(repair, step, detail)
            future: Future[T] = Future()
            thread = threading.Thread(
                target=_run_into,
                args=(future, work),
                name=f"medic-repair-{repair.id}-{step}",
                daemon=True,
            )
            running = self._running[key] = _Running(future, payload, self._now(), repair)
            thread.start()
            wait([future], timeout=max(0.0, self._settle_until - time.monotonic()))
        if not running.future.done():
            return None
        del self._running[key]
        return self._finished(repair, running)

    def running(self, repair: Repair, step: str) -> bool:
        """True while ``step`` of ``repair`` runs in this process."""
        return (repair.id, step) in self._running

    def _started(self, repair: Repair, step: str, detail: dict[str, Any]) -> dict[str, Any]:
        payload = {"repair_id": repair.id, "step": step, **detail}
        self._audit(AuditKind.REPAIR_STEP_STARTED, repair, payload, self._now())
        return payload

    def _finished(self, repair: Repair, running: _Running) -> Future[Any]:
        done = self._now()
        error = running.future.exception()
        if error is None:
            seconds = (done - running.started).total_seconds()
            self._audit(
                AuditKind.REPAIR_STEP_SUCCEEDED,
                repair,
                {**running.payload, "seconds": seconds},
                done,
            )
        elif isinstance(error, MedicError):
            permanent = isinstance(error, PermanentError)
            failed = {**running.payload, "error": str(error), "permanent": permanent}
            self._audit(AuditKind.REPAIR_STEP_FAILED, repair, failed, done)
        else:  # a bug, not the cluster: recorded, then raised to the loop like any other
            failed = {**running.payload, "error": f"{type(error).__name__}: {error}"}
            self._audit(AuditKind.REPAIR_STEP_FAILED, repair, failed | {"permanent": False}, done)
        return running.future


def _run_into(future: Future[T], work: Callable[[], T]) -> None:
    try:
        future.set_result(work())
    except BaseException as exc:  # handed to whoever collects the step, re-raised there
        future.set_exception(exc)


def read_record(trail: AuditQuery, repair: Repair, step: str) -> StepRecord:
    """The last run of ``step`` of ``repair`` as the audit trail has it (see :class:`StepOutcome`):
    the node's step events since the repair was created, oldest first."""
    record = StepRecord(StepOutcome.NOT_STARTED)
    recoveries = 0
    for event in _step_events(trail, repair):
        payload = event.payload
        if payload.get("step") != step:
            continue
        if event.kind is AuditKind.REPAIR_STEP_STARTED:
            recoveries += RECOVERED in payload
            record = StepRecord(StepOutcome.IN_DOUBT, event.time)
            continue
        if payload.get(_ABANDONED):
            continue  # its engine stopped collecting it: the step may still have run
        if event.kind is AuditKind.REPAIR_STEP_SUCCEEDED:
            outcome = StepOutcome.SUCCEEDED
        else:
            outcome = StepOutcome.REFUSED if payload.get("permanent") else StepOutcome.FAILED
        error = payload.get("error")
        record = StepRecord(outcome, record.started_at, str(error) if error else None)
    return StepRecord(record.outcome, record.started_at, record.error, recoveries)


def close_in_doubt(
    trail: AuditQuery, repair: Repair, audit: Audit, now: datetime, why: str
) -> list[str]:
    """Give each step of ``repair`` started with no outcome in the trail (its engine stopped) an
    explicit one: unknown, recorded as a failure its engine abandoned, which :func:`read_record`
    still reads as in doubt (what to do next stays the taking engine's to decide). The steps it
    closed, in order."""
    started: dict[str, None] = {}
    for event in _step_events(trail, repair):
        step = str(event.payload.get("step"))
        if event.kind is AuditKind.REPAIR_STEP_STARTED:
            started[step] = None
        else:
            started.pop(step, None)
    for step in started:
        payload: dict[str, Any] = {"repair_id": repair.id, "step": step, "permanent": False}
        payload |= {"error": f"outcome unknown: {why}", _ABANDONED: True, "unknown": True}
        audit(AuditKind.REPAIR_STEP_FAILED, repair, payload, now)
    return list(started)


def _step_events(trail: AuditQuery, repair: Repair) -> Iterator[AuditEvent]:
    """The step events of ``repair`` on its node since it was created, oldest first."""
    after: int | None = None
    while True:
        page = trail.query_audit(
            cluster=repair.cluster,
            subject_type=SubjectType.NODE.value,
            subject_id=str(repair.node),
            since=repair.created_at,
            after_id=after,
            limit=_PAGE,
        )
        for event in page:
            if event.kind in _STEP_KINDS and event.payload.get("repair_id") == repair.id:
                yield event
        if len(page) < _PAGE:
            return
        after = page[-1].id
