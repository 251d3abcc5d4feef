"""``medic watchdog`` (:class:`FailOpen`) with every other medic process dead: the job the killed
loop held is released with its original excluded nodes once the timeout passed, never before;
observe mode only says it would; a recovery that converged leaves no mark behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medic.control.fail_open import FailOpen
from medic.domain.advice import Reconciliation
from medic.domain.cluster import JobState, Mode
from medic.domain.faults import FaultKind
from medic.domain.holds import read_mark
from medic.domain.ids import JobId, NodeName

from .conftest import Crash, Harness, MakeHarness, RecordingScheduler

TIMEOUT = 120.0
ORIGINAL = frozenset({NodeName("node008")})
"""What the job excluded before medic held it."""


def _held_by_a_dead_medic(h: Harness) -> tuple[JobId, NodeName]:
    """A job excluding ORIGINAL loses a GPU; medic requeue-holds it and excludes the bad node,
    then every medic process dies before the release."""
    blocker = h.submit("blocker", num_nodes=6)  # holds the job pending while ORIGINAL is set
    job = h.submit("train-a")
    h.sim.scheduler.set_excluded_nodes(job, ORIGINAL)
    h.sim.scheduler.cancel(blocker, "test")
    h.run(13)
    bad = h.inject(FaultKind.GPU_FELL_OFF_BUS, job).node
    assert bad is not None
    h.restart(scheduler=RecordingScheduler(h.sim.scheduler, h.clock, crash_after=2))
    with pytest.raises(Crash):
        h.run(5)
    held = h.job(job)
    assert held.held and held.restart_count == 1 and held.excluded_nodes == ORIGINAL | {bad}
    return job, bad


def _dog(h: Harness, journal: Path, mode: Mode = Mode.ACT) -> FailOpen:
    return FailOpen(
        scheduler=h.sim.scheduler,
        clock=h.clock,
        timeout_seconds=TIMEOUT,
        mode=mode,
        journal=journal,
    )


def _journal(path: Path) -> list[str]:
    return [json.loads(line)["what"] for line in path.read_text().splitlines()]


def test_the_watchdog_alone_releases_a_job_a_dead_medic_held(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = make_harness(mode=Mode.ACT)
    job, _ = _held_by_a_dead_medic(h)
    mark = read_mark(h.job(job).admin_comment)
    assert mark is not None and mark.excluded == ORIGINAL and mark.attempt == 0
    dog = _dog(h, tmp_path / "watchdog.jsonl")

    h.clock.advance(TIMEOUT - 10)
    assert dog.check() == [] and h.job(job).held, "not before the timeout"
    h.clock.advance(11)
    assert dog.check() == [job]

    job_now = h.job(job)
    assert not job_now.held and job_now.excluded_nodes == ORIGINAL, "its original constraints"
    assert read_mark(job_now.admin_comment) is None
    assert _journal(tmp_path / "watchdog.jsonl") == ["releasing", "released"]
    h.clock.advance(5)
    assert dog.check() == [], "released once"


def test_observe_mode_only_says_it_would(make_harness: MakeHarness, tmp_path: Path) -> None:
    h = make_harness(mode=Mode.ACT)
    job, bad = _held_by_a_dead_medic(h)
    dog = _dog(h, tmp_path / "watchdog.jsonl", Mode.OBSERVE)
    h.clock.advance(TIMEOUT + 1)
    assert dog.check() == [] and dog.check() == []
    assert h.job(job).held and h.job(job).excluded_nodes == ORIGINAL | {bad}
    assert _journal(tmp_path / "watchdog.jsonl") == ["would-release"]


def test_a_recovery_that_converged_leaves_no_mark(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    h.run(13)
    h.inject(FaultKind.GPU_FELL_OFF_BUS, job)
    h.run(10)
    advice = h.advice(job)
    assert advice is not None and advice.status is Reconciliation.CONVERGED
    assert h.job(job).state is JobState.RUNNING and h.job(job).restart_count == 1
    assert h.job(job).admin_comment is None, "the mark comes off at convergence"
    h.clock.advance(TIMEOUT + 1)
    assert _dog(h, tmp_path / "watchdog.jsonl").check() == []
