"""Straggler detection: a job slower than its own baseline, and the node that makes it slow.

Two independent views, both with robust statistics (medians, MAD), so one slow iteration (a
checkpoint save, a garbage collection) never counts:

- :class:`ThroughputWatch` follows the job's throughput (tokens/s, or iterations/s from the
  iteration time) against its own baseline, the median of an early window after a short warm-up,
  and measures how long the smoothed throughput has stayed below ``(1 - drop) x baseline``.
- :func:`find_slow_node` compares each node's (or rank's) median compute time (the sim's
  ``[timing]`` lines, a rank's forward-backward time, a worker's time per sample) with the median
  of its peers' medians.

Pure: numbers and times in, numbers out; no I/O, no clock reads. Memory is bounded.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

__all__ = [
    "BASELINE_SAMPLES",
    "MIN_NODE_SAMPLES",
    "SlowNode",
    "ThroughputWatch",
    "find_slow_node",
    "mad",
]

WARMUP_SAMPLES = 3
"""Iterations ignored at the start of an attempt (compilation, allocator warm-up)."""
BASELINE_SAMPLES = 10
"""Iterations after the warm-up whose median is the job's baseline throughput."""
SMOOTH_SAMPLES = 5
"""Recent iterations whose median is compared with the baseline."""
MIN_NODE_SAMPLES = 5
"""Compute-time samples a node needs before it is compared with its peers."""
K = TypeVar("K", bound=str | tuple[str, int])
"""What is compared: a node, or a (node, rank) pair where the framework times each rank."""
MAD_FACTOR = 3.0
"""A slow node must also stand out from the spread of its peers by this many scaled MADs."""
_MAD_SCALE = 1.4826  # makes the MAD comparable with a standard deviation for normal data


def mad(values: Sequence[float], center: float) -> float:
    """Median absolute deviation of non-empty ``values`` around ``center``."""
    return statistics.median(abs(v - center) for v in values)


class ThroughputWatch:
    """The job's throughput against its own baseline, fed one iteration at a time."""

    def __init__(self, *, pending_limit: int = 4096) -> None:
        self._pending: deque[tuple[datetime, float]] = deque(maxlen=pending_limit)
        self._seen = 0
        self._baseline_values: list[float] = []
        self._recent: deque[float] = deque(maxlen=SMOOTH_SAMPLES)
        self.baseline: float | None = None
        self.current: float | None = None
        self._slow_since: datetime | None = None
        self._run_since: datetime | None = None
        self._run_samples = 0
        self._last_time: datetime | None = None
        self.slow_samples = 0
        """Samples in the current slow stretch (from its first slow sample; 0: not slow)."""

    def add(self, time: datetime, value: float) -> None:
        """Record one throughput sample (higher is faster); non-positive values are ignored."""
        if value > 0.0:
            self._pending.append((time, value))

    def slow_seconds(self, drop: float) -> float | None:
        """How long the smoothed throughput has been below ``(1 - drop) x baseline``, by sample
        times; None while it is not slow or the baseline is not known yet."""
        while self._pending:
            self._step(*self._pending.popleft(), drop)
        if self._slow_since is None or self._last_time is None:
            return None
        return (self._last_time - self._slow_since).total_seconds()

    def _step(self, time: datetime, value: float, drop: float) -> None:
        self._seen += 1
        if self._seen <= WARMUP_SAMPLES:
            return
        if self.baseline is None:
            self._baseline_values.append(value)
            if len(self._baseline_values) >= BASELINE_SAMPLES:
                self.baseline = statistics.median(self._baseline_values)
            return
        threshold = (1.0 - drop) * self.baseline
        # The run of slow raw samples the smoothed median follows: its first sample is when the
        # slowness was first seen (the median falls only a few samples later, minutes later for a
        # framework that logs every 100 iterations).
        if value < threshold:
            self._run_since = self._run_since or time
            self._run_samples += 1
        else:
            self._run_since, self._run_samples = None, 0
        self._recent.append(value)
        self.current = statistics.median(self._recent)
        self._last_time = time
        if self.current < threshold:
            if self._slow_since is None:
                self._slow_since = self._run_since or time
                self.slow_samples = max(self._run_samples, 1)
            else:
                self.slow_samples += 1
        else:
            self._slow_since = None
            self.slow_samples = 0


@dataclass(frozen=True, slots=True)
class SlowNode(Generic[K]):
    key: K
    """The slow node, or (node, rank)."""
    node_ms: float
    """Its median compute time."""
    peers_ms: float
    """The median of the others' median compute times."""

    @property
    def ratio(self) -> float:
        return self.node_ms / self.peers_ms if self.peers_ms > 0 else float("inf")


def find_slow_node(samples: Mapping[K, Sequence[float]], drop: float) -> SlowNode[K] | None:
    """The slowest node (or rank) whose median compute time exceeds its peers' median by more than
    ``drop`` (relative) and by more than the peers' own spread; None when no node stands out or
    fewer than two have :data:`MIN_NODE_SAMPLES` samples. Ties go to the first key."""
    medians = {
        key: statistics.median(values)
        for key, values in sorted(samples.items())
        if len(values) >= MIN_NODE_SAMPLES
    }
    if len(medians) < 2:
        return None
    worst: SlowNode[K] | None = None
    for key, value in medians.items():
        peers = [v for k, v in medians.items() if k != key]
        center = statistics.median(peers)
        spread = _MAD_SCALE * mad(peers, center)
        if value <= center * (1.0 + drop) or value - center <= MAD_FACTOR * spread:
            continue
        candidate = SlowNode(key, value, center)
        if worst is None or candidate.ratio > worst.ratio:
            worst = candidate
    return worst
