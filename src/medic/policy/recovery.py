"""Recovery policy v1: a verdict (plus the job's history) into advice for the job.

Rules, first match wins; each has a stable id recorded in ``AdviceRequest.rule``:

- ``no-fault``: nothing is failing and no node is implicated -> NONE.
- ``straggler-exclude``: not failing, a straggler node named -> EXCLUDE_NEXT that node (REQUEUE
  without it when ``policy.restart_on_straggler``).
- ``node-warning-exclude``: not failing, a node implicated by a non-fatal fault (a GPU row remap
  waiting for a reset) -> EXCLUDE_NEXT that node.
- ``application-error-stop``: attribution established a deterministic application error (verdict
  action ``stop``) -> STOP.
- ``no-progress-stop``: failing, and none of the last N attempts (the current one included) saved
  a checkpoint newer than the best one before them -> STOP; restarting would crash-loop.
- ``node-fault-requeue``: failing with implicated nodes -> REQUEUE excluding them.
- ``retry``: failing otherwise -> REQUEUE with no new exclusion.

Exclusions always keep the job's existing ones. N is the job's override, else
``policy.max_attempts_without_progress``; a value below 1 disables the no-progress rule.

Pure: no I/O, no clock reads. The caller decides the mode (:func:`effective_mode`); the policy
never refuses to decide in observe mode, it only records the mode with the advice.
"""

from __future__ import annotations

from collections.abc import Sequence

from medic.config.settings import PolicySettings
from medic.domain.advice import AdviceAction, AdviceRequest
from medic.domain.attempts import Attempt
from medic.domain.cluster import Job, Mode
from medic.domain.diagnosis import FaultDomain, JobAction, Verdict
from medic.domain.ids import NodeName, SignatureId
from medic.policy.options import JobOptions

__all__ = [
    "RULE_APPLICATION_STOP",
    "RULE_NODE_FAULT",
    "RULE_NODE_WARNING",
    "RULE_NO_FAULT",
    "RULE_NO_PROGRESS",
    "RULE_RETRY",
    "RULE_STRAGGLER",
    "decide",
    "effective_mode",
    "stalled_attempts",
]

RULE_NO_FAULT = "no-fault"
RULE_APPLICATION_STOP = "application-error-stop"
RULE_NO_PROGRESS = "no-progress-stop"
RULE_NODE_FAULT = "node-fault-requeue"
RULE_RETRY = "retry"
RULE_STRAGGLER = "straggler-exclude"
RULE_NODE_WARNING = "node-warning-exclude"

# Same string as medic.detect.signatures.SLOW_NODE_SIGNATURE_ID (the layers contract keeps policy
# from importing detect; a test checks they agree).
SLOW_NODE_SIGNATURE_ID = SignatureId("medic.straggler.slow_node")


def effective_mode(cluster_mode: Mode, options: JobOptions) -> Mode:
    """The job's own mode when its comment sets one, else the cluster's."""
    return options.mode if options.mode is not None else cluster_mode


def stalled_attempts(
    attempts: Sequence[Attempt], current: int, window: int
) -> tuple[list[Attempt], int | None] | None:
    """The last ``window`` attempts up to ``current`` and the best checkpoint step before them,
    when none of them saved a newer checkpoint; None when the job progressed (or has fewer
    attempts than the window, or the window is below 1).

    The baseline is the best checkpoint saved or loaded before the window, and the checkpoint the
    window's first attempt resumed from. Only attempts given count: one missing from the list is
    not assumed to have made no progress.
    """
    by_number = {a.number: a for a in attempts if a.number <= current}
    ordered = [by_number[n] for n in sorted(by_number)]
    if window < 1 or len(ordered) < window:
        return None
    recent, before = ordered[-window:], ordered[:-window]
    candidates = [a.progress.last_checkpoint_step for a in before]
    candidates += [a.progress.loaded_checkpoint_step for a in before]
    candidates.append(recent[0].progress.loaded_checkpoint_step)
    known = [step for step in candidates if step is not None]
    baseline = max(known) if known else None
    for attempt in recent:
        saved = attempt.progress.last_checkpoint_step
        if saved is not None and (baseline is None or saved > baseline):
            return None
    return recent, baseline


