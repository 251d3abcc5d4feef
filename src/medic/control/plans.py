"""What a generation of advice asks of the scheduler: its steps, in order, and how to tell each
one done (or not needed) in the job's state as just read.

A requeue is three steps (requeue-hold, exclude nodes, release) and a stop is one (cancel). The
controller (:mod:`medic.control.executor`) carries a plan out with the ledger; a plan is read
afresh on every pass, so a step's "done" test is what makes a restarted controller neither repeat
nor skip one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from medic.domain.actions import ActionKind
from medic.domain.advice import Advice, AdviceAction
from medic.domain.cluster import Job, JobState
from medic.domain.ids import NodeName
from medic.ports import Scheduler

__all__ = ["Step", "abandon_reason", "converged", "plan"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan: what it is, how to tell it done, how to issue it."""

    kind: ActionKind
    is_done: Callable[[Job], bool]
    issue: Callable[[], None]
    wait: Callable[[Job], str | None] = lambda _job: None
    """Why the step must not be issued yet in this state (None: it may)."""


def plan(
    advice: Advice,
    sched: Scheduler,
    exclude: Callable[[Advice, frozenset[NodeName]], None],
) -> list[Step]:
    """The steps of ``advice``, in order, each with how to tell it done in a job's state."""
    job_id, attempt = advice.job_id, advice.attempt
    if advice.action is AdviceAction.STOP:
        reason = f"medic: {advice.reason}"
        return [
            Step(
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
        Step(
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
            Step(
                ActionKind.EXCLUDE_NODES,
                lambda j: excluded <= j.excluded_nodes or _runs_elsewhere(j, attempt, excluded),
                lambda: exclude(advice, excluded),
            )
        )
    steps.append(
        Step(
            ActionKind.RELEASE,
            # A hold on the attempt medic never requeued is someone else's: left alone.
            lambda j: not j.held or j.restart_count <= attempt,
            lambda: sched.release(job_id),
        )
    )
    return steps


def _runs_elsewhere(job: Job, attempt: int, excluded: frozenset[NodeName]) -> bool:
    """The job already runs a later attempt on none of the nodes to exclude (the scheduler
    requeued and started it first): an exclusion can no longer be set, nor is it needed now."""
    return (
        job.restart_count > attempt
        and job.state is JobState.RUNNING
        and not excluded & set(job.nodes)
    )


def abandon_reason(advice: Advice, job: Job) -> str | None:
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


def converged(advice: Advice, job: Job) -> bool:
    """Beyond every step being done: a stop has converged once the job really ended."""
    return job.state.is_terminal if advice.action is AdviceAction.STOP else True
