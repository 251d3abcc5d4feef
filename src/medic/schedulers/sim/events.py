"""Virtual time of the simulator: the event queue and the buffer of emitted log lines.

The simulator never reads the wall clock by itself. Every public call first runs
:meth:`EventQueue.run_until` up to the injected clock's ``now()``, which processes the pending
events (iterations, fault consequences, node repairs, ...) in timestamp order. Times inside are
float seconds since the clock reading at construction; the same clock readings give the same
event order (ties are broken by insertion order), hence a deterministic run.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from medic.domain.ids import JobId, NodeName
from medic.domain.logs import LogLine, LogStream

__all__ = ["MAX_BUFFERED_LINES", "EventQueue", "LineBuffer"]

MAX_BUFFERED_LINES = 500_000
"""Unread lines kept at most; beyond, the oldest are dropped (a source nobody reads for minutes
must not eat the memory: 2,000 busy nodes emit about 4,000 lines a second)."""

_Event = tuple[float, int, Callable[..., None], tuple[Any, ...]]


class EventQueue:
    """A priority queue of callbacks keyed by virtual time."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.now = 0.0
        """Current virtual time, seconds since ``start``."""
        self._heap: list[_Event] = []
        self._seq = 0
        self._when_t = -1.0
        self._when = start

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at virtual time ``t`` (never earlier than now)."""
        self._seq += 1
        heapq.heappush(self._heap, (max(t, self.now), self._seq, fn, args))

    def after(self, seconds: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + seconds, fn, *args)

    def seconds(self, when: datetime) -> float:
        return (when - self.start).total_seconds()

    def when(self, t: float | None = None) -> datetime:
        """The datetime of virtual time ``t`` (default: now); the last one is cached because a
        single event usually emits many lines with the same time."""
        t = self.now if t is None else t
        if t != self._when_t:
            self._when_t = t
            self._when = self.start + timedelta(seconds=t)
        return self._when

    def run_until(self, t: float, after_each: Callable[[], None]) -> None:
        """Process every event due at or before ``t`` in order, calling ``after_each`` after each
        (the scheduler's chance to start jobs at the exact time nodes were freed)."""
        heap = self._heap
        while heap and heap[0][0] <= t:
            when, _, fn, args = heapq.heappop(heap)
            self.now = when
            fn(*args)
            after_each()
        self.now = max(self.now, t)

    def __len__(self) -> int:
        return len(self._heap)


class LineBuffer:
    """Lines emitted since the last read, with a monotonic sequence number each."""

    def __init__(self, events: EventQueue) -> None:
        self._events = events
        self._lines: deque[LogLine] = deque(maxlen=MAX_BUFFERED_LINES)
        self._seq = 0

    def job(self, job: JobId, node: NodeName, rank: int | None, text: str) -> None:
        self._seq += 1
        self._lines.append(
            LogLine(LogStream.JOB, text, self._events.when(), node, job, rank, self._seq)
        )

    def kernel(self, node: NodeName, text: str) -> None:
        self._seq += 1
        self._lines.append(
            LogLine(LogStream.KERNEL, text, self._events.when(), node, None, None, self._seq)
        )

    def drain(self) -> list[LogLine]:
        lines = list(self._lines)
        self._lines.clear()
        return lines
