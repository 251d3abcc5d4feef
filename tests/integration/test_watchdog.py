"""Integration tests of the fail-open watchdog of the remote controller.

A controller is killed (a :class:`~.conftest.Crash`) right after it put a job on hold, or after it
also changed the job's excluded nodes; later controller passes, driven in virtual time, must
release the job with the excluded nodes it had before medic touched it once
``watchdog_timeout_seconds`` (120 s) passed without convergence, even with the API down, and audit
that once the API answers again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from api.auth_kit import grant
from medic.config.settings import ControllerSettings
from medic.control.journal import Journal
from medic.control.watchdog import Watchdog
from medic.domain.advice import Advice, AdviceAction, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.auth import Role
from medic.domain.cluster import JobState, Mode
from medic.domain.faults import FaultKind
from medic.domain.ids import AdviceId, JobId, NodeName
from medic.errors import ConfigError, TransientError

from .conftest import CLUSTER, Crash, Harness, MakeHarness, RecordingScheduler
from .test_remote_controller import CONTROLLER, MakeRemote, Remote, advance, publish

ORIGINAL = frozenset({NodeName("node001")})
"""Excluded at submission, before medic touched the job."""
TIMEOUT = 120.0
WATCHDOG = "medic-watchdog"
"""The watchdog's component name: its events are written as its controller's token, with this
in the payload."""


def held_job(remote: Remote, *, crash_after: int = 2) -> tuple[JobId, NodeName, Advice]:
    """A job submitted with ``ORIGINAL`` excluded loses a GPU; the controller requeue-holds it
    (and with ``crash_after=2`` also excludes the bad node), then is killed before releasing."""
    h = remote.h
    blocker = h.submit("blocker", num_nodes=6)  # fills p0 so the job waits, and can be changed
    job = h.submit("train-a")
    h.sim.scheduler.set_excluded_nodes(job, ORIGINAL)
    h.sim.scheduler.cancel(blocker, "test")
    advance(h, 13)
    running = h.job(job)
    assert running.state is JobState.RUNNING and not set(running.nodes) & ORIGINAL
    bad = h.inject(FaultKind.GPU_FELL_OFF_BUS, job).node
    assert bad is not None
    advance(h, 1)
    advice = publish(h, job, AdviceAction.REQUEUE, frozenset({bad}))
    with pytest.raises(Crash):
        remote.run(remote.proxy(crash_after=crash_after))
    state = h.job(job)
    assert state.held and state.restart_count == 1
    expected = ORIGINAL | {bad} if crash_after == 2 else ORIGINAL
    assert state.excluded_nodes == expected
    [hold] = remote.journal_data()["holds"]
    assert hold["original_excluded"] == sorted(ORIGINAL)
    return job, bad, advice


def watchdog_events(h: Harness, job: JobId) -> list[AuditEvent]:
    return [
        e
        for e in h.audit(job)
        if e.actor == f"controller:{CONTROLLER}" and e.payload.get("component") == WATCHDOG
    ]


@pytest.fixture
def remote(make_harness: MakeHarness, tmp_path: Path) -> Iterator[Remote]:
    maker = MakeRemote(make_harness, tmp_path)
    yield maker()
    maker.close()


# --- the fail-open release ----------------------------------------------------------------------
@pytest.mark.parametrize("crash_after", [1, 2], ids=["after-hold", "after-exclude"])
def test_held_job_is_released_with_its_original_exclusions_while_the_api_is_down(
    remote: Remote, crash_after: int
) -> None:
    h = remote.h
    job, _, advice = held_job(remote, crash_after=crash_after)
    remote.api.stop()
    scheduler = remote.proxy()

    for _ in range(11):  # 110 s of virtual time, API unreachable: still waiting
        advance(h, 10)
        remote.run(scheduler)
    assert scheduler.calls == []
    assert h.job(job).held

    advance(h, 11)
    remote.run(scheduler)

    expected = ["release"] if crash_after == 1 else ["set_excluded_nodes", "release"]
    assert scheduler.names() == expected
    if crash_after == 2:
        assert scheduler.calls[0].args[1] == ORIGINAL
    state = h.job(job)
    assert not state.held
    assert state.excluded_nodes == ORIGINAL
    data = remote.journal_data()
    assert data["holds"] == []
    [record] = data["history"]
    assert record["what"] == "released" and record["job_id"] == job
    queued = [item.get("kind", item["type"]) for item in data["outbox"]]
    assert queued == ["action-started", "action-succeeded", "reconciliation", "reconciliation"]
    assert watchdog_events(h, job) == []  # nothing reached the server yet

    remote.run(scheduler, passes=3)  # still down: nothing issued twice, nothing lost
    assert scheduler.names() == expected
    assert len(remote.journal_data()["outbox"]) == 4

    remote.restart_api()
    remote.run(scheduler)

    assert remote.journal_data()["outbox"] == []
    events = watchdog_events(h, job)
    kinds = [e.kind for e in events]
    assert kinds == [
        AuditKind.ACTION_STARTED,
        AuditKind.ACTION_SUCCEEDED,
        AuditKind.RECONCILIATION,
    ]
    for event in events:
        assert event.mode is Mode.ACT
        assert event.action == "release"
        assert event.payload["original_excluded_nodes"] == sorted(ORIGINAL)
        assert event.payload["key"] == f"watchdog/{advice.id}/g{advice.generation}/release"
        assert "occurred_at" in event.payload
    assert events[-1].payload["status"] == "abandoned"
    stored = h.store.get_advice(advice.id)
    assert stored is not None
    assert stored.status is Reconciliation.ABANDONED
    assert stored.observed_generation == advice.generation
    # the controller left the abandoned plan alone: no exclusion of the bad node afterwards
    remote.run(scheduler, passes=2)
    assert scheduler.names() == expected
    assert h.job(job).excluded_nodes == ORIGINAL


def test_release_is_retried_when_the_scheduler_refuses_it(remote: Remote) -> None:
    h = remote.h
    job, _, _ = held_job(remote)

    class Busy(RecordingScheduler):
        failures = 1

        def release(self, job_id: JobId) -> None:
            if self.failures:
                self.failures -= 1
                raise TransientError("slurmctld busy (test)")
            super().release(job_id)

    scheduler = Busy(h.sim.scheduler, h.clock)
    remote.api.stop()  # only the watchdog acts
    advance(h, TIMEOUT + 1)
    remote.run(scheduler)
    assert h.job(job).held
    advance(h, 1)
    remote.run(scheduler)

    assert not h.job(job).held
    remote.restart_api()
    remote.run(scheduler)
    assert h.job(job).excluded_nodes == ORIGINAL
    kinds = [e.kind for e in watchdog_events(h, job)]
    assert kinds == [
        AuditKind.ACTION_STARTED,
        AuditKind.ACTION_FAILED,
        AuditKind.ACTION_SUCCEEDED,
        AuditKind.RECONCILIATION,
    ]


# --- when the watchdog must not act -------------------------------------------------------------
def test_converged_advice_clears_the_journal(remote: Remote) -> None:
    h = remote.h
    job, bad, advice = held_job(remote)
    assert len(remote.journal_data()["holds"]) == 1

    # a new controller finishes the requeue, once the killed one's lease ran out
    advance(h, ControllerSettings().lease_seconds + 1)
    remote.run(remote.proxy())

    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.CONVERGED
    assert remote.journal_data()["holds"] == []
    advance(h, TIMEOUT * 2)
    scheduler = remote.proxy()
    remote.run(scheduler)
    assert scheduler.calls == []
    assert h.job(job).excluded_nodes == ORIGINAL | {bad}
    assert watchdog_events(h, job) == []


def test_converged_advice_drops_a_job_that_is_still_held(remote: Remote) -> None:
    """Convergence reported by someone else while the job shows held again (a user's hold)."""
    h = remote.h
    job, _, advice = held_job(remote)
    h.store.report_reconciliation(
        advice.id, advice.generation, Reconciliation.CONVERGED, "test", h.clock.now()
    )
    advance(h, TIMEOUT + 1)
    scheduler = remote.proxy()
    remote.run(scheduler)

    assert scheduler.calls == []
    assert h.job(job).held
    assert remote.journal_data()["holds"] == []


def test_a_job_released_by_someone_else_is_forgotten(remote: Remote) -> None:
    h = remote.h
    job, _, _ = held_job(remote)
    remote.api.stop()
    h.sim.scheduler.release(job)
    advance(h, 1)
    scheduler = remote.proxy()
    remote.run(scheduler)

    assert remote.journal_data()["holds"] == []
    advance(h, TIMEOUT * 2)
    remote.run(scheduler)
    assert scheduler.calls == []
    assert remote.journal_data()["history"] == []


def test_observe_mode_records_what_it_would_do_without_acting(remote: Remote) -> None:
    h = remote.h
    job, bad, _ = held_job(remote)
    scheduler = remote.proxy()
    advance(h, TIMEOUT + 1)

    remote.run(scheduler, mode=Mode.OBSERVE, passes=3)

    assert scheduler.calls == []
    state = h.job(job)
    assert state.held and state.excluded_nodes == ORIGINAL | {bad}
    data = remote.journal_data()
    [hold] = data["holds"]
    assert hold["observed"] is True
    assert [r["what"] for r in data["history"]] == ["would-release"]
    [event] = watchdog_events(h, job)
    assert event.kind is AuditKind.ACTION_SKIPPED
    assert event.mode is Mode.OBSERVE
    assert "observe mode" in event.payload["reason"]

    # switched to act mode with the control plane gone, the journal it kept releases the job
    remote.api.stop()
    remote.run(scheduler, mode=Mode.ACT)
    assert scheduler.names() == ["set_excluded_nodes", "release"]
    assert h.job(job).excluded_nodes == ORIGINAL


# --- the watchdog alone, with a scripted control plane -----------------------------------------
class ScriptedApi:
    """Answers ``get_advice`` from a dict and records what the watchdog sends."""

    def __init__(self) -> None:
        self.advice: dict[int, Advice] = {}
        self.events: list[AuditEvent] = []
        self.reports: list[tuple[int, int, Reconciliation]] = []

    def get_advice(self, advice_id: AdviceId) -> Advice | None:
        return self.advice.get(advice_id)

    def append_audit(self, event: AuditEvent) -> int:
        self.events.append(event)
        return len(self.events)

    def report_reconciliation(
        self,
        advice_id: AdviceId,
        observed_generation: int,
        status: Reconciliation,
        reason: str,
        now: datetime,
    ) -> Advice:
        self.reports.append((advice_id, observed_generation, status))
        return self.advice[advice_id]


def test_a_new_generation_of_advice_restarts_the_wait(remote: Remote, tmp_path: Path) -> None:
    h = remote.h
    job, bad, advice = held_job(remote)
    api = ScriptedApi()
    api.advice[advice.id] = advice
    scheduler = remote.proxy()
    with Journal.open(remote.journal) as journal:
        dog = Watchdog(
            scheduler=scheduler,
            api=api,
            journal=journal,
            clock=h.clock,
            timeout_seconds=TIMEOUT,
            mode=Mode.ACT,
        )
        advance(h, 100)
        newer = publish(h, job, AdviceAction.REQUEUE, frozenset({bad, NodeName("node006")}))
        assert newer.generation == advice.generation + 1
        api.advice[advice.id] = newer
        dog.check()
        advance(h, 100)  # 200 s after the hold, 100 s after the new decision
        dog.check()
        assert scheduler.calls == []
        advance(h, 21)
        dog.check()
        assert scheduler.names() == ["set_excluded_nodes", "release"]
        assert dog.is_released(newer) and not dog.is_released(advice)
        assert dog.flush()
    assert api.reports == [(advice.id, newer.generation, Reconciliation.ABANDONED)]
    assert [e.kind for e in api.events][-1] is AuditKind.RECONCILIATION


# --- the journal -------------------------------------------------------------------------------
def test_a_corrupt_journal_stops_the_controller(tmp_path: Path) -> None:
    path = tmp_path / "journal-t.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a valid controller journal"), Journal.open(path):
        pass


