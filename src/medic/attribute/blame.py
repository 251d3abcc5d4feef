"""Attribution: one attempt's detections into a verdict (what failed, who is to blame, what next).

The detections are first grouped (:mod:`medic.attribute.grouping`): the attempt's own, placed on
their nodes (a rank-only line on the node that runs the rank), with the Xid context rules applied
(:mod:`medic.attribute.xid`). Then, in order:

1. **Roots win over cascades.** A fatal root (role ``root``, action restart/stop) decides. The
   earliest one by (time, seq) opens a failure window of ``window_seconds``; within it, stronger
   evidence wins over weaker: a line that implicates its node (a kernel Xid, its GPU's ECC error,
   its NIC's link down, the scheduler's node failure) over other infrastructure roots, and those
   over application-level roots. Lines from different sources are read at nearly the same time
   (the simulator emits the kernel Xid and the ranks' CUDA errors at the same instant), so
   "earliest" alone would let a victim's CUDA error beat the kernel line that explains it.
   Cascades (NCCL watchdog timeouts, "remote process exited", torchrun's "Root Cause (first
   observed failure)" printed on a victim host) are never roots, however early.
2. **STOP needs established evidence.** An application root becomes STOP only for a CUDA OOM
   (a signature whose action is stop) or when the same exception (same signature, same message
   with numbers masked, same last step) was raised on at least two distinct ranks, and its
   message is not one that a retry can cure (an I/O errno such as EIO or ESTALE, a NaN/Inf: NVRx
   category 27). Anything else is a restart: a false STOP kills a healthy run for good, a missed
   one costs a bounded number of restarts (the policy's no-progress rule).
3. **No root, but the attempt is failing** (fatal cascades, or the scheduler says it failed): a
   confirmation (a host OOM kill, a read-only remount, a solo Xid 13) explains it when there is
   one: restart, its domain, medium confidence. Otherwise: restart, the domain of the earliest
   cascade (runtime symptoms before torchrun's generic failure summary), low confidence. A
   cascade never implicates a node.
4. **Implicated nodes** are only nodes with direct evidence: detections that implicate their node
   (roles root or confirmation) plus ``failed_nodes`` from the scheduler. A node failure with no
   other evidence is a root of domain ``scheduler`` on that node.
5. Non-fatal roots only (a straggler, a GPU row remap): a verdict with action ``none`` that names
   the node. A job the scheduler reports failed with no evidence at all: restart, low confidence.
   Nothing failed: domain and action ``none``.

Summaries carry the Xid rules' notes: Xid 154's printed recovery action, a pending row remap,
repeated GPU exceptions.

Pure: no I/O, no clock reads (``now`` is passed in), never raises on any detections.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from medic.attribute.deterministic import MAX_DECISIVE, established_errors, listed_errors
from medic.attribute.evidence import describe, node_list, notes, select_evidence
from medic.attribute.grouping import (
    DEFAULT_GPUS_PER_NODE,
    AttemptEvents,
    is_fatal,
    order,
    strength,
    utc,
)
from medic.attribute.launch import silent_node_findings
from medic.attribute.network import PEER_ADDRESS_SIGNATURE_ID
from medic.attribute.outcome import (
    completed_verdict,
    completion_evidence,
    scheduler_fact,
    scheduler_verdict,
)
from medic.config.settings import DEFAULT_DETERMINISTIC_ERRORS
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import JobId, NodeName, SignatureId

__all__ = [
    "DEFAULT_WINDOW_SECONDS",
    "NODE_FAIL_SIGNATURE_ID",
    "attribute",
    "fan_out_kernel",
    "is_fatal",
    "node_failures",
]

DEFAULT_WINDOW_SECONDS = 10.0
"""Seconds after the first fatal root within which stronger evidence still wins (kernel logs and
job logs are read on different passes; a few seconds apart is the same failure)."""
NODE_FAIL_SIGNATURE_ID = SignatureId("medic.scheduler.node_fail")
"""The finding attribution derives from a node the scheduler reports as failed."""

_FAILING_STATES = frozenset({JobState.FAILED, JobState.NODE_FAIL})


def fan_out_kernel(
    detections: Iterable[Detection], nodes_to_jobs: Mapping[NodeName, Sequence[JobId]]
) -> list[Detection]:
    """Kernel detections (``job_id`` None) copied once per job running on their node.

    Job detections pass through unchanged, in order. A kernel detection on a node that runs no job
    (or with no node) is not returned: it concerns the node only, and the caller keeps it for node
    health.
    """
    result: list[Detection] = []
    for detection in detections:
        if detection.job_id is not None:
            result.append(detection)
        elif detection.node is not None:
            for job_id in dict.fromkeys(nodes_to_jobs.get(detection.node, ())):
                result.append(replace(detection, job_id=job_id, fields=dict(detection.fields)))
    return result


def node_failures(
    job: Job, attempt: int, failed_nodes: frozenset[NodeName], now: datetime
) -> list[Detection]:
    """Root detections for nodes the scheduler reports failed: direct evidence against them."""
    return [
        Detection(
            job_id=job.id,
            attempt=attempt,
            signature_id=NODE_FAIL_SIGNATURE_ID,
            domain=FaultDomain.SCHEDULER,
            role=Role.ROOT,
            severity=Severity.ERROR,
            action=JobAction.RESTART,
            time=now,
            node=node,
            implicates_node=True,
            text=f"node {node} failed (the scheduler reports it not responding)",
        )
        for node in sorted(failed_nodes)
    ]


_TEARDOWN_SIGNAL = SignatureId("torchelastic.signal_exception")


def _torn_down(d: Detection, detections: Sequence[Detection]) -> bool:
    """True when ``d`` came after its node's launcher received a termination signal: a line of
    the tear-down (the scheduler's signal reached the node first), not a fault before it."""
    return any(
        s.signature_id == _TEARDOWN_SIGNAL and s.node == d.node and order(s) <= order(d)
        for s in detections
    )


def _stop_verdict(
    job: Job,
    attempt: int,
    run: AttemptEvents,
    decisive: list[Detection],
    implicated: frozenset[NodeName],
    now: datetime,
) -> Verdict:
    head = decisive[0]
    ranks = len({d.rank for d in decisive if d.rank is not None})
    step = run.step_at(head.time)
    return Verdict(
        job_id=job.id,
        attempt=attempt,
        domain=FaultDomain.APPLICATION,
        action=JobAction.STOP,
        implicated_nodes=implicated,
        confidence=0.9,
        root_signature=head.signature_id,
        summary=(
            f"deterministic application error on {max(ranks, 1)} rank(s)"
            + (f" at step {step}" if step is not None else "")
            + f": {describe(head)}"
        ),
        evidence=select_evidence(decisive[:MAX_DECISIVE], run, implicated),
        time=now,
    )


def _root_verdict(
    job: Job,
    attempt: int,
    run: AttemptEvents,
    failed_nodes: frozenset[NodeName],
    now: datetime,
    window_seconds: float,
    deterministic: Collection[str] = DEFAULT_DETERMINISTIC_ERRORS,
) -> Verdict:
    horizon = order(run.roots[0])[0] + timedelta(seconds=max(window_seconds, 0.0))
    in_window = [d for d in run.roots if utc(d.time) <= horizon]
    primary = min(in_window, key=lambda d: (-strength(d), order(d)))
    implicated = run.implicated(failed_nodes, failing=True)
    domain = _domain(primary, run, implicated, horizon)
    cascades = f"; {len(run.cascades)} cascade symptom(s) followed" if run.cascades else ""
    if primary.domain is FaultDomain.APPLICATION:
        app_roots = [d for d in run.roots if d.domain is FaultDomain.APPLICATION]
        decisive = established_errors(app_roots, run)
        if decisive is not None:
            return _stop_verdict(job, attempt, run, decisive, implicated, now)
    listed = listed_errors(run, in_window, deterministic)
    if listed:
        return _stop_verdict(job, attempt, run, listed, implicated, now)
    # STOP comes only from the established-evidence rule above, never from one line.
    action = JobAction.RESTART if primary.action is JobAction.STOP else primary.action
    if strength(primary) == 3:
        corroborated = any(
            d.node == primary.node and d.signature_id != primary.signature_id
            for d in run.implicating
        )
        confidence = 0.95 if corroborated else 0.9
        summary = f"{domain.value} fault on {primary.node}: "
        summary += describe(primary, node=False)
    elif primary.domain is FaultDomain.APPLICATION:
        confidence = 0.4
        summary = f"application-level error, not established as deterministic: {describe(primary)}"
    elif implicated:
        confidence = 0.6
        summary = f"{domain.value} fault: {describe(primary)}"
    else:
        confidence = 0.6
        summary = f"{domain.value} fault, no node implicated: {describe(primary)}"
    others = implicated - {primary.node} if strength(primary) == 3 else implicated
    if others:
        also = "also implicated" if strength(primary) == 3 else "implicated by direct evidence"
        summary += f"; {also}: {node_list(others)}"
    return Verdict(
        job_id=job.id,
        attempt=attempt,
        domain=domain,
        action=action,
        implicated_nodes=implicated,
        confidence=confidence,
        root_signature=primary.signature_id,
        summary=summary + notes(run, implicated) + cascades,
        evidence=select_evidence([primary], run, implicated),
        time=now,
    )


def _domain(
    primary: Detection, run: AttemptEvents, implicated: frozenset[NodeName], horizon: datetime
) -> FaultDomain:
    """The verdict's domain: the primary root's, unless it names no node while the evidence
    against the implicated nodes in the failure window agrees on another infrastructure domain.
    srun's "Task launch failed" or "Node failure" is the scheduler's report of a symptom; the hung
    mount or the machine check in that node's own kernel log says what the fault is."""
    if (strength(primary) == 3 and primary.domain is not FaultDomain.SCHEDULER) or not implicated:
        return primary.domain
    backing = {
        d.domain
        for d in run.implicating
        if d.node in implicated
        and utc(d.time) <= horizon
        and d.domain not in (FaultDomain.APPLICATION, FaultDomain.NONE, FaultDomain.SCHEDULER)
    }
    return backing.pop() if len(backing) == 1 else primary.domain


def _fallback_verdict(
    job: Job, attempt: int, run: AttemptEvents, failed_nodes: frozenset[NodeName], now: datetime
) -> Verdict:
    """No fatal root: cascades or a failed job (explained by a confirmation when there is one),
    non-fatal roots, or nothing."""
    implicated = run.implicated(failed_nodes)
    named: set[NodeName] = set()
    failing = bool(run.cascades) or job.state in _FAILING_STATES
    primary: list[Detection] = []
    if failing and run.confirmations:
        head = min(run.confirmations, key=lambda d: (-strength(d), order(d)))
        domain, action, confidence, root = head.domain, JobAction.RESTART, 0.5, head.signature_id
        followed = f", then {len(run.cascades)} cascade symptom(s)" if run.cascades else ""
        summary, primary = f"no root line; explained by {describe(head)}{followed}", [head]
        named = {head.node} if head.node and head.implicates_node else set()
    elif run.cascades:
        # torchrun's failure summary and SIGABRT are generic (application domain) consequences:
        # the earliest runtime symptom (an NCCL timeout, a lost peer) says more.
        first = min(run.cascades, key=lambda d: (d.domain is FaultDomain.APPLICATION, order(d)))
        nodes = {d.node for d in run.cascades if d.node is not None}
        domain, action, confidence, root = first.domain, JobAction.RESTART, 0.3, None
        summary = (
            f"no root cause found, only {len(run.cascades)} cascade symptom(s) on"
            f" {len(nodes)} node(s); leading: {describe(first)}"
        )
    elif job.state in _FAILING_STATES:
        domain = (
            FaultDomain.SCHEDULER if job.state is JobState.NODE_FAIL else FaultDomain.APPLICATION
        )
        action, confidence, root = JobAction.RESTART, 0.2, None
        summary = f"job ended {job.state.value} without any recognised evidence"
    elif run.warnings:
        head = min(run.warnings, key=lambda d: (-strength(d), order(d)))
        domain, action, confidence, root = head.domain, JobAction.NONE, 0.6, head.signature_id
        summary, primary = f"{head.domain.value} finding, not failing: {describe(head)}", [head]
        named = {head.node} if head.node else set()
    else:
        # Nothing failed: confirmations alone (an OOM kill, a read-only disk) blame nobody.
        domain, action, confidence, root = FaultDomain.NONE, JobAction.NONE, 0.9, None
        summary, implicated = "no failure detected", frozenset()
    others = implicated - named
    also = f"; implicated: {node_list(others)}" if others else ""
    return Verdict(
        job_id=job.id,
        attempt=attempt,
        domain=domain,
        action=action,
        implicated_nodes=implicated,
        confidence=confidence,
        root_signature=root,
        summary=summary + also + notes(run, implicated),
        evidence=select_evidence(primary, run, implicated),
        time=now,
    )


def attribute(
    job: Job,
    attempt: int,
    detections: Sequence[Detection],
    *,
    failed_nodes: frozenset[NodeName] = frozenset(),
    now: datetime,
    window_seconds: float = DEFAULT_WINDOW_SECONDS,
    rank_nodes: Mapping[int, NodeName] | None = None,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    deterministic: Collection[str] = DEFAULT_DETERMINISTIC_ERRORS,
    silent_nodes: frozenset[NodeName] = frozenset(),
) -> Verdict:
    """The verdict for ``attempt`` of ``job`` from its detections (see the module docstring).

    Detections of other jobs or other attempts are ignored (``attempt`` -1 and ``job_id`` None
    count as this attempt's, so unstamped and kernel detections can be passed as they are).
    ``failed_nodes`` are the job's nodes the scheduler reports as failed. A detection with a rank
    but no node is placed with ``rank_nodes`` when it names the rank, else with the default layout
    (``rank // gpus_per_node`` indexes ``job.nodes``). ``deterministic`` lists the errors that stop
    after one attempt (``policy.deterministic_errors``); ``silent_nodes`` are the job's nodes that
    printed nothing in the attempt while the others did.
    """
    given = [*detections, *node_failures(job, attempt, failed_nodes, now)]
    run = AttemptEvents(job, attempt, given, gpus_per_node=gpus_per_node, rank_nodes=rank_nodes)
    marks = completion_evidence(run.all)
    # A listed code error after the loop finished (saving the final model raised AttributeError)
    # failed the run, and fails it again on every retry: not a completion.
    failed_after = [
        d
        for d in listed_errors(run, [], deterministic)
        if marks and order(d) > min(map(order, marks))
    ]
    if marks and not failed_after:
        return completed_verdict(job, attempt, marks, len(run.roots) + len(run.cascades), now)
    fact = scheduler_fact(job, run.all)
    if fact is not None:
        first = fact.evidence[0] if fact.evidence else None
        earlier = [
            d for d in run.implicating
            if d.role is Role.ROOT and first is not None and order(d) < order(first)
            and not _torn_down(d, run.all)
            and d.signature_id != PEER_ADDRESS_SIGNATURE_ID
        ]  # fmt: skip
        if fact.action is JobAction.NONE or not earlier:
            return scheduler_verdict(job, attempt, fact, len(run.cascades), now)
    failing = bool(run.roots or run.cascades) or job.state in _FAILING_STATES
    if silent_nodes and failing and not run.implicating:
        when = min((d.time for d in run.all), default=now)
        quiet = silent_node_findings(job.id, attempt, silent_nodes, job.nodes, when)
        if quiet and not listed_errors(run, run.roots, deterministic):
            run = AttemptEvents(
                job, attempt, [*given, *quiet], gpus_per_node=gpus_per_node, rank_nodes=rank_nodes
            )
    if run.roots:
        return _root_verdict(job, attempt, run, failed_nodes, now, window_seconds, deterministic)
    listed = listed_errors(run, [], deterministic) if failing else []
    if listed:
        implicated = run.implicated(failed_nodes, failing=True)
        return _stop_verdict(job, attempt, run, listed, implicated, now)
    return _fallback_verdict(job, attempt, run, failed_nodes, now)
