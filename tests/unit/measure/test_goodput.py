"""Goodput from a job's attempts: the intervals, their causes, the node weights and the windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from medic.domain.attempts import Attempt, Progress
from medic.domain.cluster import JobState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.measure import (
    BADPUT,
    Cause,
    Interval,
    goodput,
    goodput_series,
    intervals,
    job_intervals,
)

C = ClusterName("alpha")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def attempt(
    number: int,
    start: float | None,
    end: float | None,
    state: JobState,
    *,
    job: str = "1",
    nodes: int = 1,
    first: int | None = None,
    last: int | None = None,
    saved: int | None = None,
    loaded: int | None = None,
    progressed: float | None = None,
) -> Attempt:
    return Attempt(
        cluster=C,
        job_id=JobId(job),
        number=number,
        nodes=tuple(NodeName(f"n{i}") for i in range(nodes)),
        state=state,
        started_at=None if start is None else at(start),
        ended_at=None if end is None else at(end),
        progress=Progress(
            first_step=first,
            last_step=last,
            last_checkpoint_step=saved,
            loaded_checkpoint_step=loaded,
            last_progress_at=None if progressed is None else at(progressed),
        ),
    )


def spans(found: list[Interval]) -> list[tuple[Cause, float, float]]:
    """(cause, start, end) in seconds after T0, rounded to the millisecond."""
    return [
        (
            iv.cause,
            round((iv.start - T0).total_seconds(), 3),
            round((iv.end - T0).total_seconds(), 3),
        )
        for iv in found
    ]


# --- intervals ------------------------------------------------------------------------------
def test_a_completed_attempt_is_productive_to_its_end() -> None:
    done = attempt(0, 0, 100, JobState.COMPLETED, nodes=2, first=1, last=50, progressed=90)
    found = job_intervals([done], now=at(500), job_state=JobState.COMPLETED)
    assert spans(found) == [(Cause.PRODUCTIVE, 0, 100)]
    assert found[0].nodes == 2


def test_a_job_with_two_failures() -> None:
    first = attempt(0, 0, 100, JobState.FAILED, first=0, last=99, saved=80, progressed=90)
    second = attempt(
        1, 120, 230, JobState.NODE_FAIL, first=81, last=150, saved=140, loaded=80, progressed=200
    )
    third = attempt(2, 250, None, JobState.RUNNING, first=141, last=170, loaded=140, progressed=290)

    found = job_intervals([third, first, second], now=at(300), job_state=JobState.RUNNING)

    assert spans(found) == [
        # steps 81..99 of 0..99 are recomputed: 19 % of [0, 90], taken from its end
        (Cause.PRODUCTIVE, 0, 72.9),
        (Cause.WASTED_PROGRESS, 72.9, 90),
        (Cause.STALLED, 90, 100),
        (Cause.DOWNTIME, 100, 120),
        # steps 141..150 of 81..150: 1/7 of [120, 200]
        (Cause.PRODUCTIVE, 120, 188.571),
        (Cause.WASTED_PROGRESS, 188.571, 200),
        (Cause.STALLED, 200, 230),
        (Cause.DOWNTIME, 230, 250),
        (Cause.PRODUCTIVE, 250, 300),
    ]
    summary = goodput(found, at(0), at(300))
    assert summary.productive == pytest.approx(72.9 + 68.571 + 50, abs=1e-3)
    assert summary.badput[Cause.WASTED_PROGRESS] == pytest.approx(17.1 + 11.429, abs=1e-3)
    assert summary.badput[Cause.STALLED] == pytest.approx(40)
    assert summary.badput[Cause.DOWNTIME] == pytest.approx(40)
    assert summary.ratio == pytest.approx(191.471 / 300, abs=1e-5)
    assert (summary.jobs, summary.unmeasured_jobs) == (1, 0)


def test_a_hang_is_stalled_time_and_a_fresh_checkpoint_wastes_nothing() -> None:
    hung = attempt(0, 0, 1000, JobState.FAILED, first=0, last=50, saved=50, progressed=100)
    found = job_intervals([hung], now=at(1000), job_state=JobState.FAILED)
    assert spans(found) == [(Cause.PRODUCTIVE, 0, 100), (Cause.STALLED, 100, 1000)]


def test_a_running_attempt_is_productive_up_to_now_even_when_silent() -> None:
    # Optimism: the silence only becomes stalled time once the attempt ends.
    running = attempt(0, 0, None, JobState.RUNNING, nodes=4, first=0, last=5, progressed=10)
    found = job_intervals([running], now=at(600))
    assert spans(found) == [(Cause.PRODUCTIVE, 0, 600)]
    assert goodput(found, at(0), at(600)).productive == pytest.approx(4 * 600)


def test_a_job_that_never_reported_progress_is_not_measured() -> None:
    silent = [
        attempt(0, 0, 50, JobState.FAILED, job="9", nodes=8),
        attempt(1, 60, None, JobState.RUNNING, job="9", nodes=8),
    ]
    found = job_intervals(silent, now=at(100))
    assert spans(found) == [
        (Cause.UNMEASURED, 0, 50),
        (Cause.UNMEASURED, 50, 60),
        (Cause.UNMEASURED, 60, 100),
    ]
    summary = goodput(found, at(0), at(100))
    assert summary.ratio is None  # not 100 %: nothing was measured
    assert (summary.jobs, summary.unmeasured_jobs) == (0, 1)
    assert summary.unmeasured == pytest.approx(8 * 100)
    assert summary.productive == summary.badput_total == 0


def test_an_attempt_without_progress_in_a_measured_job_is_badput() -> None:
    ran = attempt(0, 0, 100, JobState.REQUEUED, first=0, last=99, saved=99, progressed=100)
    crashed = attempt(1, 110, 130, JobState.FAILED)
    found = job_intervals([ran, crashed], now=at(200), job_state=JobState.FAILED)
    assert spans(found) == [
        (Cause.PRODUCTIVE, 0, 100),
        (Cause.DOWNTIME, 100, 110),
        (Cause.NO_PROGRESS, 110, 130),
    ]
    assert goodput(found, at(0), at(200)).ratio == pytest.approx(100 / 130)


def test_a_checkpoint_at_step_zero_keeps_step_zero() -> None:
    at_zero = attempt(0, 0, 100, JobState.FAILED, first=0, last=9, saved=0, progressed=100)
    never = attempt(0, 0, 100, JobState.FAILED, job="2", first=0, last=9, progressed=100)
    assert spans(job_intervals([at_zero], at(100))) == [
        (Cause.PRODUCTIVE, 0, 10),  # 1 of 10 steps kept
        (Cause.WASTED_PROGRESS, 10, 100),
    ]
    assert spans(job_intervals([never], at(100))) == [(Cause.WASTED_PROGRESS, 0, 100)]


def test_the_checkpoint_the_next_attempt_loaded_decides_what_was_kept() -> None:
    # attempt 0 saved step 80, but attempt 1 could only load step 40 (80 was unreadable)
    lost = attempt(0, 0, 100, JobState.FAILED, first=1, last=100, saved=80, progressed=100)
    restarted = attempt(
        1, 100, None, JobState.RUNNING, first=41, last=45, loaded=40, progressed=110
    )
    found = job_intervals([lost, restarted], now=at(120))
    assert spans(found)[:2] == [(Cause.PRODUCTIVE, 0, 40), (Cause.WASTED_PROGRESS, 40, 100)]


def test_a_requeued_job_waiting_to_run_again_is_down_until_now() -> None:
    requeued = attempt(0, 0, 100, JobState.REQUEUED, first=0, last=99, saved=99, progressed=100)
    assert spans(job_intervals([requeued], now=at(150)))[-1] == (Cause.DOWNTIME, 100, 150)
    pending = job_intervals([requeued], now=at(150), job_state=JobState.PENDING)
    assert spans(pending)[-1] == (Cause.DOWNTIME, 100, 150)
    # cancelled while it waited: the job is over, no downtime after it
    cancelled = job_intervals([requeued], now=at(150), job_state=JobState.CANCELLED)
    assert spans(cancelled) == [(Cause.PRODUCTIVE, 0, 100)]
    failed = attempt(0, 0, 100, JobState.FAILED, first=0, last=99, saved=99, progressed=100)
    assert spans(job_intervals([failed], now=at(150))) == [(Cause.PRODUCTIVE, 0, 100)]


def test_an_attempt_whose_end_was_missed_ends_when_the_next_one_starts() -> None:
    missed = attempt(0, 0, None, JobState.RUNNING, first=0, last=9, saved=9, progressed=40)
    later = attempt(1, 60, None, JobState.RUNNING, first=10, last=12, loaded=9, progressed=70)
    found = job_intervals([missed, later], now=at(80))
    assert spans(found) == [
        (Cause.PRODUCTIVE, 0, 40),
        (Cause.STALLED, 40, 60),
        (Cause.PRODUCTIVE, 60, 80),
    ]


def test_partial_progress_records_are_read_as_well_as_they_can_be() -> None:
    # only checkpoint lines seen: the newest one is kept, nothing is lost
    saves = attempt(0, 0, 100, JobState.FAILED, saved=50, progressed=100)
    # no first step seen, but the resume point: steps 11..20 of which 16.. are lost
    resumed = attempt(
        0, 0, 100, JobState.FAILED, job="2", last=20, saved=15, loaded=10, progressed=100
    )
    # a progress time without any step number: nothing is known to be kept
    bare = attempt(0, 0, 100, JobState.FAILED, job="3", progressed=100)
    assert spans(job_intervals([saves], at(100))) == [(Cause.PRODUCTIVE, 0, 100)]
    assert spans(job_intervals([resumed], at(100))) == [
        (Cause.PRODUCTIVE, 0, 50),
        (Cause.WASTED_PROGRESS, 50, 100),
    ]
    assert spans(job_intervals([bare], at(100))) == [(Cause.WASTED_PROGRESS, 0, 100)]


def test_attempts_never_placed_hold_no_time() -> None:
    unplaced = attempt(3, None, None, JobState.UNKNOWN, first=5, last=9, progressed=10)
    assert job_intervals([unplaced], now=at(100)) == []


def test_progress_times_outside_the_attempt_are_clamped_into_it() -> None:
    early = attempt(0, 100, 200, JobState.FAILED, first=0, last=9, saved=9, progressed=50)
    late = attempt(0, 100, 200, JobState.FAILED, job="2", first=0, last=9, saved=9, progressed=300)
    assert spans(job_intervals([early], at(300))) == [(Cause.STALLED, 100, 200)]
    assert spans(job_intervals([late], at(300))) == [(Cause.PRODUCTIVE, 100, 200)]


def test_intervals_groups_attempts_by_job_and_uses_known_job_states() -> None:
    a = attempt(0, 0, 100, JobState.REQUEUED, job="1", first=0, last=9, saved=9, progressed=100)
    b = attempt(0, 0, 100, JobState.REQUEUED, job="2", first=0, last=9, saved=9, progressed=100)
    found = intervals([b, a], now=at(150), job_states={(C, JobId("2")): JobState.CANCELLED})
    assert [(iv.job_id, iv.cause) for iv in found] == [
        ("1", Cause.PRODUCTIVE),
        ("1", Cause.DOWNTIME),
        ("2", Cause.PRODUCTIVE),
    ]


# --- goodput over a window ------------------------------------------------------------------
def test_time_is_weighted_by_nodes() -> None:
    big = attempt(
        0, 0, 3600, JobState.COMPLETED, job="big", nodes=64, first=0, last=9, progressed=3600
    )
    small = attempt(
        0, 0, 3600, JobState.FAILED, job="small", nodes=1, first=0, last=9, progressed=3600
    )
    summary = goodput(intervals([big, small], now=at(3600)), at(0), at(3600))
    assert summary.productive == pytest.approx(64 * 3600)
    assert summary.badput[Cause.WASTED_PROGRESS] == pytest.approx(3600)
    assert summary.ratio == pytest.approx(64 / 65)
    # unweighted, each job counts once
    assert summary.productive_seconds == pytest.approx(3600)
    assert summary.badput_seconds == pytest.approx(3600)
    assert summary.jobs == 2


def test_intervals_are_clipped_to_the_window() -> None:
    # The first attempt started an hour before the window; the downtime spans the window start.
    first = attempt(
        0, -3600, -60, JobState.FAILED, nodes=2, first=0, last=99, saved=99, progressed=-60
    )
    second = attempt(
        1, 60, None, JobState.RUNNING, nodes=2, first=100, last=120, loaded=99, progressed=100
    )
    found = job_intervals([first, second], now=at(300))
    summary = goodput(found, at(0), at(200))
    assert summary.badput[Cause.DOWNTIME] == pytest.approx(2 * 60)
    assert summary.productive == pytest.approx(2 * 140)
    assert summary.badput[Cause.STALLED] == 0
    assert summary.ratio == pytest.approx(140 / 200)
    before = goodput(found, at(-7200), at(-3600))
    assert (before.ratio, before.jobs) == (None, 0)


def test_every_badput_cause_is_reported_even_when_zero() -> None:
    summary = goodput([], at(0), at(60))
    assert list(summary.badput) == list(BADPUT)
    assert all(v == 0 for v in summary.badput.values())
    assert summary.ratio is None


def test_the_series_splits_the_window_into_buckets() -> None:
    ran = attempt(0, 0, 100, JobState.FAILED, first=0, last=99, saved=49, progressed=100)
    again = attempt(1, 150, None, JobState.RUNNING, first=50, last=60, loaded=49, progressed=200)
    found = job_intervals([ran, again], now=at(200))

    series = goodput_series(found, at(0), at(200), 4)

    assert [(b.start, b.end) for b in series] == [(at(i * 50), at(i * 50 + 50)) for i in range(4)]
    assert [b.ratio for b in series] == [1.0, 0.0, 0.0, 1.0]
    assert [b.badput[Cause.DOWNTIME] for b in series] == [0, 0, 50, 0]
    total = goodput(found, at(0), at(200))
    assert sum(b.productive for b in series) == pytest.approx(total.productive)
    assert sum(b.badput_total for b in series) == pytest.approx(total.badput_total)


def test_the_series_handles_buckets_that_do_not_divide_evenly() -> None:
    running = attempt(0, 0, None, JobState.RUNNING, first=0, last=1, progressed=1)
    series = goodput_series(job_intervals([running], at(100)), at(0), at(100), 7)
    assert len(series) == 7 and series[-1].end == at(100)
    assert sum(b.productive for b in series) == pytest.approx(100)
    assert all(b.ratio == 1.0 for b in series)


@pytest.mark.parametrize(("start", "end", "buckets"), [(0, 60, 0), (60, 60, 1), (60, 0, 1)])
def test_bad_windows_are_refused(start: float, end: float, buckets: int) -> None:
    with pytest.raises(ValueError):
        goodput_series([], at(start), at(end), buckets)
