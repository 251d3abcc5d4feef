"""Attribution: one attempt's detections into a verdict (what failed, who is to blame, what next).

Rules, in order:

1. **Roots win over cascades.** A fatal root (role ``root``, action restart/stop) decides. The
   earliest one by (time, seq) opens a failure window of ``window_seconds``; within it, stronger
   evidence wins over weaker: a line that implicates its node (a kernel Xid, its GPU's ECC error,
   its NIC's link down, the scheduler's node failure) over other infrastructure roots, and those
   over application-level roots. Lines from different sources are read at nearly the same time
   (the simulator emits the kernel Xid and the ranks' CUDA errors at the same instant), so
   "earliest" alone would let a victim's CUDA error beat the kernel line that explains it.
2. **STOP needs established evidence.** An application root becomes STOP only for a CUDA OOM
   (a signature whose action is stop) or when the same exception (same signature, same message
   with numbers masked, same last step) was raised on at least two distinct ranks. Anything else
   is a restart: a false STOP kills a healthy run for good, a missed one costs a bounded number
   of restarts (the policy's no-progress rule).
3. **Only cascades** (NCCL watchdog, remote peer exited, torchrun's summary): restart, the domain
   of the earliest cascade, low confidence. A cascade never implicates a node.
4. **Implicated nodes** are only nodes with direct evidence: detections that implicate their node
   (roles root or confirmation) plus ``failed_nodes`` from the scheduler. A node failure with no
   other evidence is a root of domain ``scheduler`` on that node.
5. Non-fatal roots only (a straggler, a GPU row remap): a verdict with action ``none`` that names
   the node. A job the scheduler reports failed with no evidence at all: restart, low confidence.

Pure: no I/O, no clock reads (``now`` is passed in), never raises on any detections.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

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

_MAX_IMPLICATING_EVIDENCE = 8
_MAX_CASCADE_EVIDENCE = 3
_FAILING_STATES = frozenset({JobState.FAILED, JobState.NODE_FAIL})
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


def is_fatal(detection: Detection) -> bool:
    """True when the detection means the job's attempt is failing (root or cascade that calls for
    a restart or a stop)."""
    return detection.role in (Role.ROOT, Role.CASCADE) and detection.action in (
        JobAction.RESTART,
        JobAction.STOP,
    )


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


def _utc(when: datetime) -> datetime:
    # Domain times are timezone-aware UTC; a naive one is read as UTC instead of raising on
    # comparison.
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _order(d: Detection) -> tuple[datetime, int, str, str, int]:
    return (_utc(d.time), d.seq, d.signature_id, d.node or "", -1 if d.rank is None else d.rank)


def _strength(d: Detection) -> int:
    if d.implicates_node:
        return 3
    return 2 if d.domain is not FaultDomain.APPLICATION else 1


def _snippet(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _describe(d: Detection, *, node: bool = True) -> str:
    """``signature on node rank R: "line"`` (the node left out when the caller already said it)."""
    where = f" on {d.node}" if node and d.node else ""
    where += f" rank {d.rank}" if d.rank is not None else ""
    return f"{d.signature_id}{where}" + (f': "{_snippet(d.text)}"' if d.text else "")


def _node_list(nodes: Iterable[NodeName]) -> str:
    return ", ".join(sorted(nodes))


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


class _Attempt:
    """The detections of one attempt, sorted and split by role."""

    def __init__(self, job: Job, attempt: int, detections: Iterable[Detection]) -> None:
        own = sorted(
            (
                d
                for d in detections
                if (d.job_id is None or d.job_id == job.id) and d.attempt in (attempt, -1)
            ),
            key=_order,
        )
        # A "fault" in domain none is a contradiction (a malformed signature): not evidence.
        faults = [d for d in own if d.domain is not FaultDomain.NONE]
        self.roots = [d for d in faults if d.role is Role.ROOT and is_fatal(d)]
        self.cascades = [d for d in faults if d.role is Role.CASCADE and is_fatal(d)]
        self.warnings = [d for d in faults if d.role is Role.ROOT and not is_fatal(d)]
        self.implicating = [
            d
            for d in faults
            if d.implicates_node and d.node is not None and d.role in (Role.ROOT, Role.CONFIRMATION)
        ]
        steps = [(_utc(d.time), _int(d.fields.get("step"))) for d in own if d.role is Role.PROGRESS]
        known = [(t, s) for t, s in steps if s is not None]
        self._step_times = [t for t, _ in known]
        self._step_max: list[int] = []
        for _, step in known:
            self._step_max.append(max(step, self._step_max[-1]) if self._step_max else step)

    def step_at(self, when: datetime) -> int | None:
        """The newest step seen at or before ``when`` (None before any)."""
        index = bisect_right(self._step_times, _utc(when))
        return self._step_max[index - 1] if index else None

    def implicated(self, failed_nodes: frozenset[NodeName]) -> frozenset[NodeName]:
        return frozenset(d.node for d in self.implicating if d.node is not None) | failed_nodes


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _established(app_roots: Sequence[Detection], run: _Attempt) -> list[Detection] | None:
    """The deciding detections of a deterministic application error, or None.

    A CUDA OOM (a root whose signature says stop) is established on its own; an exception is
    established when two distinct ranks raised the same one at the same step.
    """
    stops = [d for d in app_roots if d.action is JobAction.STOP]
    if stops:
        return [d for d in stops if d.signature_id == stops[0].signature_id]
    groups: dict[tuple[str, str, int | None], list[Detection]] = {}
    for d in app_roots:
        if "exception" not in d.fields:
            continue
        message = _NUMBERS.sub("N", f"{d.fields['exception']}: {d.fields.get('message', '')}")
        groups.setdefault((d.signature_id, message, run.step_at(d.time)), []).append(d)
    for members in groups.values():  # insertion order: the group seen first wins
        ranks = {(d.rank, None) if d.rank is not None else (None, d.node) for d in members}
        if len(ranks) >= 2:
            return members
    return None


def _evidence(
    primary: Sequence[Detection], run: _Attempt, implicated: frozenset[NodeName]
) -> tuple[Detection, ...]:
    chosen: list[Detection] = list(primary)
    seen = {id(d) for d in chosen}
    extra = [d for d in run.implicating if d.node in implicated and id(d) not in seen]
    chosen.extend(extra[:_MAX_IMPLICATING_EVIDENCE])
    chosen.extend(run.cascades[:_MAX_CASCADE_EVIDENCE])
    return tuple(chosen)


def _root_verdict(
    job: Job,
    attempt: int,
    run: _Attempt,
    failed_nodes: frozenset[NodeName],
    now: datetime,
    window_seconds: float,
) -> Verdict:
    horizon = _order(run.roots[0])[0] + timedelta(seconds=max(window_seconds, 0.0))
    in_window = [d for d in run.roots if _utc(d.time) <= horizon]
    primary = min(in_window, key=lambda d: (-_strength(d), _order(d)))
    implicated = run.implicated(failed_nodes)
    cascades = f"; {len(run.cascades)} cascade symptom(s) followed" if run.cascades else ""
    if primary.domain is FaultDomain.APPLICATION:
        app_roots = [d for d in run.roots if d.domain is FaultDomain.APPLICATION]
        decisive = _established(app_roots, run)
        if decisive is not None:
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
                    + f": {_describe(head)}"
                ),
                evidence=_evidence(decisive[:_MAX_IMPLICATING_EVIDENCE], run, implicated),
                time=now,
            )
    # STOP comes only from the established-evidence rule above, never from one line.
    action = JobAction.RESTART if primary.action is JobAction.STOP else primary.action
    if primary.implicates_node:
        corroborated = any(
            d.node == primary.node and d.signature_id != primary.signature_id
            for d in run.implicating
        )
        confidence = 0.95 if corroborated else 0.9
        summary = f"{primary.domain.value} fault on {primary.node}: "
        summary += _describe(primary, node=False)
    elif primary.domain is FaultDomain.APPLICATION:
        confidence = 0.4
        summary = f"application-level error, not established as deterministic: {_describe(primary)}"
    else:
        confidence = 0.6
        summary = f"{primary.domain.value} fault, no node implicated: {_describe(primary)}"
    others = implicated - {primary.node} if primary.node else implicated
    if others:
        summary += f"; also implicated: {_node_list(others)}"
    return Verdict(
        job_id=job.id,
        attempt=attempt,
        domain=primary.domain,
        action=action,
        implicated_nodes=implicated,
        confidence=confidence,
        root_signature=primary.signature_id,
        summary=summary + cascades,
        evidence=_evidence([primary], run, implicated),
        time=now,
    )


def _fallback_verdict(
    job: Job, attempt: int, run: _Attempt, failed_nodes: frozenset[NodeName], now: datetime
) -> Verdict:
    """No fatal root: cascades only, a failed job without evidence, non-fatal roots, or nothing."""
    implicated = run.implicated(failed_nodes)
    named: set[NodeName] = set()
    if run.cascades:
        first = run.cascades[0]
        nodes = {d.node for d in run.cascades if d.node is not None}
        domain, action, confidence, root = first.domain, JobAction.RESTART, 0.3, None
        summary = (
            f"no root cause found, only {len(run.cascades)} cascade symptom(s) on"
            f" {len(nodes)} node(s); first: {_describe(first)}"
        )
        primary: list[Detection] = []
    elif job.state in _FAILING_STATES:
        domain = (
            FaultDomain.SCHEDULER if job.state is JobState.NODE_FAIL else FaultDomain.APPLICATION
        )
        action, confidence, root, primary = JobAction.RESTART, 0.2, None, []
        summary = f"job ended {job.state.value} without any recognised evidence"
    elif run.warnings:
        head = min(run.warnings, key=lambda d: (-_strength(d), _order(d)))
        domain, action, confidence, root = head.domain, JobAction.NONE, 0.6, head.signature_id
        summary, primary = f"{head.domain.value} finding, not failing: {_describe(head)}", [head]
        named = {head.node} if head.node else set()
    else:
        # Nothing failed: confirmations alone (an OOM kill, a read-only disk) blame nobody.
        domain, action, confidence, root = FaultDomain.NONE, JobAction.NONE, 0.9, None
        summary, primary, implicated = "no failure detected", [], frozenset()
    others = implicated - named
    also = f"; implicated: {_node_list(others)}" if others else ""
    return Verdict(
        job_id=job.id,
        attempt=attempt,
        domain=domain,
        action=action,
        implicated_nodes=implicated,
        confidence=confidence,
        root_signature=root,
        summary=summary + also,
        evidence=_evidence(primary, run, implicated),
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
) -> Verdict:
    """The verdict for ``attempt`` of ``job`` from its detections (see the module docstring).

    Detections of other jobs or other attempts are ignored (``attempt`` -1 and ``job_id`` None
    count as this attempt's, so unstamped and kernel detections can be passed as they are).
    ``failed_nodes`` are the job's nodes the scheduler reports as failed.
    """
    run = _Attempt(job, attempt, [*detections, *node_failures(job, attempt, failed_nodes, now)])
    if run.roots:
        return _root_verdict(job, attempt, run, failed_nodes, now, window_seconds)
    return _fallback_verdict(job, attempt, run, failed_nodes, now)
