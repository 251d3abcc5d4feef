"""The pieces that let a pass cost what changed: when a watch is quiet, and progress saved once a
pass (``ProgressTracker.next_check_at`` is tested beside the tracker)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from medic.control.progress_writes import SAVE_SECONDS, ProgressWriteFailed, ProgressWrites
from medic.control.watch import JobWatch
from medic.domain.attempts import Progress
from medic.domain.cluster import Job, JobState, Mode
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _progress(seconds: float, fields: dict[str, str]) -> Detection:
    return Detection(
        job_id=JobId("7"),
        attempt=-1,
        signature_id=SignatureId("test.progress"),
        domain=FaultDomain.NONE,
        role=Role.PROGRESS,
        severity=Severity.INFO,
        action=JobAction.NONE,
        time=at(seconds),
        node=NodeName("node001"),
        fields=fields,
    )


def iteration(seconds: float, step: int) -> Detection:
    return _progress(seconds, {"step": str(step), "iter_ms": "500.0"})


def saved(seconds: float, step: int) -> Detection:
    return _progress(seconds, {"checkpoint": "saved", "step": str(step)})


# --- JobWatch.quiet --------------------------------------------------------------------------
def _job(**kw: Any) -> Job:
    base = Job(
        id=JobId("7"),
        cluster=ClusterName("c"),
        name="train",
        state=JobState.RUNNING,
        partition="p0",
        nodes=(NodeName("n1"),),
    )
    return replace(base, **kw)


def _watch(job: Job) -> JobWatch:
    watch = JobWatch(job_id=job.id, attempt=0, mode=Mode.OBSERVE, started=True)
    watch.seen_job = job
    return watch


@pytest.mark.parametrize(
    ("change", "quiet"),
    [
        ({}, True),
        ({"first_fatal_at": at(1.0)}, False),  # failing: its settle time runs
        ({"ended_at": at(1.0)}, False),  # ended badly: its verdict is pending
        ({"retry_after": at(100.0)}, False),  # backing off
        ({"next_due": at(5.0)}, False),  # a time-driven check is due
        ({"next_due": at(50.0)}, True),
        ({"straggler_seen": True}, False),  # a straggler waits for its advice
        ({"straggler_seen": True, "exclusion_advised": True}, True),
        ({"first_fatal_at": at(1.0), "decided": True}, True),  # decided: nothing more to do
    ],
)
def test_a_watch_is_quiet_only_when_nothing_can_be_pending(
    change: dict[str, Any], quiet: bool
) -> None:
    job = _job()
    watch = _watch(job)
    for name, value in change.items():
        setattr(watch, name, value)
    assert watch.quiet(job, at(10.0)) is quiet


def test_a_changed_job_or_a_new_attempt_is_never_quiet() -> None:
    job = _job()
    watch = _watch(job)
    assert not watch.quiet(replace(job, state=JobState.COMPLETING), at(10.0))
    assert not watch.quiet(replace(job, restart_count=1), at(10.0))
    assert not watch.quiet(replace(job, held=True), at(10.0))


# --- ProgressWrites --------------------------------------------------------------------------
class _Store:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[list[tuple[JobId, int, Progress]]] = []

    def update_progress_many(self, cluster: ClusterName, updates: Any) -> None:
        if self.fail:
            raise RuntimeError("db down (test)")
        self.calls.append(list(updates))


def _progressing(job_id: str, steps: int) -> JobWatch:
    watch = JobWatch(job_id=JobId(job_id), attempt=0, mode=Mode.OBSERVE)
    for i in range(steps):
        watch.tracker.observe(iteration(i * 1.0, i + 1))
    return watch


def test_saves_of_a_pass_are_one_write_and_the_watches_learn_what_was_saved() -> None:
    store = _Store()
    writes = ProgressWrites(ClusterName("c"), store)  # type: ignore[arg-type]
    watches = [_progressing(str(i), 3) for i in range(5)]
    for watch in watches:
        writes.offer(watch, at(3.0))
    writes.flush()
    assert len(store.calls) == 1 and [u[0] for u in store.calls[0]] == ["0", "1", "2", "3", "4"]
    assert all(w.saved_progress.last_step == 3 and w.saved_progress_at == at(3.0) for w in watches)
    writes.flush()
    assert len(store.calls) == 1  # nothing queued: no statement


def test_a_plain_step_waits_for_its_age_and_a_checkpoint_does_not() -> None:
    store = _Store()
    writes = ProgressWrites(ClusterName("c"), store)  # type: ignore[arg-type]
    watch = _progressing("1", 3)
    writes.offer(watch, at(3.0))
    writes.flush()
    watch.tracker.observe(iteration(4.0, 4))
    writes.offer(watch, at(4.0))
    writes.flush()
    assert len(store.calls) == 1  # a newer step only: waits
    assert writes.due_at(watch) == at(3.0) + timedelta(seconds=SAVE_SECONDS)
    watch.tracker.observe(saved(4.5, 4))
    writes.offer(watch, at(4.5))
    writes.flush()
    assert len(store.calls) == 2  # a checkpoint: at once
    assert writes.due_at(watch) is None


def test_a_failed_write_names_its_jobs_and_leaves_the_watches_to_offer_again() -> None:
    store = _Store(fail=True)
    writes = ProgressWrites(ClusterName("c"), store)  # type: ignore[arg-type]
    watch = _progressing("9", 2)
    writes.offer(watch, at(2.0))
    with pytest.raises(ProgressWriteFailed) as failed:
        writes.flush()
    assert failed.value.jobs == ("9",)
    assert watch.saved_progress == Progress() and watch.saved_progress_at is None
    store.fail = False
    writes.offer(watch, at(2.2))
    writes.flush()
    assert store.calls[0][0][2].last_step == 2


def test_a_failed_batch_is_written_with_the_next_and_a_held_job_waits() -> None:
    store = _Store(fail=True)
    writes = ProgressWrites(ClusterName("c"), store)  # type: ignore[arg-type]
    ended, running = _progressing("1", 2), _progressing("2", 3)
    writes.offer(ended, at(2.0), force=True)  # an attempt that is over offers it only once
    with pytest.raises(ProgressWriteFailed):
        writes.flush()
    store.fail = False
    writes.offer(running, at(3.0))
    writes.flush(held={JobId("2")})  # job 2 backs off: its save waits
    assert [[u[0] for u in call] for call in store.calls] == [["1"]]
    writes.flush()
    assert [[u[0] for u in call] for call in store.calls] == [["1"], ["2"]]
