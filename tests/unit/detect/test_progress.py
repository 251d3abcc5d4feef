"""ProgressTracker: progress of an attempt, hang and straggler findings on synthetic timelines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from medic.config.settings import DetectSettings
from medic.detect.hang import hang_threshold, percentile
from medic.detect.progress import ProgressTracker
from medic.detect.signatures import (
    HANG_SIGNATURE_ID,
    SLOW_JOB_SIGNATURE_ID,
    SLOW_NODE_SIGNATURE_ID,
)
from medic.detect.straggler import ThroughputWatch, find_slow_node, mad
from medic.domain.attempts import Progress
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import JobId, NodeName, SignatureId

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB = JobId("42")
SETTINGS = DetectSettings(hang_k=4.0, hang_floor_seconds=60.0, straggler_seconds=30.0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def progress_detection(
    seconds: float, fields: dict[str, str], node: str | None = "node001"
) -> Detection:
    return Detection(
        job_id=JOB,
        attempt=-1,
        signature_id=SignatureId("test.progress"),
        domain=FaultDomain.NONE,
        role=Role.PROGRESS,
        severity=Severity.INFO,
        action=JobAction.NONE,
        time=at(seconds),
        node=NodeName(node) if node else None,
        fields=fields,
    )


def iteration(seconds: float, step: int, iter_ms: float = 500.0, tokens: float | None = None):
    fields = {"step": str(step), "iter_ms": f"{iter_ms}"}
    if tokens is not None:
        fields["tokens_per_s"] = f"{tokens}"
    return progress_detection(seconds, fields)


def saved(seconds: float, step: int) -> Detection:
    return progress_detection(seconds, {"checkpoint": "saved", "step": str(step)})


def timing(seconds: float, node: str, ms: float, step: int = 1) -> Detection:
    return progress_detection(seconds, {"step": str(step), "compute_ms": f"{ms}"}, node)


def run(tracker: ProgressTracker, detections: list[Detection]) -> ProgressTracker:
    for detection in detections:
        tracker.observe(detection)
    return tracker


# --- progress ------------------------------------------------------------------------------------


def test_progress_of_an_attempt() -> None:
    tracker = run(
        ProgressTracker(JOB, 2),
        [
            progress_detection(0.0, {"checkpoint": "loaded", "step": "30"}),
            progress_detection(0.1, {"world_size": "16"}),
            iteration(1.0, 31),
            iteration(1.5, 32),
            saved(1.6, 40),
            saved(1.7, 35),  # an older checkpoint does not move the newest back
            iteration(2.0, 33),
        ],
    )
    assert tracker.progress() == Progress(
        first_step=31,
        last_step=33,
        last_checkpoint_step=40,
        loaded_checkpoint_step=30,
        last_progress_at=at(2.0),
    )


def test_empty_and_ignored_input() -> None:
    tracker = ProgressTracker()
    assert tracker.progress() == Progress()
    not_progress = Detection(
        job_id=JOB,
        attempt=0,
        signature_id=SignatureId("x"),
        domain=FaultDomain.HARDWARE,
        role=Role.ROOT,
        severity=Severity.ERROR,
        action=JobAction.RESTART,
        time=T0,
        fields={"step": "5"},
    )
    malformed = [
        progress_detection(0.0, {"step": "five", "iter_ms": "x"}),
        progress_detection(0.0, {"checkpoint": "saved", "step": "1e3"}),
        progress_detection(0.0, {"checkpoint": "loaded"}),
        progress_detection(0.0, {"step": "3", "compute_ms": "nan"}),
        progress_detection(0.0, {"step": "3", "compute_ms": "12"}, node=None),
        progress_detection(0.0, {}),
    ]
    run(tracker, [not_progress, *malformed])
    assert tracker.progress() == Progress()
    assert tracker.check_hang(at(10_000), SETTINGS) is None
    assert tracker.check_straggler(at(10_000), SETTINGS) is None


def test_out_of_order_and_repeated_lines_do_not_create_intervals() -> None:
    tracker = run(
        ProgressTracker(),
        [iteration(10.0, 5), iteration(10.0, 6), iteration(9.0, 7), iteration(10.0, 7)],
    )
    assert tracker.progress().last_progress_at == at(10.0)
    assert tracker.progress().first_step == 5
    # Three observations but no strictly later one: the rhythm is still unknown, so only the
    # conservative threshold (twice the floor) applies.
    assert tracker.check_hang(at(10.0 + 120.0), SETTINGS) is None
    found = tracker.check_hang(at(10.0 + 121.0), SETTINGS)
    assert found is not None and found.fields["threshold_s"] == "120.000"


# --- hang ----------------------------------------------------------------------------------------


def steady(tracker: ProgressTracker, count: int, every: float) -> float:
    """``count`` iterations ``every`` seconds apart; returns the time of the last one."""
    for i in range(count):
        tracker.observe(iteration(i * every, i + 1))
    return (count - 1) * every


def test_conservative_threshold_before_three_intervals() -> None:
    tracker = ProgressTracker(JOB, 0)
    last = steady(tracker, 3, 40.0)  # two intervals: threshold max(4 x 40, 2 x floor) = 160 s
    assert tracker.check_hang(at(last + 159.0), SETTINGS) is None
    found = tracker.check_hang(at(last + 161.0), SETTINGS)
    assert found is not None and found.fields["threshold_s"] == "160.000"


def test_no_hang_before_the_first_progress_line() -> None:
    assert ProgressTracker(JOB, 0).check_hang(at(10_000.0), SETTINGS) is None


def test_hang_uses_the_floor_for_a_fast_job() -> None:
    tracker = ProgressTracker(JOB, 3)
    last = steady(tracker, 20, 0.5)
    assert tracker.check_hang(at(last + 60.0), SETTINGS) is None  # not more than the floor
    found = tracker.check_hang(at(last + 60.5), SETTINGS)
    assert found is not None
    assert found.signature_id == HANG_SIGNATURE_ID
    assert (found.role, found.action, found.domain) == (
        Role.ROOT,
        JobAction.RESTART,
        FaultDomain.SYSTEM_SOFTWARE,
    )
    assert found.node is None and not found.implicates_node
    assert (found.job_id, found.attempt, found.time) == (JOB, 3, at(last + 60.5))
    assert found.fields["threshold_s"] == "60.000"
    assert found.fields["silence_s"] == "60.500"
    assert found.fields["last_step"] == "20"
    # Reported once per attempt.
    assert tracker.check_hang(at(last + 500.0), SETTINGS) is None


def test_hang_threshold_scales_with_a_slow_job() -> None:
    tracker = ProgressTracker(JOB, 0)
    last = steady(tracker, 10, 30.0)  # p95 interval 30 s -> threshold 4 x 30 = 120 s
    assert tracker.check_hang(at(last + 119.0), SETTINGS) is None
    found = tracker.check_hang(at(last + 121.0), SETTINGS)
    assert found is not None and found.fields["threshold_s"] == "120.000"


def test_checkpoint_saves_count_as_progress() -> None:
    tracker = ProgressTracker(JOB, 0)
    last = steady(tracker, 10, 1.0)
    tracker.observe(saved(last + 50.0, 10))
    assert tracker.check_hang(at(last + 100.0), SETTINGS) is None


def test_hang_threshold_and_percentile() -> None:
    assert hang_threshold([], SETTINGS) == 120.0
    assert hang_threshold([1.0, 1.0], SETTINGS) == 120.0
    assert hang_threshold([1.0, 2.0, 100.0], SETTINGS) == 400.0
    assert percentile([5.0], 95.0) == 5.0
    assert percentile([float(i) for i in range(1, 101)], 95.0) == 95.0
    assert percentile([3.0, 1.0, 2.0], 50.0) == 2.0


# --- slow job ------------------------------------------------------------------------------------


def feed_iterations(
    tracker: ProgressTracker, start: float, steps: range, iter_ms: float, every: float
) -> float:
    t = start
    for step in steps:
        tracker.observe(iteration(t, step, iter_ms=iter_ms))
        t += every
    return t - every


def test_slow_job_after_the_drop_lasts_long_enough() -> None:
    tracker = ProgressTracker(JOB, 1)
    t = feed_iterations(tracker, 0.0, range(1, 31), 500.0, 0.5)
    assert tracker.check_straggler(at(t), SETTINGS) is None
    # 1.4x slower iterations: throughput drops to 71% of the baseline (below 80%).
    t = feed_iterations(tracker, t + 0.7, range(31, 61), 700.0, 0.7)
    # Smoothing needs three slow samples of five before the median drops; ~20 s so far.
    assert tracker.check_straggler(at(t), SETTINGS) is None
    t = feed_iterations(tracker, t + 0.7, range(61, 81), 700.0, 0.7)
    found = tracker.check_straggler(at(t), SETTINGS)
    assert found is not None
    assert found.signature_id == SLOW_JOB_SIGNATURE_ID
    assert found.node is None and not found.implicates_node
    assert found.action is JobAction.NONE and found.role is Role.ROOT
    assert found.fields["unit"] == "iterations/s"
    assert float(found.fields["baseline"]) == pytest.approx(2.0)
    assert float(found.fields["current"]) == pytest.approx(1000 / 700, rel=1e-4)
    assert float(found.fields["slow_s"]) >= SETTINGS.straggler_seconds
    assert tracker.check_straggler(at(t + 100), SETTINGS) is None  # once per attempt


def test_a_short_dip_resets() -> None:
    tracker = ProgressTracker(JOB, 1)
    t = feed_iterations(tracker, 0.0, range(1, 31), 500.0, 0.5)
    t = feed_iterations(tracker, t + 0.7, range(31, 51), 700.0, 0.7)  # ~14 s slow
    t = feed_iterations(tracker, t + 0.5, range(51, 61), 500.0, 0.5)  # recovered
    t = feed_iterations(tracker, t + 0.7, range(61, 91), 700.0, 0.7)  # ~20 s slow again
    assert tracker.check_straggler(at(t), SETTINGS) is None


def test_slow_job_by_tokens_per_second() -> None:
    tracker = ProgressTracker(JOB, 0)
    t = 0.0
    for step in range(1, 101):
        tokens = 10_000.0 if step <= 30 else 7_000.0
        tracker.observe(iteration(t, step, tokens=tokens))
        t += 1.0
    found = tracker.check_straggler(at(t), SETTINGS)
    assert found is not None and found.fields["unit"] == "tokens/s"


def test_iteration_lines_without_a_usable_metric_are_not_samples() -> None:
    tracker = ProgressTracker(JOB, 0)
    tracker.observe(iteration(0.0, 1, tokens=1000.0))  # the attempt's metric is tokens/s
    for step in range(2, 60):
        tracker.observe(progress_detection(step * 1.0, {"step": str(step), "iter_ms": "x"}))
    assert tracker.progress().last_step == 59
    assert tracker.check_straggler(at(100.0), SETTINGS) is None


def test_slow_job_by_step_rate_when_lines_carry_no_timing() -> None:
    # A framework that prints only "step N | loss x": the rate between lines is the measure.
    tracker = ProgressTracker(JOB, 0)
    t, step = 0.0, 0
    for k in range(80):
        every = 10.0 if k < 30 else 16.0  # 10 steps every 10 s, then every 16 s
        step += 10
        tracker.observe(progress_detection(t, {"step": str(step)}))
        tracker.observe(progress_detection(t, {"step": str(step)}, node="node002"))  # same step
        t += every
    found = tracker.check_straggler(at(t), SETTINGS)
    assert found is not None and found.fields["unit"] == "iterations/s"
    assert float(found.fields["baseline"]) == pytest.approx(1.0)
    assert float(found.fields["current"]) == pytest.approx(10 / 16)


def test_tokens_with_thousands_separators_are_numbers() -> None:
    tracker = ProgressTracker(JOB, 0)
    for step in range(1, 101):
        tokens = "7,512" if step <= 30 else "4,903"
        tracker.observe(progress_detection(step * 1.0, {"step": str(step), "tokens_per_s": tokens}))
    found = tracker.check_straggler(at(101.0), SETTINGS)
    assert found is not None and float(found.fields["baseline"]) == pytest.approx(7512)


@pytest.mark.parametrize(
    ("field", "before", "after", "with_step", "baseline"),
    [
        # flashy's "Train | Epoch 3 | 200/2000 | 1.72 it/sec": the index restarts every epoch.
        ("it_per_s", "2.0", "1.2", False, 2.0),
        # tqdm-loggable's "Progress on:train 1.20k/10.0k rate:3.3s/it": the count is rounded.
        ("iter_s", "0.5", "1.0", False, 2.0),
        ("it_per_s", "4.0", "2.0", True, 4.0),
        ("iter_s", "2.0", "5.0", True, 0.5),
    ],
)
def test_a_rate_field_is_a_throughput_with_or_without_a_step(
    field: str, before: str, after: str, with_step: bool, baseline: float
) -> None:
    tracker = ProgressTracker(JOB, 0)
    for k in range(100):
        fields = {field: before if k < 30 else after}
        if with_step:
            fields["step"] = str(k + 1)
        tracker.observe(progress_detection(k * 30.0, fields))
    # A rate without a step is not progress for hang detection.
    assert tracker.progress().last_step == (100 if with_step else None)
    found = tracker.check_straggler(at(3000.0), SETTINGS)
    assert found is not None and found.fields["unit"] == "iterations/s"
    assert float(found.fields["baseline"]) == pytest.approx(baseline)


def test_throughput_watch_ignores_nonsense() -> None:
    watch = ThroughputWatch()
    watch.add(T0, 0.0)
    watch.add(T0, -5.0)
    assert watch.slow_seconds(0.2) is None
    assert watch.baseline is None


# --- slow node -----------------------------------------------------------------------------------


def feed_timing(tracker: ProgressTracker, per_node: dict[str, float], rounds: int) -> None:
    for step in range(rounds):
        for node, ms in per_node.items():
            tracker.observe(timing(step * 0.5, node, ms + (step % 3), step))


NODES = {"node001": 500.0, "node002": 505.0, "node003": 498.0, "node004": 502.0}


def test_slow_node_named_after_the_duration() -> None:
    tracker = ProgressTracker(JOB, 0)
    feed_timing(tracker, {**NODES, "node003": 700.0}, rounds=10)
    assert tracker.check_straggler(at(100.0), SETTINGS) is None  # the clock starts now
    assert tracker.check_straggler(at(129.0), SETTINGS) is None
    found = tracker.check_straggler(at(130.0), SETTINGS)
    assert found is not None
    assert found.signature_id == SLOW_NODE_SIGNATURE_ID
    assert found.node == "node003" and found.implicates_node
    assert found.action is JobAction.NONE and found.domain is FaultDomain.HARDWARE
    assert float(found.fields["ratio"]) == pytest.approx(1.4, abs=0.02)
    assert tracker.check_straggler(at(200.0), SETTINGS) is None  # once per attempt


def test_recovered_node_restarts_its_clock() -> None:
    tracker = ProgressTracker(JOB, 0)
    feed_timing(tracker, {**NODES, "node003": 700.0}, rounds=10)
    assert tracker.check_straggler(at(100.0), SETTINGS) is None
    feed_timing(tracker, NODES, rounds=20)  # its window is healthy again
    assert tracker.check_straggler(at(120.0), SETTINGS) is None
    feed_timing(tracker, {**NODES, "node003": 700.0}, rounds=20)
    assert tracker.check_straggler(at(140.0), SETTINGS) is None
    assert tracker.check_straggler(at(170.0), SETTINGS) is not None


def test_no_slow_node_below_the_drop_or_with_too_few_samples() -> None:
    tracker = ProgressTracker(JOB, 0)
    feed_timing(tracker, {**NODES, "node003": 590.0}, rounds=10)  # 1.18x: below 20%
    assert tracker.check_straggler(at(0.0), SETTINGS) is None
    assert tracker.check_straggler(at(1000.0), SETTINGS) is None
    few = ProgressTracker(JOB, 0)
    feed_timing(few, {**NODES, "node003": 900.0}, rounds=4)
    assert few.check_straggler(at(0.0), SETTINGS) is None
    assert few.check_straggler(at(1000.0), SETTINGS) is None


def test_slow_node_reported_before_slow_job() -> None:
    tracker = ProgressTracker(JOB, 0)
    feed_timing(tracker, {**NODES, "node003": 700.0}, rounds=10)
    assert tracker.check_straggler(at(0.0), SETTINGS) is None  # the node's clock starts
    t = feed_iterations(tracker, 0.0, range(1, 31), 500.0, 0.5)
    feed_iterations(tracker, t + 0.7, range(31, 101), 700.0, 0.7)
    first = tracker.check_straggler(at(100.0), SETTINGS)
    second = tracker.check_straggler(at(100.0), SETTINGS)
    assert first is not None and first.signature_id == SLOW_NODE_SIGNATURE_ID
    assert second is not None and second.signature_id == SLOW_JOB_SIGNATURE_ID


def test_one_slow_rank_among_eight_on_a_node_is_named() -> None:
    # "[rank R] step N step_time=2.93s fwd_bwd=0.86s": every rank waits for the slowest, so the
    # step times are equal; the compute part shows rank 21's GPU, which a node median would hide.
    tracker = ProgressTracker(JOB, 0)
    for step in range(8):
        for rank in range(32):
            compute = 1.30 if rank == 21 else 0.86 + 0.01 * (rank % 3)
            node = f"node00{rank // 8 + 1}"
            fields = {"step": str(step), "iter_s": "2.93", "compute_s": f"{compute}"}
            tracker.observe(progress_detection(step * 3.0, {**fields, "rank": str(rank)}, node))
    assert tracker.progress().last_step == 7  # the lines are progress too
    found = tracker.check_straggler(at(30.0), SETTINGS, slow_samples=10)
    assert found is not None and found.signature_id == SLOW_NODE_SIGNATURE_ID
    assert found.node == "node003" and found.fields["rank"] == "21"
    assert found.text.startswith("rank 21 on node node003 computes in 1300.0 ms")


def test_a_slow_worker_by_samples_per_second() -> None:
    # MXNet's Speedometer from each worker (an async kvstore: the others do not wait for it).
    tracker = ProgressTracker(JOB, 0)
    for k in range(12):
        for node in NODES:
            rate = 1100.0 if node == "node002" else 2000.0 + 10 * (k % 3)
            tracker.observe(progress_detection(k * 20.0, {"samples_per_s": f"{rate}"}, node))
    assert tracker.check_straggler(at(240.0), SETTINGS) is None  # live: the clock starts now
    found = tracker.check_straggler(at(270.0), SETTINGS)
    assert found is not None and found.node == "node002" and "rank" not in found.fields
    assert float(found.fields["ratio"]) == pytest.approx(2000 / 1100, rel=0.02)
    # The job's rate (the median of the workers' lines) did not fall: no slow job.
    assert tracker.check_straggler(at(270.0), SETTINGS) is None


def test_samples_per_second_is_the_job_throughput_without_a_step() -> None:
    tracker = ProgressTracker(JOB, 0)
    for k in range(40):
        rate = "2000" if k < 20 else "1200"
        tracker.observe(progress_detection(k * 20.0, {"samples_per_s": rate}))
    found = tracker.check_straggler(at(800.0), SETTINGS)
    assert found is not None and found.fields["unit"] == "samples/s"


def test_a_post_mortem_counts_a_slowdown_by_samples_and_a_slow_node_at_once() -> None:
    # Slow for 12 samples of 1 s: shorter than straggler_seconds, but it lasted to the log's end.
    tracker = ProgressTracker(JOB, 0)
    for k in range(30):
        ms = "500" if k < 18 else "800"
        tracker.observe(progress_detection(k * 1.0, {"iter_ms": ms}))
    assert tracker.check_straggler(at(30.0), SETTINGS) is None
    assert tracker.check_straggler(at(30.0), SETTINGS, slow_samples=13) is None
    found = tracker.check_straggler(at(30.0), SETTINGS, slow_samples=12)
    assert found is not None and found.signature_id == SLOW_JOB_SIGNATURE_ID
    # The slow stretch starts at its first slow sample, not when the median fell.
    assert float(found.fields["slow_s"]) == pytest.approx(11.0)
    offline = ProgressTracker(JOB, 0)
    feed_timing(offline, {**NODES, "node003": 700.0}, rounds=10)
    found = offline.check_straggler(at(5.0), SETTINGS, slow_samples=10)
    assert found is not None and found.node == "node003"


def test_find_slow_node_robust_statistics() -> None:
    def n(name: str) -> NodeName:
        return NodeName(name)

    five = [100.0] * 5
    assert find_slow_node({n("a"): five}, 0.2) is None
    two = find_slow_node({n("a"): five, n("b"): [130.0] * 5}, 0.2)
    assert two is not None and two.key == "b" and two.ratio == pytest.approx(1.3)
    # Peers spread widely: a 25% outlier is within their noise, so nobody is named.
    noisy = {n("a"): [60.0] * 5, n("b"): [100.0] * 5, n("c"): [140.0] * 5, n("d"): [175.0] * 5}
    assert find_slow_node(noisy, 0.2) is None
    # Two slow nodes: the slowest is named.
    both = {n("a"): five, n("b"): five, n("c"): [150.0] * 5, n("d"): [180.0] * 5}
    found = find_slow_node(both, 0.2)
    assert found is not None and found.key == "d"
    reverse = {n("a"): five, n("b"): five, n("c"): [180.0] * 5, n("d"): [150.0] * 5}
    found = find_slow_node(reverse, 0.2)
    assert found is not None and found.key == "c"
    zero = find_slow_node({n("a"): [0.001] * 5, n("b"): [0.0] * 5, n("c"): [0.0] * 5}, 0.2)
    assert zero is not None and zero.ratio == float("inf")
    assert mad([1.0, 2.0, 3.0, 10.0], 2.5) == 1.0


# --- next_check_at: when a quiet job falls due again ------------------------------------------
def test_nothing_is_due_before_the_first_progress_line() -> None:
    assert ProgressTracker().next_check_at(SETTINGS) is None


def test_the_hang_check_falls_due_at_the_threshold_after_the_last_progress() -> None:
    tracker = ProgressTracker()
    for i in range(10):
        tracker.observe(iteration(i * 1.0, i + 1))
    due = tracker.next_check_at(SETTINGS)
    assert due == at(9.0) + timedelta(seconds=60.0)  # the floor: a 1 s rhythm is far below it
    assert tracker.check_hang(due, SETTINGS) is None  # at the threshold: not yet
    assert tracker.check_hang(due + timedelta(seconds=0.2), SETTINGS) is not None
    assert tracker.next_check_at(SETTINGS) is None  # reported once: nothing more is due


def test_a_slow_node_is_due_when_its_window_ends() -> None:
    tracker = ProgressTracker()
    for step in range(1, 9):
        for node in ("n1", "n2", "n3"):
            tracker.observe(timing(step * 1.0, node, 900.0 if node == "n3" else 600.0, step))
    assert tracker.check_straggler(at(10.0), SETTINGS) is None  # the window starts
    assert tracker.next_check_at(SETTINGS) == at(10.0) + timedelta(seconds=30.0)
    found = tracker.check_straggler(at(40.0), SETTINGS)
    assert found is not None and found.signature_id == SLOW_NODE_SIGNATURE_ID
