"""The controller's patience with a step the scheduler failed: a growing pause, then give up.

Kept in memory on purpose: a restarted controller starts counting again, which at worst retries
a failing step for another :data:`GIVE_UP_SECONDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from medic.ports import Clock

__all__ = ["GIVE_UP_SECONDS", "RETRY_SECONDS", "StepRetries"]

RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Pause before each new try of a step the scheduler failed (a transient error), in order."""
GIVE_UP_SECONDS = 300.0
"""A step still failing this long after its first failure is given up: the advice is abandoned
with the last error, audited once."""


@dataclass(slots=True)
class _Failures:
    """A step the scheduler failed: when first, how often, the last error."""

    first: datetime
    next_try: datetime
    count: int
    error: str


class StepRetries:
    """Failures of steps by idempotency key."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._failures: dict[str, _Failures] = {}

    def backing_off(self, key: str, what: str) -> str | None:
        """Why the step ``key`` must wait before its next try, or None when it may go now."""
        failures = self._failures.get(key)
        if failures is None or self._clock.now() >= failures.next_try:
            return None
        return f"{what} failed ({failures.error}); tried again from {failures.next_try}"

    def failed(self, key: str, what: str, exc: Exception) -> str | None:
        """Count a failure of the step; the reason to give up, or None to retry later."""
        now = self._clock.now()
        failures = self._failures.setdefault(key, _Failures(now, now, 0, ""))
        failures.count += 1
        failures.error = str(exc)
        pause = RETRY_SECONDS[min(failures.count, len(RETRY_SECONDS)) - 1]
        failures.next_try = now + timedelta(seconds=pause)
        spent = (now - failures.first).total_seconds()
        if spent < GIVE_UP_SECONDS:
            return None
        del self._failures[key]
        return (
            f"{what} failed {failures.count} times over {spent:.0f} s, giving up: {failures.error}"
        )
