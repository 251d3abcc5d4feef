"""Job recovery split into shards: disjoint sets of jobs, each matched and evaluated on its own.

One Python process has one core for the loop; matching a pass's lines and evaluating its jobs
is most of a pass at scale. With ``loop.workers`` above 1 the loop keeps what concerns the whole
cluster (reading the scheduler and the logs, the inventory, node repair, acting on advice) and
hands each shard's jobs, their lines and the pass's kernel detections to that shard's worker
(:class:`ShardPool`), which runs this module's :class:`ShardWork`: the same
:class:`~medic.control.evaluation.JobEvaluator` the loop runs in one process, on its own store
connection. Watches are derived state, so a worker that dies is started again and resumes from
the store.

A job's shard is :func:`shard_of` its id: stable across processes, passes and restarts, so shard
ownership can later be leased per replica (each shard a lease; the replicated control-plane
issue). Messages carry only what changed since the shard's previous message (jobs whose snapshot
changed, nodes whose state changed) plus the ids of the shard's jobs, in the listing's order.
"""

from __future__ import annotations

import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from medic.control.evaluation import JobEvaluator
from medic.domain.cluster import Job, Node
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import JobId, NodeName
from medic.domain.logs import LogLine
from medic.ports import Diagnoser, Metrics

__all__ = [
    "EvaluateRequest",
    "ObserveRequest",
    "RecordingMetrics",
    "ShardClock",
    "ShardPool",
    "ShardReply",
    "ShardWork",
    "ShardedJobs",
    "shard_of",
]

_NOT_FOR_REPAIR = (Role.PROGRESS, Role.NOISE)
"""Detections node repair ignores: a worker does not send them back."""


def shard_of(job_id: str, shards: int) -> int:
    """The shard of a job: CRC-32 of its id, modulo the number of shards."""
    return zlib.crc32(job_id.encode()) % shards


@dataclass(frozen=True, slots=True)
class ObserveRequest:
    """A pass's new input for one shard."""

    now: datetime
    job_ids: tuple[JobId, ...]
    """The shard's jobs in the scheduler's listing, in its order."""
    jobs: tuple[Job, ...]
    """Those whose snapshot changed since the shard's previous request (all, on a worker's
    first)."""
    nodes: tuple[Node, ...]
    """Nodes whose state changed (all, on a worker's first)."""
    changed: frozenset[NodeName] | None
    """What quiet-job skipping compares (None: evaluate every job, ``loop.skip_quiet_jobs``)."""
    lines: tuple[LogLine, ...]
    """The shard's jobs' new lines."""
    kernel: tuple[Detection, ...]
    """Every kernel detection of the pass (already stored): the shard fans them out to its jobs
    on the node."""


@dataclass(frozen=True, slots=True)
class EvaluateRequest:
    now: datetime
    placement: frozenset[NodeName]
    """Nodes a requeue must avoid (node repair's, as of this pass)."""


@dataclass(slots=True)
class ShardReply:
    detections: list[Detection] = field(default_factory=list)
    """The shard's job detections node repair reads (observe)."""
    metrics: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    failing: dict[JobId, tuple[int, datetime]] = field(default_factory=dict)
    """Jobs whose current attempt has a fatal detection: (attempt, when it was stored)."""


class ShardPool(Protocol):
    """Where the shards run (``medic.workers``: one process each)."""

    @property
    def shards(self) -> int: ...

    def observe(self, requests: Sequence[ObserveRequest]) -> list[ShardReply]:
        """One request per shard, carried out in parallel; the replies in shard order."""
        ...

    def evaluate(self, requests: Sequence[EvaluateRequest]) -> list[ShardReply]: ...

    def fresh(self, shard: int) -> bool:
        """True when the shard's worker has not had a request yet (it needs everything)."""
        ...

    def close(self) -> None: ...


