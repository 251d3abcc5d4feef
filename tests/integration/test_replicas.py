"""Replicas of the control loop on one store: exactly one acts, another takes over when it dies
or stalls, and a stalled one never issues a step on waking.

Each replica is a :class:`ControlLoop` with its own lease keepers (its own holder and monotonic
clock) on the harness's store and simulated cluster, passes interleaved as two processes' would
be. The multi-process version (SIGKILL, SIGSTOP of real ``medic serve`` processes on PostgreSQL
and MariaDB) is ``tests/slurm/e2e/test_replicas_e2e.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from medic.config.settings import Acting, ControllerSettings
from medic.control.leases import LeaseKeeper
from medic.control.loop import ControlLoop
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.actions import ActionStatus
from medic.domain.advice import Reconciliation
from medic.domain.audit import AuditKind
from medic.domain.cluster import Mode
from medic.domain.faults import FaultKind
from medic.domain.ids import JobId
from medic.domain.leases import controller_lease, loop_lease
from medic.ports import Scheduler
from medic.telemetry.metrics import NullMetrics

from .conftest import CLUSTER, Crash, Harness, MakeHarness, RecordingScheduler

REQUEUE = ["requeue_hold", "set_excluded_nodes", "release"]
TTL = 8.0
WARM_UP = 13.0


@dataclass
class Replica:
    """One medic process: its loop, and the monotonic clock its lease keepers read."""

    name: str
    h: Harness
    scheduler: Scheduler
    loop: ControlLoop = field(init=False)
    keepers: list[LeaseKeeper] = field(init=False)

    def __post_init__(self) -> None:
        base = self.h.clock.now()

        def monotonic() -> float:
            # a stopped process's monotonic clock runs on: it follows the harness's
            return (self.h.clock.now() - base).total_seconds()

        self.keepers = [
            LeaseKeeper(
                self.h.store,
                name,
                clock=self.h.clock,
                ttl_seconds=TTL,
                holder=self.name,
                monotonic=monotonic,
            )
            for name in (loop_lease(CLUSTER), controller_lease(CLUSTER))
        ]
        self.loop = ControlLoop(
            scheduler=self.scheduler,
            logs=self.h.logs,
            store=self.h.store,
            modes=self.h.store,
            diagnoser=SignatureDiagnoser(),
            clock=self.h.clock,
            metrics=NullMetrics(),
            settings=self.h.settings,
            lease=self.keepers[0],
            controller_lease=self.keepers[1],
        )


def _run(h: Harness, replicas: list[Replica], seconds: float, step: float = 0.2) -> None:
    """Advance virtual time, each live replica running one pass per step."""
    for _ in range(round(seconds / step)):
        h.clock.advance(step)
        for replica in replicas:
            replica.loop.run_once()


def _converged(h: Harness, job: JobId) -> bool:
    advice = h.advice(job)
    return advice is not None and advice.status is Reconciliation.CONVERGED


def _faulty_job(h: Harness, replicas: list[Replica]) -> tuple[JobId, str]:
    job = h.submit("train-a")
    _run(h, replicas, WARM_UP)
    node = h.inject(FaultKind.GPU_FELL_OFF_BUS, job).node
    assert node is not None
    return job, node


def test_two_replicas_recover_a_job_once(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT)
    a, b = Replica("a", h, h.scheduler), Replica("b", h, h.scheduler)
    job, bad = _faulty_job(h, [a, b])
    _run(h, [a, b], 10)

    assert _converged(h, job)
    assert h.scheduler.names(job) == REQUEUE, "exactly one requeue"
    assert bad in h.job(job).excluded_nodes
    holders = {lease.name: lease.holder for lease in h.store.list_leases()}
    assert holders == {loop_lease(CLUSTER): "a", controller_lease(CLUSTER): "a"}
    assert {r.token for r in h.actions(job) if r.node is None} == {1}
    assert b.loop.last_report is not None and b.loop.last_report.jobs == 0, "b stood by"


@pytest.mark.parametrize("crash_after", [1, 2])
def test_a_replica_killed_mid_recovery_is_finished_by_the_other_within_the_lease(
    make_harness: MakeHarness, crash_after: int
) -> None:
    h = make_harness(mode=Mode.ACT)
    dying = RecordingScheduler(h.sim.scheduler, h.clock, crash_after=crash_after)
    a, b = Replica("a", h, dying), Replica("b", h, h.scheduler)
    job, _ = _faulty_job(h, [a, b])
    with pytest.raises(Crash):
        _run(h, [a, b], 5)
    killed_at = h.clock.now()

    _run(h, [b], 2 * TTL)  # a is dead: b alone

    assert _converged(h, job)
    assert dying.names(job) + h.scheduler.names(job) == REQUEUE, "nothing repeated or lost"
    took_over = next(
        e.time for e in h.audit(job, AuditKind.ACTION_SUCCEEDED) if e.payload.get("token") == 2
    )
    assert (took_over - killed_at).total_seconds() <= TTL + 1, "failover within the lease"
    records = [r for r in h.actions(job) if r.node is None]
    assert {r.status for r in records} == {ActionStatus.SUCCEEDED}
    assert h.audit(job, AuditKind.ACTION_SKIPPED) == []
    # the step a issued and never recorded: b found its outcome in the scheduler
    recovered = [e for e in h.audit(job, AuditKind.ACTION_SUCCEEDED) if e.payload.get("recovered")]
    assert [e.action for e in recovered] == [["requeue_hold", "exclude_nodes"][crash_after - 1]]


def test_a_stalled_replica_never_issues_a_step_on_waking(make_harness: MakeHarness) -> None:
    """SIGSTOP between recording a step and issuing it: another replica takes the lease over and
    carries the recovery out; the stalled one, woken, finds its deadline passed and issues
    nothing (its try is recorded as not issued, and the store refuses its stale token)."""
    h = make_harness(mode=Mode.ACT)
    a_scheduler = RecordingScheduler(h.sim.scheduler, h.clock)
    a, b = Replica("a", h, a_scheduler), Replica("b", h, h.scheduler)
    job, _ = _faulty_job(h, [a, b])

    stalled = {"done": False}
    original = h.store.begin_action

    def begin_then_stall(record, fence=None, event=None):  # type: ignore[no-untyped-def]
        begun = original(record, fence, event)
        if fence is not None and fence.holder == "a" and not stalled["done"]:
            stalled["done"] = True
            # a is stopped right here for two leases; b runs meanwhile
            _run(h, [b], 2 * TTL)
        return begun

    h.store.begin_action = begin_then_stall  # type: ignore[method-assign]
    try:
        _run(h, [a, b], 3)
    finally:
        del h.store.begin_action  # type: ignore[method-assign]
    _run(h, [a, b], 5)

    assert stalled["done"]
    assert a_scheduler.names(job) == [], "the stalled replica issued nothing"
    assert h.scheduler.names(job) == REQUEUE
    assert _converged(h, job)
    refused = [
        e
        for e in h.audit(job, AuditKind.ACTION_FAILED)
        if "lease ran out before it was issued" in str(e.payload.get("error"))
    ]
    assert len(refused) == 1 and refused[0].payload["token"] == 1


def test_with_remote_controllers_the_loop_publishes_advice_and_never_acts(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(mode=Mode.ACT)
    h.settings = replace(h.settings, controller=ControllerSettings(acting=Acting.REMOTE))
    a = Replica("a", h, h.scheduler)
    job, bad = _faulty_job(h, [a])
    _run(h, [a], 10)

    advice = h.advice(job)
    assert advice is not None and advice.exclude_nodes == frozenset({bad})
    assert advice.status is Reconciliation.PENDING, "left to a remote controller"
    assert h.scheduler.names(job) == []
    leases = {lease.name: lease.holder for lease in h.store.list_leases()}
    assert leases == {loop_lease(CLUSTER): "a"}, "the controller lease is a remote's to take"
