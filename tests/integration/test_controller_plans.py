"""The controller plans every step from the job as it reads it, never loops against a state that
refuses the step, issues each step at most once per advice generation, and never brings back a
job someone cancelled.

Each case comes from a failure seen on an independent real-Slurm harness (issue 10): a requeue
of a job that was already queued looped ``requeuehold`` (refused) -> ``hold`` -> ``release`` every
pass (182 times in 49 s); a job was requeued 52 ms after a person cancelled it (it was still
COMPLETING); a requeue issued again after the job had already restarted. The scheduler here is a
script: its job state is set by each test (a fake, since what is tested is the controller's
planning); the ledger is the real SQLite store.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

from medic.control.executor import Controller
from medic.control.retries import GIVE_UP_SECONDS
from medic.domain.actions import ActionKind, ActionStatus
from medic.domain.advice import Advice, AdviceAction, AdviceRequest, Reconciliation
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, JobState, Mode
from medic.domain.ids import JobId, NodeName
from medic.errors import PermanentError, TransientError

from .conftest import CLUSTER, Harness, MakeHarness

JOB = JobId("4242")
BAD = NodeName("node2")


@dataclass
class ScriptedScheduler:
    """One job whose state the test sets; records every command; ``fail`` makes the next
    commands of a kind raise."""

    job: Job
    commands: list[str] = field(default_factory=list)
    fail: dict[str, Exception] = field(default_factory=dict)

    @property
    def cluster(self) -> str:
        return CLUSTER

    def get_job(self, job_id: JobId) -> Job:
        return self.job

    def _command(self, name: str) -> None:
        self.commands.append(name)
        if name in self.fail:
            raise self.fail[name]

    def requeue_hold(self, job_id: JobId) -> None:
        self._command("requeue_hold")
        j = self.job
        self.job = replace(j, state=JobState.PENDING, restart_count=j.restart_count + 1, held=True)

    def set_admin_comment(self, job_id: JobId, text: str) -> None:
        self.job = replace(self.job, admin_comment=text or None)  # the hold mark: not a command

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        self._command("set_excluded_nodes")
        if self.job.state is not JobState.PENDING:
            raise PermanentError("Job is no longer pending execution")
        self.job = replace(self.job, excluded_nodes=nodes)

    def release(self, job_id: JobId) -> None:
        self._command("release")
        self.job = replace(self.job, held=False)

    def cancel(self, job_id: JobId, reason: str) -> None:
        self._command("cancel")
        self.job = replace(self.job, state=JobState.CANCELLED)


def _job(state: JobState, **changes: object) -> Job:
    nodes = (NodeName("node1"), BAD)
    return replace(Job(JOB, CLUSTER, "train", state, "gpu", nodes=nodes, num_nodes=2), **changes)  # type: ignore[arg-type]


def _setup(make_harness: MakeHarness, job: Job) -> tuple[Harness, ScriptedScheduler, Controller]:
    h = make_harness(mode=Mode.ACT)
    sched = ScriptedScheduler(job)
    return h, sched, Controller(scheduler=sched, ledger=h.store, clock=h.clock)  # type: ignore[arg-type]


def _requeue(h: Harness, exclude: frozenset[NodeName] = frozenset({BAD})) -> Advice:
    request = AdviceRequest(CLUSTER, JOB, 0, AdviceAction.REQUEUE, exclude, "test", Mode.ACT, "t")
    return h.store.publish_advice(request, h.clock.now())


def _stored(h: Harness, advice: Advice) -> Advice:
    stored = h.store.get_advice(advice.id)
    assert stored is not None
    return stored


def _final_reasons(h: Harness) -> list[str]:
    """The reasons of the job's audited final reconciliations."""
    return [str(e.payload["reason"]) for e in h.audit(JOB, AuditKind.RECONCILIATION)]


def _statuses(h: Harness) -> dict[ActionKind, ActionStatus]:
    return {a.kind: a.status for a in h.store.list_actions(CLUSTER, JOB)}


def test_a_queued_job_is_not_requeued_and_the_plan_converges_at_once(
    make_harness: MakeHarness,
) -> None:
    h, sched, controller = _setup(make_harness, _job(JobState.PENDING))
    advice = _requeue(h)
    for _ in range(20):  # twenty passes: one command in all, no hold/release loop
        controller.reconcile(_stored(h, advice))
        h.clock.advance(0.2)
    assert sched.commands == ["set_excluded_nodes"]
    assert _stored(h, advice).status is Reconciliation.CONVERGED
    assert _statuses(h) == {
        ActionKind.REQUEUE_HOLD: ActionStatus.SKIPPED,
        ActionKind.EXCLUDE_NODES: ActionStatus.SUCCEEDED,
        ActionKind.RELEASE: ActionStatus.SKIPPED,
    }


def test_a_completing_job_waits_and_a_cancel_meanwhile_is_final(
    make_harness: MakeHarness,
) -> None:
    h, sched, controller = _setup(make_harness, _job(JobState.COMPLETING))
    advice = _requeue(h)
    outcome = controller.reconcile(_stored(h, advice))
    assert outcome.status is Reconciliation.PENDING
    assert outcome.reason == "waiting for the job to finish completing"
    sched.job = replace(sched.job, state=JobState.CANCELLED)  # it was a person's scancel
    for _ in range(5):
        controller.reconcile(_stored(h, advice))
    assert sched.commands == []
    stored = _stored(h, advice)
    assert stored.status is Reconciliation.ABANDONED
    assert _final_reasons(h) == ["job cancelled: a cancelled job is never requeued"]


