"""Exact outcomes on real Slurm, in the cases an independent harness caught medic out (issue 10):
a person's ``scancel`` (of a running job, and of a job medic is recovering) stays final; a second
fault during the restarted run's start-up, and two faults in a row, are each recovered with
exactly one requeue; nothing medic does is counted as a failure of the next attempt.

Every case asserts the number of requeues (Slurm's ``Restarts``) and the exact scheduler commands
medic issued, over a watch window after the outcome, not "at least one".
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from medic.dev.slurm import LocalSlurm
from medic.domain.advice import AdviceAction, Reconciliation

from .conftest import Jobs
from .harness import ACT, DEEPSPEED, Medic, TrainingJob, poll
from .test_recovery import (
    HANG_FLOOR_S,
    VICTIM,
    assert_one_requeue,
    converged,
    requeue_commands,
    start_training,
    xid79_and_kill,
)

pytestmark = pytest.mark.slow

MedicFactory = Callable[..., Medic]
WATCH_S = 5.0
"""How long a final outcome must hold (a requeue shows in Restarts at once; a spurious one came
within a second of the cause on the independent lab)."""


def issued_at(medic: Medic, job_id: str) -> list[tuple[float, tuple[str, ...]]]:
    """(time, argv) of every mutating command medic issued for the job."""
    mutating = set(medic.mutating(job_id))
    return [
        (at, argv) for runner in medic.runners for at, argv in runner.commands if argv in mutating
    ]


def assert_stays_cancelled(job: TrainingJob, restarts: int) -> None:
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        info = job.info()
        assert info["JobState"] == "CANCELLED", info
        assert job.restarts(info) == restarts, info
        time.sleep(0.5)


def test_a_person_cancelling_a_running_job_is_final(
    jobs: Jobs, medic_factory: MedicFactory
) -> None:
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "usercancel", ACT)
    job.cancel()
    poll("CANCELLED", lambda: job.info().get("JobState") == "CANCELLED", timeout=30)
    assert_stays_cancelled(job, restarts=0)
    assert medic.mutating(job.job_id) == []
    assert medic.advice(job.job_id) is None
    assert medic.verdicts(job.job_id) == []


def test_a_person_cancelling_a_job_medic_is_recovering_is_final(
    cluster: LocalSlurm, jobs: Jobs, medic_factory: MedicFactory
) -> None:
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "cancelrecovering", ACT)
    xid79_and_kill(cluster, job)
    poll("medic's requeue", lambda: job.restarts() == 1, timeout=30, every=0.05)
    cancelled_at = time.time()
    job.cancel()  # before the restarted run gets going (maybe before medic's release)
    poll("CANCELLED", lambda: job.info().get("JobState") == "CANCELLED", timeout=30)
    assert_stays_cancelled(job, restarts=1)
    issued = medic.mutating(job.job_id)
    assert issued == requeue_commands(job.job_id, VICTIM)[: len(issued)]
    assert len(issued) >= 1
    # Nothing after the cancel but, at most, the release already on its way then.
    late = [argv for at, argv in issued_at(medic, job.job_id) if at > cancelled_at + 0.05]
    assert late == []
    advice = medic.advice(job.job_id)
    assert advice is not None and advice.generation == 1 and advice.attempt == 0


def test_a_second_fault_during_the_restarted_runs_start_up_is_one_more_requeue(
    cluster: LocalSlurm, jobs: Jobs, medic_factory: MedicFactory
) -> None:
    # The DeepSpeed-style trainer (the others here run the Megatron-style one).
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "startupfault", ACT, DEEPSPEED)
    xid79_and_kill(cluster, job)
    info = poll("the restart", lambda: job.running(restarts=1, avoid=VICTIM), timeout=60)
    converged(medic, job)
    # As soon as the restarted ranks are up, before they trained a step: one node's ranks die
    # (no kernel line: nothing names the node, so no exclusion beyond node2's).
    second = job.node_list(info)[1]
    poll("the restarted ranks", lambda: len(job.pids_on(second, restart=1)) == 8, timeout=30)
    assert job.step(restart=1) <= job.checkpoint_step() + 1
    job.signal_ranks(second, signal.SIGKILL, restart=1)

    poll("the second restart", lambda: job.running(restarts=2, avoid=VICTIM), timeout=60)
    poll("a step of the third run", lambda: job.step(restart=2) > 0, timeout=60)
    advice = medic.advice(job.job_id)
    assert advice is not None and advice.attempt == 1 and advice.action is AdviceAction.REQUEUE
    poll("the second advice to converge",
         lambda: (a := medic.advice(job.job_id)) is not None
         and a.status is Reconciliation.CONVERGED, timeout=30)  # fmt: skip
    assert advice.exclude_nodes == {VICTIM}
    hold = ("scontrol", "requeuehold", job.job_id)
    assert medic.mutating(job.job_id).count(hold) == 2
    info = job.info()
    assert job.restarts(info) == 2 and info["JobState"] == "RUNNING"
    time.sleep(WATCH_S)
    assert job.restarts() == 2


def test_two_faults_in_a_row_are_two_requeues(
    cluster: LocalSlurm, jobs: Jobs, medic_factory: MedicFactory
) -> None:
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "twofaults", ACT)
    xid79_and_kill(cluster, job)
    info = poll("the restart", lambda: job.running(restarts=1, avoid=VICTIM), timeout=60)
    poll("the restarted run training", lambda: job.step(restart=1) > 0, timeout=60)
    converged(medic, job)
    assert_one_requeue(job, avoid=VICTIM, watch_s=3.0)
    # Then the restarted run hangs: one more requeue, nothing excluded for it.
    job.signal_ranks(job.node_list(info)[1], signal.SIGSTOP, restart=1)
    poll("the second restart", lambda: job.running(restarts=2, avoid=VICTIM), timeout=90)
    poll("a step of the third run", lambda: job.step(restart=2) > 0, timeout=60)
    advice = medic.advice(job.job_id)
    assert advice is not None and advice.attempt == 1
    assert advice.exclude_nodes == {VICTIM}  # node2 still out; nothing new for a silent hang
    verdicts = medic.verdicts(job.job_id)
    assert [v.attempt for v in verdicts] == [0, 1]
    assert verdicts[1].implicated_nodes == frozenset()
    hold = ("scontrol", "requeuehold", job.job_id)
    assert medic.mutating(job.job_id).count(hold) == 2
    time.sleep(WATCH_S)
    info = job.info()
    assert job.restarts(info) == 2 and info["JobState"] == "RUNNING"