def _request(
    verdict: Verdict,
    job: Job,
    mode: Mode,
    action: AdviceAction,
    exclude: frozenset[NodeName],
    rule: str,
    reason: str,
) -> AdviceRequest:
    return AdviceRequest(
        cluster=job.cluster,
        job_id=job.id,
        attempt=verdict.attempt,
        action=action,
        exclude_nodes=exclude,
        reason=reason,
        mode=mode,
        rule=rule,
    )


def _nodes(nodes: frozenset[NodeName]) -> str:
    return ", ".join(sorted(nodes))


def _no_progress_reason(recent: list[Attempt], baseline: int | None, verdict: Verdict) -> str:
    span = (
        f"attempt {recent[0].number}"
        if len(recent) == 1
        else f"attempts {recent[0].number}-{recent[-1].number}"
    )
    best = f"step {baseline}" if baseline is not None else "none"
    return (
        f"Stop: no new checkpoint in the last {len(recent)} attempt(s) ({span}; best checkpoint"
        f" before them: {best}), so another restart would crash-loop. Last failure:"
        f" {verdict.summary}"
    )


def _not_failing(verdict: Verdict, job: Job, mode: Mode, settings: PolicySettings) -> AdviceRequest:
    exclude = verdict.implicated_nodes | job.excluded_nodes
    nodes = _nodes(verdict.implicated_nodes)
    if verdict.root_signature == SLOW_NODE_SIGNATURE_ID:
        if settings.restart_on_straggler:
            action = AdviceAction.REQUEUE
            reason = f"Requeue now without straggler node(s) {nodes}: {verdict.summary}"
        else:
            action = AdviceAction.EXCLUDE_NEXT
            reason = f"Keep running; exclude straggler node(s) {nodes} at the next restart: "
            reason += verdict.summary
        return _request(verdict, job, mode, action, exclude, RULE_STRAGGLER, reason)
    reason = f"Keep running; exclude node(s) {nodes} at the next restart: {verdict.summary}"
    return _request(
        verdict, job, mode, AdviceAction.EXCLUDE_NEXT, exclude, RULE_NODE_WARNING, reason
    )


def decide(
    verdict: Verdict,
    job: Job,
    attempts: Sequence[Attempt],
    *,
    mode: Mode,
    settings: PolicySettings,
    max_attempts_without_progress: int | None = None,
) -> AdviceRequest:
    """The advice for ``job`` given the verdict on its current attempt (see the module docstring).

    ``attempts`` are the job's attempts with their progress (any order; the verdict's attempt
    counts when present). ``max_attempts_without_progress`` is the job's override (job options).
    """
    failing = verdict.action in (JobAction.RESTART, JobAction.STOP)
    if verdict.domain is FaultDomain.NONE or (not failing and not verdict.implicated_nodes):
        return _request(
            verdict,
            job,
            mode,
            AdviceAction.NONE,
            frozenset(),
            RULE_NO_FAULT,
            f"No action: {verdict.summary}",
        )
    if not failing:
        return _not_failing(verdict, job, mode, settings)
    if verdict.action is JobAction.STOP:
        reason = (
            f"Stop: {verdict.summary}. Retrying without a change to the code or configuration"
            " would fail the same way."
        )
        return _request(
            verdict, job, mode, AdviceAction.STOP, frozenset(), RULE_APPLICATION_STOP, reason
        )
    window = (
        max_attempts_without_progress
        if max_attempts_without_progress is not None
        else settings.max_attempts_without_progress
    )
    stalled = stalled_attempts(attempts, verdict.attempt, window)
    if stalled is not None:
        reason = _no_progress_reason(*stalled, verdict)
        return _request(
            verdict, job, mode, AdviceAction.STOP, frozenset(), RULE_NO_PROGRESS, reason
        )
    if verdict.implicated_nodes:
        exclude = verdict.implicated_nodes | job.excluded_nodes
        reason = (
            f"Requeue from the last checkpoint excluding {_nodes(verdict.implicated_nodes)}:"
            f" {verdict.summary}"
        )
        return _request(verdict, job, mode, AdviceAction.REQUEUE, exclude, RULE_NODE_FAULT, reason)
    reason = f"Requeue from the last checkpoint; no node to exclude: {verdict.summary}"
    return _request(
        verdict, job, mode, AdviceAction.REQUEUE, job.excluded_nodes, RULE_RETRY, reason
    )
