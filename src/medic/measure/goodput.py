"""Goodput: the share of the node time given to training jobs that went into progress that was kept.

After Google's ml-goodput-measurement ("goodput is the fraction of wall-clock time spent on
training progress that was kept"; the rest, *badput*, is attributed to causes). medic knows a
job's attempts (:class:`~medic.domain.attempts.Attempt`: start, end, final state, nodes, and the
steps and checkpoints seen in its logs), so it labels each job's time as intervals:

``productive``
    time spent on steps that were kept.
``wasted_progress``
    in an attempt that ended in any state but ``completed`` (failed, requeued, node failure,
    timeout, preempted, cancelled), the steps after the checkpoint the job could resume from are
    computed again. That share of the attempt's progressing time ``[started_at,
    last_progress_at]`` is estimated linearly and taken from its end: ``(last_step - kept) /
    (last_step - first_step + 1)``, where ``kept`` is the checkpoint the next attempt loaded when
    its logs said so, else this attempt's newest saved checkpoint, else nothing (the whole
    attempt is lost). The start-up before the first step (container, rendezvous, checkpoint load)
    is inside that span: no timestamp of the first step is kept, so it is not told apart.
``stalled``
    in such an attempt, ``last_progress_at`` to its end: a hang, or the time until the crash was
    detected and the attempt torn down.
``downtime``
    from one attempt's end to the next one's start (detection, requeue, queue wait, restart), and
    from the last attempt's end to now while the job waits to run again. Queue time before the
    first attempt is not counted: the job had not run yet.
``no_progress``
    an attempt without any progress seen, in a job that reported progress in another attempt
    (typically a restart that crashed or hung before its first step).
``unmeasured``
    every interval of a job that never reported progress. Such a job cannot be judged (medic does
    not recognise its log format, or it is not training): it is left out of the ratio and counted
    separately rather than taken for 100 % goodput.

Optimism, on purpose: a running attempt that has reported progress counts as productive up to
``now``, and a completed one up to its end, although a later failure would turn the steps since
its last checkpoint into wasted progress (and a hang in progress is only seen once it ends the
attempt). The figures for a recent window can therefore drop when an attempt fails.

Time is node-weighted: an interval counts ``seconds × nodes`` (the attempt's node count; a
downtime interval the node count of the attempt before it), so a 64-node job weighs 64 times a
1-node job. Pure: no I/O, no clock reads (``now`` is passed in).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from medic.domain.attempts import Attempt
from medic.domain.cluster import JobState
from medic.domain.ids import ClusterName, JobId

__all__ = [
    "BADPUT",
    "Cause",
    "Goodput",
    "Interval",
    "goodput",
    "goodput_series",
    "intervals",
    "job_intervals",
]

JobKey = tuple[ClusterName, JobId]


class Cause(enum.StrEnum):
    """What one interval of a job's time went into (see the module docstring)."""

    PRODUCTIVE = "productive"
    WASTED_PROGRESS = "wasted_progress"
    STALLED = "stalled"
    DOWNTIME = "downtime"
    NO_PROGRESS = "no_progress"
    UNMEASURED = "unmeasured"


BADPUT: tuple[Cause, ...] = (
    Cause.WASTED_PROGRESS,
    Cause.STALLED,
    Cause.DOWNTIME,
    Cause.NO_PROGRESS,
)
"""The causes counted against goodput, in the order reports list them."""


@dataclass(frozen=True, slots=True)
class Interval:
    """``[start, end)`` of one job's time, spent on ``cause`` by ``nodes`` nodes."""

    cluster: ClusterName
    job_id: JobId
    attempt: int
    """The attempt the time belongs to; for downtime, the attempt that ended before it."""
    cause: Cause
    start: datetime
    end: datetime
    nodes: int

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True, slots=True)
class Goodput:
    """Goodput over ``[start, end)``; time in node-seconds unless the name says otherwise."""

    start: datetime
    end: datetime
    productive: float = 0.0
    badput: Mapping[Cause, float] = field(default_factory=dict)
    """Node-seconds per badput cause; every cause of :data:`BADPUT` is present."""
    unmeasured: float = 0.0
    """Node-seconds of jobs that never reported progress (not in the ratio)."""
    productive_seconds: float = 0.0
    """Productive job-seconds, not weighted by nodes."""
    badput_seconds: float = 0.0
    """Badput job-seconds, not weighted by nodes."""
    jobs: int = 0
    """Jobs with measured time in the window."""
    unmeasured_jobs: int = 0
    """Jobs with time in the window that never reported progress."""

    @property
    def badput_total(self) -> float:
        return sum(self.badput.values())

    @property
    def ratio(self) -> float | None:
        """Productive node-seconds over measured node-seconds; None when nothing was measured."""
        total = self.productive + self.badput_total
        return self.productive / total if total > 0 else None


