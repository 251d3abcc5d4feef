"""Integration tests of the controller: carrying out advice on the simulated scheduler, step by
step, when the process is killed between (or just before) steps and a new controller takes over.

The controller is driven directly (no control loop): advice is published to a real SQLite store,
a :class:`~.conftest.RecordingScheduler` counts every command that reached the scheduler and
raises :class:`~.conftest.Crash` (a BaseException, like a kill) around the N-th one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from medic.control.executor import Controller
from medic.domain.actions import ActionKind, ActionStatus
from medic.domain.advice import Advice, AdviceAction, AdviceRequest, Reconciliation
from medic.domain.audit import AuditKind
from medic.domain.cluster import JobState, Mode
from medic.domain.faults import FaultKind
from medic.domain.ids import JobId, NodeName
from medic.errors import TransientError
from medic.ports import Clock, Scheduler

from .conftest import CLUSTER, Crash, Harness, MakeHarness, RecordingScheduler

REQUEUE = [
    ("requeue_hold", ActionKind.REQUEUE_HOLD),
    ("set_excluded_nodes", ActionKind.EXCLUDE_NODES),
    ("release", ActionKind.RELEASE),
]
STOP = [("cancel", ActionKind.CANCEL)]


@dataclass
class Case:
    """One advice ready to be reconciled, and how to tell that the scheduler got there."""

    h: Harness
    job: JobId
    bad: NodeName | None
    advice: Advice
    steps: list[tuple[str, ActionKind]]
    check: Callable[[], None]

    @property
    def commands(self) -> list[str]:
        return [command for command, _ in self.steps]

    def controller(self, scheduler: RecordingScheduler) -> Controller:
        return Controller(scheduler=scheduler, ledger=self.h.store, clock=self.h.clock)

    def proxy(self, **crash: int | None) -> RecordingScheduler:
        return RecordingScheduler(self.h.sim.scheduler, self.h.clock, **crash)

    def fresh(self) -> Advice:
        """The advice as stored now (what a restarted controller reads)."""
        advice = self.h.store.get_advice(self.advice.id)
        assert advice is not None
        return advice

    def key(self, kind: ActionKind) -> str:
        return f"advice/{self.advice.id}/g{self.advice.generation}/{kind.value}"

    def events(self, kind: AuditKind, step: ActionKind) -> list[int]:
        """Ids of the audit events of ``kind`` for ``step`` of this advice."""
        return [
            e.id
            for e in self.h.audit(self.job, kind)
            if e.payload.get("key") == self.key(step) and e.id is not None
        ]


def _publish(h: Harness, job: JobId, action: AdviceAction, exclude: frozenset[NodeName]) -> Advice:
    return h.store.publish_advice(
        AdviceRequest(
            cluster=CLUSTER,
            job_id=job,
            attempt=0,
            action=action,
            exclude_nodes=exclude,
            reason=f"test: {action.value}",
            mode=Mode.ACT,
            rule="test",
        ),
        h.clock.now(),
    )


def _advance(h: Harness, seconds: float) -> None:
    """Virtual time passes for the cluster only (no control loop runs in these tests)."""
    h.clock.advance(seconds)
    h.sim.advance()


def _requeue_case(make_harness: MakeHarness) -> Case:
    """A job whose GPU fell off the bus, and advice to requeue it without that node."""
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    _advance(h, 13)
    bad = h.inject(FaultKind.GPU_FELL_OFF_BUS, job).node
    assert bad is not None
    _advance(h, 1)
    advice = _publish(h, job, AdviceAction.REQUEUE, frozenset({bad}))

    def check() -> None:
        state = h.job(job)
        assert state.restart_count == 1, "requeued more (or less) than once"
        assert not state.held
        assert state.excluded_nodes == frozenset({bad})
        assert state.state is JobState.RUNNING
        assert bad not in state.nodes

    return Case(h, job, bad, advice, REQUEUE, check)


def _stop_case(make_harness: MakeHarness) -> Case:
    """A running job, and advice to stop it."""
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    _advance(h, 13)
    advice = _publish(h, job, AdviceAction.STOP, frozenset())

    def check() -> None:
        state = h.job(job)
        assert state.state is JobState.CANCELLED
        assert state.restart_count == 0

    return Case(h, job, None, advice, STOP, check)


CASES = {"requeue": _requeue_case, "stop": _stop_case}
CRASH_POINTS = [("requeue", 1), ("requeue", 2), ("requeue", 3), ("stop", 1)]
CRASH_IDS = ["requeue-1", "requeue-2", "requeue-3", "stop-1"]


def _assert_converged(case: Case) -> None:
    stored = case.fresh()
    assert stored.status is Reconciliation.CONVERGED
    assert stored.observed_generation == stored.generation
    assert not stored.is_active
    reconciled = case.h.audit(case.job, AuditKind.RECONCILIATION)
    assert [e.payload["status"] for e in reconciled] == ["converged"]


# --- crash right after the N-th command took effect ----------------------------------------------
@pytest.mark.parametrize(("action", "n"), CRASH_POINTS, ids=CRASH_IDS)
def test_crash_after_a_step_then_a_new_controller_finishes(
    make_harness: MakeHarness, action: str, n: int
) -> None:
    case = CASES[action](make_harness)
    first = case.proxy(crash_after=n)
    with pytest.raises(Crash):
        case.controller(first).reconcile(case.advice)
    assert first.names() == case.commands[:n]
    assert case.fresh().status is Reconciliation.PENDING

    _advance(case.h, 1)
    second = case.proxy()
    outcome = case.controller(second).reconcile(case.fresh())

    assert outcome.status is Reconciliation.CONVERGED
    assert second.names() == case.commands[n:]
    assert first.names() + second.names() == case.commands, "a command was repeated or lost"
    assert (outcome.first_effect_at is None) == (n == len(case.steps))
    case.check()
    _assert_converged(case)

    # The step the dead controller issued shows in the scheduler: the new one records it as
    # succeeded, found from the scheduler, never as skipped ("nothing was issued" would be false).
    records = {r.kind: r.status for r in case.h.actions(case.job)}
    for i, (_, kind) in enumerate(case.steps, start=1):
        started = case.events(AuditKind.ACTION_STARTED, kind)
        succeeded = case.events(AuditKind.ACTION_SUCCEEDED, kind)
        assert case.events(AuditKind.ACTION_SKIPPED, kind) == []
        assert len(started) == 1, kind
        assert records[kind] is ActionStatus.SUCCEEDED
        assert len(succeeded) == 1
        assert started[0] < succeeded[0]
        recovered = [
            e.payload.get("recovered")
            for e in case.h.audit(case.job, AuditKind.ACTION_SUCCEEDED)
            if e.id == succeeded[0]
        ]
        if i == n:
            assert "the scheduler shows its effect" in str(recovered[0])
        else:
            assert recovered == [None]


# --- crash right before the N-th command ---------------------------------------------------------
@pytest.mark.parametrize(("action", "n"), CRASH_POINTS, ids=CRASH_IDS)
def test_crash_before_a_step_then_a_new_controller_issues_it(
    make_harness: MakeHarness, action: str, n: int
) -> None:
    case = CASES[action](make_harness)
    first = case.proxy(crash_before=n)
    with pytest.raises(Crash):
        case.controller(first).reconcile(case.advice)
    assert first.names() == case.commands[: n - 1]

    _advance(case.h, 1)
    second = case.proxy()
    outcome = case.controller(second).reconcile(case.fresh())

    assert outcome.status is Reconciliation.CONVERGED
    assert outcome.first_effect_at is not None
    assert second.names() == case.commands[n - 1 :]
    assert first.names() + second.names() == case.commands
    case.check()
    _assert_converged(case)
    assert case.h.audit(case.job, AuditKind.ACTION_SKIPPED) == []
    records = {r.kind: r.status for r in case.h.actions(case.job)}
    assert records == {kind: ActionStatus.SUCCEEDED for _, kind in case.steps}
    for i, (_, kind) in enumerate(case.steps, start=1):
        started = case.events(AuditKind.ACTION_STARTED, kind)
        [succeeded] = case.events(AuditKind.ACTION_SUCCEEDED, kind)
        # the interrupted step was announced by both controllers and completed once
        assert len(started) == (2 if i == n else 1), kind
        assert max(started) < succeeded


# --- idempotence after convergence ---------------------------------------------------------------
@pytest.mark.parametrize("action", ["requeue", "stop"])
def test_reconciling_converged_advice_again_changes_nothing(
    make_harness: MakeHarness, action: str
) -> None:
    case = CASES[action](make_harness)
    scheduler = case.proxy()
    controller = case.controller(scheduler)
    assert controller.reconcile(case.advice).status is Reconciliation.CONVERGED
    assert scheduler.names() == case.commands
    events = case.h.audit()
    records = case.h.actions(case.job)
    stored = case.fresh()

    for reconciler in (controller, case.controller(case.proxy()), controller):
        _advance(case.h, 1)
        outcome = reconciler.reconcile(case.fresh())
        assert outcome.status is Reconciliation.CONVERGED
        assert outcome.first_effect_at is None

    assert scheduler.names() == case.commands, "a command was issued again"
    assert case.h.audit() == events, "new audit events after convergence"
    assert case.h.actions(case.job) == records
    assert case.fresh() == stored
    case.check()


# --- a step failing transiently is retried, the steps before it are not ---------------------------
class _FlakyExclusion(RecordingScheduler):
    """``set_excluded_nodes`` fails once with a TransientError (scheduler busy)."""

    def __init__(self, inner: Scheduler, clock: Clock) -> None:
        super().__init__(inner, clock)
        self.failures = 1

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        if self.failures:
            self.failures -= 1
            raise TransientError("slurmctld busy (test)")
        super().set_excluded_nodes(job_id, nodes)


def test_transient_failure_of_a_step_is_retried_without_repeating_the_others(
    make_harness: MakeHarness,
) -> None:
    case = _requeue_case(make_harness)
    scheduler = _FlakyExclusion(case.h.sim.scheduler, case.h.clock)
    controller = case.controller(scheduler)
    with pytest.raises(TransientError):
        controller.reconcile(case.advice)
    assert scheduler.names() == ["requeue_hold"]
    [failed] = case.events(AuditKind.ACTION_FAILED, ActionKind.EXCLUDE_NODES)
    records = {r.kind: r.status for r in case.h.actions(case.job)}
    assert records[ActionKind.EXCLUDE_NODES] is ActionStatus.FAILED
    assert case.fresh().status is Reconciliation.PENDING

    _advance(case.h, 1)
    outcome = controller.reconcile(case.fresh())
    assert outcome.status is Reconciliation.CONVERGED
    assert scheduler.names() == case.commands
    case.check()
    _assert_converged(case)
    records = {r.kind: r.status for r in case.h.actions(case.job)}
    assert set(records.values()) == {ActionStatus.SUCCEEDED}
    [succeeded] = case.events(AuditKind.ACTION_SUCCEEDED, ActionKind.EXCLUDE_NODES)
    assert failed < succeeded


# --- advice that no longer applies -------------------------------------------------------------
@pytest.mark.parametrize("action", [AdviceAction.REQUEUE, AdviceAction.STOP])
def test_advice_for_a_completed_job_is_abandoned(
    make_harness: MakeHarness, action: AdviceAction
) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("short", train_iters=8)
    _advance(h, 10)
    finished = h.job(job)
    assert finished.state is JobState.COMPLETED
    exclude = frozenset({finished.nodes[-1]}) if action is AdviceAction.REQUEUE else frozenset()
    advice = _publish(h, job, action, exclude)
    scheduler = RecordingScheduler(h.sim.scheduler, h.clock)

    outcome = Controller(scheduler=scheduler, ledger=h.store, clock=h.clock).reconcile(advice)

    assert outcome.status is Reconciliation.ABANDONED
    assert "completed" in outcome.reason
    assert outcome.first_effect_at is None
    assert scheduler.calls == []
    assert h.actions(job) == []
    stored = h.store.get_advice(advice.id)
    assert stored is not None
    assert stored.status is Reconciliation.ABANDONED
    assert stored.observed_generation == stored.generation
    assert not stored.is_active
    [event] = h.audit(job)
    assert event.kind is AuditKind.RECONCILIATION
    assert event.actor == "medic-controller"
    assert event.payload["status"] == "abandoned"
    assert "completed" in event.payload["reason"]
    assert h.job(job).state is JobState.COMPLETED
    assert h.job(job).restart_count == 0

    # and reconciling the abandoned advice again does nothing more
    again = Controller(scheduler=scheduler, ledger=h.store, clock=h.clock).reconcile(stored)
    assert again.status is Reconciliation.ABANDONED
    assert scheduler.calls == []
    assert len(h.audit(job)) == 1