class ShardClock:
    """The coordinator's time at the request, moving on with this process's clock meanwhile."""

    def __init__(self) -> None:
        self._base: datetime | None = None
        self._at = 0.0

    def set(self, now: datetime) -> None:
        self._base, self._at = now, time.perf_counter()

    def now(self) -> datetime:
        if self._base is None:
            raise RuntimeError("ShardClock read before its first request")
        return self._base + timedelta(seconds=time.perf_counter() - self._at)


class RecordingMetrics:
    """The ``Metrics`` port of a worker: calls recorded, replayed by the coordinator on its
    own metrics (the ones ``/metrics`` serves)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def take(self) -> list[tuple[str, tuple[Any, ...]]]:
        calls, self.calls = self.calls, []
        return calls

    def detection(self, cluster: str, signature_id: str) -> None:
        self.calls.append(("detection", (cluster, signature_id)))

    def detection_latency(self, seconds: float) -> None:
        self.calls.append(("detection_latency", (seconds,)))

    def action_latency(self, seconds: float) -> None:
        self.calls.append(("action_latency", (seconds,)))

    def advice(self, cluster: str, action: str) -> None:
        self.calls.append(("advice", (cluster, action)))

    def loop_pass(self, seconds: float) -> None:
        self.calls.append(("loop_pass", (seconds,)))

    def loop_error(self, stage: str) -> None:
        self.calls.append(("loop_error", (stage,)))

    def lease_renewal(self, lease: str, seconds: float, held: bool) -> None:
        self.calls.append(("lease_renewal", (lease, seconds, held)))

    def lease_failover(self, lease: str) -> None:
        self.calls.append(("lease_failover", (lease,)))

    def alert_fired(self, cluster: str, key: str, mapped: bool) -> None:
        self.calls.append(("alert_fired", (cluster, key, mapped)))

    def repair_state(self, cluster: str, action: str, state: str) -> None:
        self.calls.append(("repair_state", (cluster, action, state)))

    def recommendation_latency(self, seconds: float) -> None:
        self.calls.append(("recommendation_latency", (seconds,)))


class ShardWork:
    """One shard's job recovery, in the process that holds the shard."""

    def __init__(
        self,
        *,
        evaluator: JobEvaluator,
        diagnoser: Diagnoser,
        clock: ShardClock,
        metrics: RecordingMetrics,
        counts: defaultdict[str, int],
    ) -> None:
        self._evaluator = evaluator
        self._diagnoser = diagnoser
        self._clock = clock
        self._metrics = metrics
        self._counts = counts
        self._jobs: dict[JobId, Job] = {}
        self._order: list[Job] = []
        self._nodes: dict[NodeName, Node] = {}
        self._routed: dict[JobId, list[Detection]] = {}
        self._changed: frozenset[NodeName] | None = None
        self.placement: frozenset[NodeName] = frozenset()

    def observe(self, request: ObserveRequest) -> ShardReply:
        self._clock.set(request.now)
        self._counts.clear()
        self._jobs.update((job.id, job) for job in request.jobs)
        self._order = [self._jobs[i] for i in request.job_ids]
        if len(self._jobs) > len(self._order):
            self._jobs = {job.id: job for job in self._order}
        self._nodes.update((node.name, node) for node in request.nodes)
        self._changed = request.changed
        self._evaluator.modes.read()
        found = self._diagnoser.scan(request.lines)
        if request.kernel:
            # In line order, as the loop of one process sees them (sequence numbers, when the
            # source gives them; else the kernel lines come last).
            found = sorted([*found, *request.kernel], key=lambda d: d.seq)
        # Added to what is not evaluated yet: when a pass fails between the two requests (another
        # shard's worker died), this one's detections are evaluated at the next pass, not lost.
        for job_id, routed in self._evaluator.route(found, self._order).items():
            self._routed.setdefault(job_id, []).extend(routed)
        mine = [d for d in found if d.job_id is not None and d.role not in _NOT_FOR_REPAIR]
        return ShardReply(detections=mine, metrics=self._metrics.take(), counts=dict(self._counts))

    def evaluate(self, request: EvaluateRequest) -> ShardReply:
        self._clock.set(request.now)
        self._counts.clear()
        self.placement = request.placement
        self._evaluator.evaluate_all(self._order, self._routed, self._nodes, self._changed)
        self._routed = {}
        return ShardReply(
            metrics=self._metrics.take(),
            counts=dict(self._counts),
            failing=self._evaluator.failing(),
        )


