"""Public test kit: fakes for the ports that have no simulator of their own.

Used by medic's own tests and by anyone writing an adapter or detector against medic.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that moves only when told to; starts at a fixed, deterministic instant."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime) -> None:
        if when < self._now:
            raise ValueError("FakeClock cannot go backwards")
        self._now = when