# --- a job's attempts → intervals -----------------------------------------------------------
def intervals(
    attempts: Iterable[Attempt],
    now: datetime,
    job_states: Mapping[JobKey, JobState] | None = None,
) -> list[Interval]:
    """The intervals of every job among ``attempts`` (any order, several jobs and clusters).

    ``job_states`` gives each job's current state where known, which tells whether a job whose
    last attempt ended is waiting to run again (see :func:`job_intervals`).
    """
    by_job: dict[JobKey, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        by_job[(attempt.cluster, attempt.job_id)].append(attempt)
    states = job_states or {}
    out: list[Interval] = []
    for key in sorted(by_job):
        out += job_intervals(by_job[key], now, states.get(key))
    return out


def job_intervals(
    attempts: Sequence[Attempt], now: datetime, job_state: JobState | None = None
) -> list[Interval]:
    """The intervals of one job's attempts, in time order.

    Attempts that never started (no ``started_at``: progress seen before the scheduler placed
    them) hold no time and are skipped. After the last attempt ended, the time up to ``now`` is
    downtime while the job waits to run again: when ``job_state`` is given, while it is not
    terminal; when it is not known, when that attempt ended by a requeue.
    """
    placed = sorted((a for a in attempts if a.started_at is not None), key=lambda a: a.number)
    out: list[Interval] = []
    for i, attempt in enumerate(placed):
        after = placed[i + 1] if i + 1 < len(placed) else None
        start, end, ended = _span(attempt, after, now)
        out += _attempt_intervals(attempt, after, start, end, ended)
        if not ended:
            continue
        if after is not None:
            resumed = after.started_at
        elif _waits(attempt, job_state):
            resumed = now
        else:
            resumed = None
        if resumed is not None and resumed > end:
            out.append(_interval(attempt, Cause.DOWNTIME, end, resumed))
    if not any(_has_progress(a) for a in placed):
        out = [_relabel(iv, Cause.UNMEASURED) for iv in out]
    return out


def _span(
    attempt: Attempt, after: Attempt | None, now: datetime
) -> tuple[datetime, datetime, bool]:
    """(start, end, ended) of an attempt; a running one ends ``now`` (not ended)."""
    assert attempt.started_at is not None
    start = attempt.started_at
    end = attempt.ended_at
    # A later attempt started: this one ended then at the latest, even if its end was missed.
    if after is not None and after.started_at is not None:
        end = after.started_at if end is None else min(end, after.started_at)
    if end is None:
        return start, max(start, now), False
    return start, max(start, end), True


def _waits(last: Attempt, job_state: JobState | None) -> bool:
    if job_state is not None:
        return not job_state.is_terminal
    return last.state is JobState.REQUEUED


def _has_progress(attempt: Attempt) -> bool:
    return attempt.progress.last_progress_at is not None


def _attempt_intervals(
    attempt: Attempt, after: Attempt | None, start: datetime, end: datetime, ended: bool
) -> list[Interval]:
    if not _has_progress(attempt):
        return _nonempty([_interval(attempt, Cause.NO_PROGRESS, start, end)])
    if not ended or attempt.state is JobState.COMPLETED:
        return _nonempty([_interval(attempt, Cause.PRODUCTIVE, start, end)])
    progress = attempt.progress
    assert progress.last_progress_at is not None
    progressed = min(max(progress.last_progress_at, start), end)
    lost = _lost_fraction(attempt, after)
    split = progressed - timedelta(seconds=lost * (progressed - start).total_seconds())
    return _nonempty(
        [
            _interval(attempt, Cause.PRODUCTIVE, start, split),
            _interval(attempt, Cause.WASTED_PROGRESS, split, progressed),
            _interval(attempt, Cause.STALLED, progressed, end),
        ]
    )


def _lost_fraction(attempt: Attempt, after: Attempt | None) -> float:
    """Share of an interrupted attempt's steps that are computed again (0..1)."""
    p = attempt.progress
    last = p.last_step if p.last_step is not None else p.last_checkpoint_step
    if last is None:
        return 1.0  # progress without a step number: nothing known to be kept
    if p.first_step is not None:
        first = p.first_step
    elif p.loaded_checkpoint_step is not None:
        first = p.loaded_checkpoint_step + 1
    else:
        first = 0  # no first step seen (only checkpoints): count from the start of training
    # Where the job really resumed beats where it could have (a checkpoint may be unreadable).
    resumed = after.progress.loaded_checkpoint_step if after is not None else None
    kept = resumed if resumed is not None else p.last_checkpoint_step
    kept = first - 1 if kept is None else min(max(kept, first - 1), last)
    steps = max(1, last - first + 1)
    return min(1.0, max(0.0, (last - kept) / steps))


def _interval(attempt: Attempt, cause: Cause, start: datetime, end: datetime) -> Interval:
    return Interval(
        attempt.cluster,
        attempt.job_id,
        attempt.number,
        cause,
        start,
        end,
        max(1, len(attempt.nodes)),
    )


def _relabel(interval: Interval, cause: Cause) -> Interval:
    return Interval(
        interval.cluster,
        interval.job_id,
        interval.attempt,
        cause,
        interval.start,
        interval.end,
        interval.nodes,
    )


def _nonempty(found: list[Interval]) -> list[Interval]:
    return [iv for iv in found if iv.end > iv.start]


# --- intervals → goodput over a window ------------------------------------------------------
class _Tally:
    """Accumulates the clipped intervals of one bucket."""

    def __init__(self) -> None:
        self.node_seconds: dict[Cause, float] = defaultdict(float)
        self.productive_seconds = 0.0
        self.badput_seconds = 0.0
        self.measured: set[JobKey] = set()
        self.unmeasured: set[JobKey] = set()

    def add(self, interval: Interval, seconds: float) -> None:
        self.node_seconds[interval.cause] += seconds * interval.nodes
        key = (interval.cluster, interval.job_id)
        if interval.cause is Cause.UNMEASURED:
            self.unmeasured.add(key)
            return
        self.measured.add(key)
        if interval.cause is Cause.PRODUCTIVE:
            self.productive_seconds += seconds
        else:
            self.badput_seconds += seconds

    def result(self, start: datetime, end: datetime) -> Goodput:
        return Goodput(
            start=start,
            end=end,
            productive=self.node_seconds[Cause.PRODUCTIVE],
            badput={cause: self.node_seconds[cause] for cause in BADPUT},
            unmeasured=self.node_seconds[Cause.UNMEASURED],
            productive_seconds=self.productive_seconds,
            badput_seconds=self.badput_seconds,
            jobs=len(self.measured),
            unmeasured_jobs=len(self.unmeasured),
        )


def goodput(found: Iterable[Interval], start: datetime, end: datetime) -> Goodput:
    """Goodput of the intervals' time inside ``[start, end)`` (intervals are clipped to it)."""
    return goodput_series(found, start, end, 1)[0]


def goodput_series(
    found: Iterable[Interval], start: datetime, end: datetime, buckets: int
) -> list[Goodput]:
    """Goodput in each of ``buckets`` equal slices of ``[start, end)``, oldest first."""
    if buckets < 1:
        raise ValueError("buckets must be at least 1")
    if end <= start:
        raise ValueError("the window must end after it starts")
    width = (end - start).total_seconds() / buckets
    bounds = [start + timedelta(seconds=width * i) for i in range(buckets)] + [end]
    tallies = [_Tally() for _ in range(buckets)]
    for iv in found:
        lo, hi = max(iv.start, start), min(iv.end, end)
        if hi <= lo:
            continue
        # Only the buckets the interval overlaps: the cost is intervals + buckets, not a product.
        first = min(buckets - 1, int((lo - start).total_seconds() // width))
        last = min(buckets - 1, int((hi - start).total_seconds() // width))
        for b in range(max(0, first - 1), min(buckets, last + 2)):
            seconds = (min(hi, bounds[b + 1]) - max(lo, bounds[b])).total_seconds()
            if seconds > 0:
                tallies[b].add(iv, seconds)
    return [tally.result(bounds[b], bounds[b + 1]) for b, tally in enumerate(tallies)]
