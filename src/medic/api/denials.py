"""How many refused requests are written to the audit trail one by one: a token bucket per caller,
and one for all callers together.

Every 401 and 403 is audited (``access-denied``), which makes the trail an easy target: a script
hammering the API without a token would write one row per request, as fast as it can send them.
So each caller (client address and principal, ``anonymous`` without one) has a bucket of
``burst`` events refilled at ``per_minute``; a refusal past that is counted instead of written,
and the count rides on that caller's next written event as ``suppressed`` (how many refusals
happened since its previous event and were not written one by one).

A flood from many addresses (100 addresses, 5 bad tokens each, is 500 callers within their own
rate) is bounded by the second bucket, shared by every caller: ``global_burst`` events refilled
at ``global_per_minute``. A refusal its caller's bucket admits but the shared one does not is
counted globally; :meth:`DenialLimiter.summary` hands that count out at most once every
``summary_seconds``, for one summary event saying how many refusals (of how many callers) were
not written. A caller's count dropped because the caller table is full (past ``max_callers``
callers with counts pending) joins the global count too, with a warning in the log.

:meth:`DenialLimiter.drain` and :meth:`DenialLimiter.drain_global` give the counts still pending,
for final events when the API stops. Every refusal is accounted for: each answered event counts
``1 + suppressed``, each final or summary event ``suppressed``.

Time is the caller's (the services' clock), so tests and replays are deterministic.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime

__all__ = ["DenialLimiter", "Summary"]

logger = logging.getLogger(__name__)

Key = tuple[str, str]
"""(client address or ``-``, principal name or ``anonymous``)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: datetime
    suppressed: int = 0

    def take(self, now: datetime, burst: float, rate: float) -> bool:
        """Refill for the time since the last call, then take one token if there is one."""
        elapsed = max(0.0, (now - self.at).total_seconds())
        self.tokens = min(burst, self.tokens + elapsed * rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(frozen=True, slots=True)
class Summary:
    """Refusals past the shared rate, counted and not written one by one."""

    suppressed: int
    callers: int
    """How many distinct callers those refusals came from (as far as still remembered)."""


class DenialLimiter:
    """Decides which refusals are audited one by one (see the module docstring)."""

    def __init__(
        self,
        *,
        burst: int = 20,
        per_minute: float = 10.0,
        global_burst: int = 100,
        global_per_minute: float = 60.0,
        summary_seconds: float = 60.0,
        max_callers: int = 10_000,
    ) -> None:
        if burst < 1 or per_minute <= 0 or global_burst < 1 or global_per_minute <= 0:
            raise ValueError(
                "burst and global_burst must be >= 1, per_minute and global_per_minute > 0"
            )
        self._burst = burst
        self._rate = per_minute / 60.0
        self._global_burst = global_burst
        self._global_rate = global_per_minute / 60.0
        self._summary_every = summary_seconds
        self._max = max_callers
        self._buckets: dict[Key, _Bucket] = {}
        self._shared: _Bucket | None = None
        self._global_suppressed = 0
        self._global_callers: set[Key] = set()
        self._summary_at: datetime | None = None
        self._lock = threading.Lock()

    def admit(self, key: Key, now: datetime) -> int | None:
        """None: count this refusal, do not write it. Else write it, with the returned number of
        refusals suppressed since the caller's previous written event."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                self._make_room()
                bucket = self._buckets[key] = _Bucket(float(self._burst), now)
            if not bucket.take(now, float(self._burst), self._rate):
                bucket.suppressed += 1
                return None
            if self._shared is None:
                self._shared = _Bucket(float(self._global_burst), now)
            if not self._shared.take(now, float(self._global_burst), self._global_rate):
                # Within the caller's rate, past everyone's: counted for the next summary.
                self._count_globally(key, 1)
                return None
            suppressed, bucket.suppressed = bucket.suppressed, 0
            return suppressed

    def summary(self, now: datetime) -> Summary | None:
        """The refusals counted past the shared rate, once ``summary_seconds`` have passed since
        the previous summary (the first one at once); None when none is due (and then nothing is
        forgotten)."""
        with self._lock:
            if not self._global_suppressed:
                return None
            last = self._summary_at
            if last is not None and (now - last).total_seconds() < self._summary_every:
                return None
            self._summary_at = now
            return self._take_global()

    def drain(self) -> dict[Key, int]:
        """The refusals counted and not yet written, per caller (and forget them)."""
        with self._lock:
            pending = {k: b.suppressed for k, b in self._buckets.items() if b.suppressed}
            for key in pending:
                self._buckets[key].suppressed = 0
            return pending

    def drain_global(self) -> Summary | None:
        """The refusals counted past the shared rate and not yet summarised (and forget them)."""
        with self._lock:
            return self._take_global() if self._global_suppressed else None

    def _count_globally(self, key: Key, count: int) -> None:
        self._global_suppressed += count
        if len(self._global_callers) < self._max:
            self._global_callers.add(key)

    def _take_global(self) -> Summary:
        taken = Summary(self._global_suppressed, len(self._global_callers))
        self._global_suppressed = 0
        self._global_callers.clear()
        return taken

    def _make_room(self) -> None:
        """Past ``max_callers``, forget callers with nothing pending (they start afresh, full);
        when every caller has a count pending, the one seen longest ago goes (logged), and its
        count joins the global one (written in the next summary)."""
        if len(self._buckets) < self._max:
            return
        idle = [k for k, b in self._buckets.items() if not b.suppressed]
        for key in idle[: max(1, len(idle) // 2)]:
            del self._buckets[key]
        if not idle:
            key = min(self._buckets, key=lambda k: self._buckets[k].at)
            moved = self._buckets.pop(key).suppressed
            self._count_globally(key, moved)
            logger.warning(
                "refusal counter table full: %d refusals of %s move to the global count",
                moved,
                key,
            )