def test_a_completing_job_that_failed_is_requeued_once_it_ended(
    make_harness: MakeHarness,
) -> None:
    h, sched, controller = _setup(make_harness, _job(JobState.COMPLETING))
    advice = _requeue(h)
    controller.reconcile(_stored(h, advice))
    sched.job = replace(sched.job, state=JobState.FAILED)
    controller.reconcile(_stored(h, advice))
    assert sched.commands == ["requeue_hold", "set_excluded_nodes", "release"]
    assert _stored(h, advice).status is Reconciliation.CONVERGED
    assert sched.job.restart_count == 1


def test_cancelled_while_medic_holds_it_is_never_released(make_harness: MakeHarness) -> None:
    h, sched, controller = _setup(make_harness, _job(JobState.FAILED))
    advice = _requeue(h)
    sched.fail["release"] = TransientError("slurmctld busy")
    with contextlib.suppress(TransientError):
        controller.reconcile(_stored(h, advice))
    sched.job = replace(sched.job, state=JobState.CANCELLED)  # a person cancels the held job
    h.clock.advance(60)
    controller.reconcile(_stored(h, advice))
    assert sched.commands == ["requeue_hold", "set_excluded_nodes", "release"]
    assert _stored(h, advice).status is Reconciliation.ABANDONED


def test_a_requeue_is_issued_once_per_generation_even_on_a_stale_read(
    make_harness: MakeHarness,
) -> None:
    h, sched, controller = _setup(make_harness, _job(JobState.RUNNING))
    advice = _requeue(h, frozenset())
    controller.reconcile(_stored(h, advice))
    assert sched.commands == ["requeue_hold", "release"]
    # A read that lags the requeue (still the old attempt running) must not requeue again.
    sched.job = replace(sched.job, state=JobState.RUNNING, restart_count=0, held=False)
    controller.reconcile(_stored(h, advice))
    assert sched.commands == ["requeue_hold", "release"]


def test_requeued_and_started_by_the_scheduler_first_needs_no_command(
    make_harness: MakeHarness,
) -> None:
    # Slurm requeued the job after declaring the node down, and started it elsewhere.
    elsewhere = (NodeName("node1"), NodeName("node3"))
    job = _job(JobState.RUNNING, restart_count=1, nodes=elsewhere)
    h, sched, controller = _setup(make_harness, job)
    advice = _requeue(h)
    controller.reconcile(_stored(h, advice))
    assert sched.commands == []
    assert _stored(h, advice).status is Reconciliation.CONVERGED


def test_an_exclusion_refused_because_the_job_started_meanwhile_is_replanned(
    make_harness: MakeHarness,
) -> None:
    h, sched, controller = _setup(make_harness, _job(JobState.PENDING, restart_count=1))
    advice = _requeue(h)
    started = (NodeName("node1"), NodeName("node3"))
    original = sched.set_excluded_nodes

    def start_first(job_id: JobId, nodes: frozenset[NodeName]) -> None:
        sched.job = replace(sched.job, state=JobState.RUNNING, nodes=started)
        original(job_id, nodes)  # refused: no longer pending

    sched.set_excluded_nodes = start_first  # type: ignore[method-assign]
    controller.reconcile(_stored(h, advice))
    assert sched.commands == ["set_excluded_nodes"]
    assert _stored(h, advice).status is Reconciliation.CONVERGED


def test_a_failing_step_is_retried_with_pauses_then_given_up_audited(
    make_harness: MakeHarness,
) -> None:
    h, sched, controller = _setup(make_harness, _job(JobState.FAILED))
    advice = _requeue(h, frozenset())
    sched.fail["requeue_hold"] = TransientError("slurm_load_jobs error: Socket timed out")
    passes = 0
    while _stored(h, advice).is_active and passes < 10_000:
        with contextlib.suppress(TransientError):
            controller.reconcile(_stored(h, advice))
        h.clock.advance(0.2)
        passes += 1
    elapsed = passes * 0.2
    assert GIVE_UP_SECONDS <= elapsed < GIVE_UP_SECONDS + 31
    # Tries at 0, 1, 3, 8, 18 s, then every 30 s until 300 s are spent: 15, not 1,500.
    assert sched.commands == ["requeue_hold"] * 15
    stored = _stored(h, advice)
    assert stored.status is Reconciliation.ABANDONED
    [reason] = _final_reasons(h)
    assert reason.startswith("requeue_hold failed 15 times over 3"), reason
    assert reason.endswith("giving up: slurm_load_jobs error: Socket timed out")
    failed = [a for a in h.store.list_actions(CLUSTER, JOB) if a.kind is ActionKind.REQUEUE_HOLD]
    assert [a.status for a in failed] == [ActionStatus.FAILED]
    assert len(h.audit(JOB, AuditKind.ACTION_FAILED)) == 15
