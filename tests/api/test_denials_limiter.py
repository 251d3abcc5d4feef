"""The rate at which refused requests are written one by one, and the count of the others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from medic.api.denials import DenialLimiter

T0 = datetime(2026, 11, 30, tzinfo=UTC)
ANON = ("10.0.0.9", "anonymous")


def test_a_burst_is_written_then_refusals_are_counted_onto_the_next_event() -> None:
    limiter = DenialLimiter(burst=3, per_minute=6)  # one more every 10 s
    assert [limiter.admit(ANON, T0) for _ in range(5)] == [0, 0, 0, None, None]
    assert limiter.admit(ANON, T0 + timedelta(seconds=5)) is None
    assert limiter.admit(ANON, T0 + timedelta(seconds=10)) == 3, "three counted since"
    assert limiter.admit(ANON, T0 + timedelta(seconds=10)) is None
    assert limiter.drain() == {ANON: 1}
    assert limiter.drain() == {}, "drained once"


def test_callers_have_their_own_buckets() -> None:
    limiter = DenialLimiter(burst=1, per_minute=1)
    assert limiter.admit(ANON, T0) == 0
    assert limiter.admit(ANON, T0) is None
    assert limiter.admit(("10.0.0.9", "ci-viewer"), T0) == 0
    assert limiter.admit(("10.0.0.10", "anonymous"), T0) == 0


def test_every_refusal_is_accounted_for() -> None:
    limiter = DenialLimiter(burst=5, per_minute=30)
    written = []
    for i in range(1000):
        got = limiter.admit(ANON, T0 + timedelta(milliseconds=100 * i))
        if got is not None:
            written.append(got)
    pending = sum(limiter.drain().values())
    assert len(written) + sum(written) + pending == 1000
    assert len(written) < 60, "100 s at 30 a minute, plus the burst"


def test_a_table_full_of_pending_counts_drops_the_oldest_and_stays_bounded() -> None:
    limiter = DenialLimiter(burst=1, per_minute=1, max_callers=3)
    for n in range(10):
        caller = (f"10.2.0.{n}", "anonymous")
        limiter.admit(caller, T0 + timedelta(seconds=n))
        limiter.admit(caller, T0 + timedelta(seconds=n))  # pending
    pending = limiter.drain()
    assert len(pending) <= 3 and ("10.2.0.9", "anonymous") in pending


def test_a_full_table_forgets_callers_with_nothing_pending() -> None:
    limiter = DenialLimiter(burst=1, per_minute=1, max_callers=4)
    limiter.admit(ANON, T0)
    limiter.admit(ANON, T0)  # pending: kept
    for n in range(10):
        limiter.admit((f"10.1.0.{n}", "anonymous"), T0)
    assert limiter.drain() == {ANON: 1}


@pytest.mark.parametrize(("burst", "rate"), [(0, 1.0), (1, 0.0)])
def test_nonsense_limits_are_refused(burst: int, rate: float) -> None:
    with pytest.raises(ValueError, match="burst"):
        DenialLimiter(burst=burst, per_minute=rate)


def test_many_callers_within_their_own_rate_are_bounded_together() -> None:
    """100 addresses with 5 bad tokens each: 500 callers, each within its own rate."""
    limiter = DenialLimiter(global_burst=50, global_per_minute=60, summary_seconds=60)
    written, summarised = [], []
    for i in range(500):
        now = T0 + timedelta(milliseconds=10 * i)  # 5 s in all
        got = limiter.admit((f"10.3.{i % 100}.1", f"bad-{i // 100}"), now)
        if got is not None:
            written.append(got)
        summary = limiter.summary(now)
        if summary is not None:
            summarised.append(summary)
    final = limiter.drain_global()
    assert final is not None
    assert 50 <= len(written) <= 55, "the shared burst, then one a second"
    assert len(summarised) == 1, "one summary a minute (the first at once)"
    total = len(written) + sum(written) + sum(s.suppressed for s in [*summarised, final])
    assert total + sum(limiter.drain().values()) == 500
    assert final.callers > 1


def test_summaries_come_at_most_once_an_interval() -> None:
    limiter = DenialLimiter(global_burst=1, global_per_minute=1, summary_seconds=60)
    assert limiter.admit(("a", "x"), T0) == 0
    assert limiter.summary(T0) is None, "nothing counted yet"
    assert limiter.admit(("b", "x"), T0) is None
    first = limiter.summary(T0)
    assert first is not None and (first.suppressed, first.callers) == (1, 1)
    assert limiter.admit(("c", "x"), T0 + timedelta(seconds=30)) is None
    assert limiter.summary(T0 + timedelta(seconds=30)) is None, "within the interval: kept"
    later = limiter.summary(T0 + timedelta(seconds=60))
    assert later is not None and later.suppressed == 1
    assert limiter.drain_global() is None


def test_a_count_dropped_from_a_full_table_joins_the_global_count() -> None:
    limiter = DenialLimiter(burst=1, per_minute=1, max_callers=2)
    for n in range(4):
        caller = (f"10.4.0.{n}", "anonymous")
        limiter.admit(caller, T0 + timedelta(seconds=n))
        limiter.admit(caller, T0 + timedelta(seconds=n))  # pending
    pending = sum(limiter.drain().values())
    moved = limiter.drain_global()
    assert moved is not None and pending + moved.suppressed == 4, "none lost"