def test_journal_writes_are_atomic_and_survive_a_reopen(remote: Remote) -> None:
    held_job(remote)
    before = remote.journal.read_text(encoding="utf-8")
    assert json.loads(before)["version"] == 1
    assert not remote.journal.with_name(remote.journal.name + ".tmp").exists()
    with Journal.open(remote.journal) as journal:
        [hold] = journal.holds()
    assert hold.original_excluded == ORIGINAL
    assert hold.cluster == CLUSTER
    assert remote.journal.read_text(encoding="utf-8") == before


def test_the_watchdog_releases_a_held_job_while_its_token_is_refused(remote: Remote) -> None:
    h = remote.h
    job, _, advice = held_job(remote, crash_after=1)
    h.store.revoke_token(CONTROLLER, h.clock.now())  # every API call now answers 401
    scheduler = remote.proxy()

    advance(h, TIMEOUT + 1)
    remote.run(scheduler)

    assert scheduler.names() == ["release"], "fail-open does not depend on the API"
    assert not h.job(job).held and h.job(job).excluded_nodes == ORIGINAL
    assert len(remote.journal_data()["outbox"]) == 4, "kept, not dropped as undeliverable"
    assert watchdog_events(h, job) == []

    remote.token = grant(h.store, Role.CONTROLLER, CONTROLLER)  # a new token, same identity
    remote.run(scheduler)

    assert remote.journal_data()["outbox"] == []
    assert [e.kind for e in watchdog_events(h, job)] == [
        AuditKind.ACTION_STARTED,
        AuditKind.ACTION_SUCCEEDED,
        AuditKind.RECONCILIATION,
    ]
    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.ABANDONED
