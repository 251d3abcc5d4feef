"""How many refused requests are written to the audit trail one by one: a token bucket per caller.

Every 401 and 403 is audited (``access-denied``), which makes the trail an easy target: a script
hammering the API without a token would write one row per request, as fast as it can send them.
So each caller (client address and principal, ``anonymous`` without one) has a bucket of
``burst`` events refilled at ``per_minute``; a refusal past that is counted instead of written,
and the count rides on that caller's next written event as ``suppressed`` (how many refusals
happened since its previous event and were not written one by one). :meth:`DenialLimiter.drain`
gives the counts still pending, for a final event each when the API stops. Every refusal is
accounted for: over a caller's events, each answered one counts ``1 + suppressed`` and each
final one ``suppressed``. Only past ``max_callers`` callers with counts pending (a flood from
that many addresses at once) is the oldest count dropped, with a warning in the log.

Time is the caller's (the services' clock), so tests and replays are deterministic.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime

__all__ = ["DenialLimiter"]

logger = logging.getLogger(__name__)

Key = tuple[str, str]
"""(client address or ``-``, principal name or ``anonymous``)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: datetime
    suppressed: int = 0


class DenialLimiter:
    """Decides which refusals are audited one by one (see the module docstring)."""

    def __init__(
        self, *, burst: int = 20, per_minute: float = 10.0, max_callers: int = 10_000
    ) -> None:
        if burst < 1 or per_minute <= 0:
            raise ValueError("burst must be >= 1 and per_minute > 0")
        self._burst = burst
        self._rate = per_minute / 60.0
        self._max = max_callers
        self._buckets: dict[Key, _Bucket] = {}
        self._lock = threading.Lock()

    def admit(self, key: Key, now: datetime) -> int | None:
        """None: count this refusal, do not write it. Else write it, with the returned number of
        refusals suppressed since the caller's previous written event."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                self._make_room()
                bucket = self._buckets[key] = _Bucket(float(self._burst), now)
            elapsed = max(0.0, (now - bucket.at).total_seconds())
            bucket.tokens = min(float(self._burst), bucket.tokens + elapsed * self._rate)
            bucket.at = now
            if bucket.tokens < 1.0:
                bucket.suppressed += 1
                return None
            bucket.tokens -= 1.0
            suppressed, bucket.suppressed = bucket.suppressed, 0
            return suppressed

    def drain(self) -> dict[Key, int]:
        """The refusals counted and not yet written, per caller (and forget them)."""
        with self._lock:
            pending = {k: b.suppressed for k, b in self._buckets.items() if b.suppressed}
            for key in pending:
                self._buckets[key].suppressed = 0
            return pending

    def _make_room(self) -> None:
        """Past ``max_callers``, forget callers with nothing pending (they start afresh, full);
        when every caller has a count pending, the one seen longest ago goes (logged)."""
        if len(self._buckets) < self._max:
            return
        idle = [k for k, b in self._buckets.items() if not b.suppressed]
        for key in idle[: max(1, len(idle) // 2)]:
            del self._buckets[key]
        if not idle:
            key = min(self._buckets, key=lambda k: self._buckets[k].at)
            lost = self._buckets.pop(key).suppressed
            logger.warning("refusal counter table full: %d refusals of %s not audited", lost, key)
