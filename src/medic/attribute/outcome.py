"""Outcomes that decide before any fault does (issue 12, rules 1 and 8).

- **A finished job is not a failure.** Completion in the framework's own words (Megatron's ``[after
  training is done]``, the HF Trainer's ``Training completed.``, Lightning's ```Trainer.fit`
  stopped: `max_steps=...` reached``, torchtitan's ``Training completed``, Slurm's ``State:
  COMPLETED (exit code 0)``, an ``exit code 0`` line, the common ``Training loop finished`` /
  ``Training complete`` of JAX and hand-written loops, NeMo-RL's ``Max number of steps has been
  reached``), or torchrun's ``worker group successfully finished`` (Paddle's ``Pod completed``) on
  a node whose agent reported no failure after it, with no agent reporting a final failure: the
  verdict is ``none``, whatever warnings, teardown errors or retried socket connects the logs
  carry, unless an error of ``policy.deterministic_errors`` comes after the completion line (saving
  the final model raised AttributeError): the program failed after its loop and fails the same way
  on a retry (decided in :func:`medic.attribute.attribute`).
- **Scheduler facts win over teardown noise.** A job cancelled by a person (``*** JOB 42 ON
  node001 CANCELLED AT ... ***``, or the scheduler's state ``cancelled``) gets a scheduler verdict
  with action ``none``: no infrastructure blame, never a restart of a person's cancel. One
  preempted or out of time (``DUE TO PREEMPTION`` / ``DUE TO TIME LIMIT``, or the states
  ``preempted`` / ``timeout``) gets a scheduler verdict with action ``restart`` and nobody
  implicated, unless evidence against a node came before the scheduler ended it. The NCCL and
  socket errors its teardown printed are cascades of the scheduler's signal.
- **A cancelled step is not a cancelled job.** Only the JOB banner (``slurm.cancelled``) says a
  person cancelled it; ``*** STEP 42.0 ON node001 CANCELLED AT ... ***`` is srun tearing the rest
  of the step down after a task, its launch or its node failed (``slurm.step_cancelled``, noise):
  the failure that came first decides. Where the scheduler's own state is known (the live loop),
  it is the fact: a job it reports ``failed`` or ``node_fail`` is never a person's cancel, whatever
  cancel banner its teardown printed.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from medic.attribute.evidence import describe
from medic.attribute.grouping import order
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Verdict

__all__ = [
    "COMPLETION_SIGNATURE_IDS",
    "SchedulerFact",
    "completed_verdict",
    "completion_evidence",
    "scheduler_fact",
    "scheduler_verdict",
]

COMPLETION_SIGNATURE_IDS = frozenset(
    {
        "megatron.training_done",
        "hf.training_completed",
        "lightning.fit_stopped",
        "torchtitan.training_completed",
        "train.loop_finished",
        "nemo_rl.max_steps_reached",
        "slurm.job_completed",
        "slurm.sacct_completed",
        "job.exit_code_zero",
    }
)
"""Completion printed once the training loop is over on every rank, or by the scheduler."""
_AGENT_SUCCEEDED = frozenset(
    {"torchelastic.worker_group_succeeded", "paddle.pod_completed", "deepspeed.process_exited_ok"}
)
"""A node's launcher says its own workers finished (torchrun's agent, Paddle's pod, DeepSpeed's
launcher for each process)."""
_AGENT_FAILED = frozenset(
    {
        "torchelastic.child_failed",
        "torchelastic.worker_group_failed",
        "paddle.trainer_aborted",
        "deepspeed.process_failed",
    }
)
_CANCELLED = "slurm.cancelled"
_PREEMPTED = frozenset({"slurm.preempted", "submitit.preempted"})
_ENDED_BY_SCHEDULER = _PREEMPTED | {"slurm.time_limit", "submitit.timed_out"}
"""Lines that say the scheduler ended the attempt for its own reasons (submitit's: it caught the
signal Slurm sends before a time limit or a preemption)."""
_FAILED_STATES = frozenset({JobState.FAILED, JobState.NODE_FAIL})
_STATES = {
    JobState.CANCELLED: JobAction.NONE,
    JobState.PREEMPTED: JobAction.RESTART,
    JobState.TIMEOUT: JobAction.RESTART,
}


def completion_evidence(detections: Sequence[Detection]) -> list[Detection]:
    """The lines that show the attempt completed (empty when it did not)."""
    marks = [d for d in detections if d.signature_id in COMPLETION_SIGNATURE_IDS]
    if marks:
        return marks
    last: dict[object, Detection] = {}
    for d in sorted(detections, key=order):
        if d.signature_id in _AGENT_SUCCEEDED or d.signature_id in _AGENT_FAILED:
            last[d.node] = d
    outcomes = list(last.values())
    if outcomes and all(d.signature_id in _AGENT_SUCCEEDED for d in outcomes):
        return outcomes
    return []


@dataclass(frozen=True, slots=True)
class SchedulerFact:
    """How the scheduler ended the attempt."""

    action: JobAction
    """``none`` for a person's cancel, ``restart`` for a preemption or a time limit."""
    reason: str
    evidence: tuple[Detection, ...]


def scheduler_fact(job: Job, detections: Sequence[Detection]) -> SchedulerFact | None:
    """The scheduler's end of the attempt, from its banner lines or the job's state, or None."""
    failed = job.state in _FAILED_STATES
    cancels = [d for d in detections if d.signature_id == _CANCELLED and not failed]
    ends = [d for d in detections if d.signature_id in _ENDED_BY_SCHEDULER]
    if ends:
        head = min(ends, key=order)
        reason = "preempted" if head.signature_id in _PREEMPTED else "out of time"
        return SchedulerFact(JobAction.RESTART, reason, (head,))
    if cancels:
        head = min(cancels, key=order)
        return SchedulerFact(JobAction.NONE, "cancelled by a person", (head,))
    if job.state in _STATES:
        return SchedulerFact(_STATES[job.state], f"the scheduler reports it {job.state.value}", ())
    return None


def completed_verdict(
    job: Job, attempt: int, marks: Sequence[Detection], failures: int, now: datetime
) -> Verdict:
    """Nothing to do: the attempt finished (``failures``: fatal lines it printed anyway)."""
    noise = f"; {failures} error line(s) printed on the way ignored" if failures else ""
    return Verdict(
        job_id=job.id,
        attempt=attempt,
        domain=FaultDomain.NONE,
        action=JobAction.NONE,
        implicated_nodes=frozenset(),
        confidence=0.9,
        root_signature=None,
        summary=f"the job finished: {describe(marks[0])}{noise}",
        evidence=tuple(marks[:3]),
        time=now,
    )


def scheduler_verdict(
    job: Job, attempt: int, fact: SchedulerFact, followed: int, now: datetime
) -> Verdict:
    """The scheduler ended the attempt: its verdict, nobody implicated."""
    head = fact.evidence[0] if fact.evidence else None
    what = f": {describe(head)}" if head is not None else ""
    noise = f"; {followed} teardown error line(s) followed, ignored" if followed else ""
    verb = (
        "restart when the scheduler requeues it"
        if fact.action is JobAction.RESTART
        else ("no restart of a person's cancel")
    )
    return Verdict(
        job_id=job.id,
        attempt=attempt,
        domain=FaultDomain.SCHEDULER,
        action=fact.action,
        implicated_nodes=frozenset(),
        confidence=0.9,
        root_signature=head.signature_id if head is not None else None,
        summary=f"the scheduler ended the job ({fact.reason}, {verb}){what}{noise}",
        evidence=fact.evidence,
        time=now,
    )