class ShardedJobs:
    """The loop's side of the shards: splits a pass's input by shard, sends each shard only what
    changed since its previous request, and merges the replies (detections for node repair,
    metrics replayed on the loop's own, the pass's counts)."""

    def __init__(
        self,
        pool: ShardPool,
        *,
        diagnoser: Diagnoser,
        store_kernel: Callable[[Sequence[Detection]], None],
        metrics: Metrics,
        counts: defaultdict[str, int],
        skip_quiet: bool,
    ) -> None:
        self._pool = pool
        self._diagnoser = diagnoser
        self._store_kernel = store_kernel
        self._metrics = metrics
        self._counts = counts
        self._skip_quiet = skip_quiet
        self._sent: list[dict[JobId, Job]] = [{} for _ in range(pool.shards)]
        self._full = False
        """The previous observe failed: send every shard everything."""
        self._failing: dict[JobId, tuple[int, datetime]] = {}

    def observe(
        self,
        now: datetime,
        jobs: Sequence[Job],
        nodes: Sequence[Node],
        changed: frozenset[NodeName],
        lines: Sequence[LogLine],
    ) -> list[Detection]:
        """Match and route the pass's lines in the shards; every detection node repair reads
        (the kernel ones, matched and stored here once, and the shards' job ones)."""
        shards = self._pool.shards
        kernel = self._diagnoser.scan([line for line in lines if line.job_id is None])
        if kernel:
            self._store_kernel(kernel)
        listed: list[list[Job]] = [[] for _ in range(shards)]
        for job in jobs:
            listed[shard_of(job.id, shards)].append(job)
        mine: list[list[LogLine]] = [[] for _ in range(shards)]
        for line in lines:
            if line.job_id is not None:
                mine[shard_of(line.job_id, shards)].append(line)
        everything = frozenset(n.name for n in nodes)
        requests = []
        for k in range(shards):
            fresh = self._full or self._pool.fresh(k)
            sent = {} if fresh else self._sent[k]
            requests.append(
                ObserveRequest(
                    now=now,
                    job_ids=tuple(j.id for j in listed[k]),
                    jobs=tuple(j for j in listed[k] if _differs(sent.get(j.id), j)),
                    nodes=tuple(n for n in nodes if fresh or n.name in changed),
                    changed=(everything if fresh else changed) if self._skip_quiet else None,
                    lines=tuple(mine[k]),
                    kernel=tuple(kernel),
                )
            )
        try:
            replies = self._pool.observe(requests)
        except Exception:
            # Which workers applied this request is unknown: everything to everyone next time.
            self._full = True
            raise
        self._full = False
        self._sent = [{j.id: j for j in shard} for shard in listed]
        found = list(kernel)
        for reply in replies:
            self._merge(reply)
            found.extend(reply.detections)
        return found

    def evaluate(self, now: datetime, placement: frozenset[NodeName]) -> None:
        """Evaluate every shard's jobs (the pass's second half, after node repair)."""
        request = EvaluateRequest(now=now, placement=placement)
        failing: dict[JobId, tuple[int, datetime]] = {}
        for reply in self._pool.evaluate([request] * self._pool.shards):
            self._merge(reply)
            failing.update(reply.failing)
        self._failing = failing

    def first_fatal_at(self, job_id: JobId, attempt: int) -> datetime | None:
        known = self._failing.get(job_id)
        return known[1] if known is not None and known[0] == attempt else None

    def _merge(self, reply: ShardReply) -> None:
        for name, args in reply.metrics:
            getattr(self._metrics, name)(*args)
        for key, value in reply.counts.items():
            self._counts[key] += value


def _differs(sent: Job | None, job: Job) -> bool:
    # Job leaves its options out of ==; the same snapshot object is the common case.
    return sent is not job and (sent is None or sent != job or sent.options != job.options)
