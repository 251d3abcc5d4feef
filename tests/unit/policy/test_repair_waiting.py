"""Wait-for-idle (deadline, modes, interrupted jobs) and node health / placement exclusions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    AlertState,
    NodeHealth,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairState,
    RequesterKind,
    WaitMode,
)
from medic.repair.rules.waiting import (
    critical_alert_nodes,
    deadline,
    job_placement_exclusions,
    node_health,
    wait_decision,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTER = ClusterName("c1")
N1 = NodeName("n1")
S = RepairState


def _repair(
    state: RepairState = S.WAITING_FOR_IDLE,
    *,
    id: int = 1,
    action: RepairAction = RepairAction.REBOOT,
    approved_at: datetime | None = T0,
    wait_deadline: datetime | None = None,
    updated: datetime = T0,
) -> Repair:
    return Repair(
        id=id,
        cluster=CLUSTER,
        node=N1,
        action=action,
        state=state,
        requested_by="medic",
        requester_kind=RequesterKind.MEDIC,
        reason="test",
        alert_keys=("xid:79",),
        created_at=T0,
        updated_at=updated,
        approved_at=approved_at,
        wait_deadline=wait_deadline,
    )


def _job(id: str, state: JobState = JobState.RUNNING) -> Job:
    return Job(JobId(id), CLUSTER, f"job-{id}", state, "p0", nodes=(N1,))


@pytest.mark.parametrize(
    ("mode", "max_wait", "expected"),
    [
        (WaitMode.IDLE, 7200.0, T0 + timedelta(hours=2)),
        (WaitMode.IDLE, 172_800.0, T0 + timedelta(hours=24)),  # capped at 24 h
        (WaitMode.IDLE, 86_400.0, T0 + timedelta(hours=24)),
        (WaitMode.IDLE, 0.0, T0),
        (WaitMode.CHECKPOINT, 3600.0, T0 + timedelta(hours=1)),
        (WaitMode.NEVER_INTERRUPT, 7200.0, None),
    ],
)
def test_deadline(mode: WaitMode, max_wait: float, expected: datetime | None) -> None:
    policy = RepairPolicy(wait_mode=mode, max_wait_seconds=max_wait)
    assert deadline(T0, policy) == expected
    assert deadline(None, policy) is None


IDLE, NEVER, CKPT = WaitMode.IDLE, WaitMode.NEVER_INTERRUPT, WaitMode.CHECKPOINT
RUNNING = [_job("1"), _job("2", JobState.COMPLETING)]
FINISHED = [_job("3", JobState.COMPLETED), _job("4", JobState.PENDING), _job("5", JobState.FAILED)]


@pytest.mark.parametrize(
    ("mode", "jobs", "after", "checkpointed", "proceed", "timed_out", "interrupted", "rule"),
    [
        (IDLE, [], 0, False, True, False, (), "idle"),
        (IDLE, FINISHED, 0, False, True, False, (), "idle"),  # finished/pending jobs don't hold
        (IDLE, RUNNING, 7199, False, False, False, (), "wait-for-idle"),
        (IDLE, RUNNING, 7200, False, True, True, ("1", "2"), "wait-timeout"),  # edge included
        (IDLE, RUNNING, 7200, True, True, True, ("1", "2"), "wait-timeout"),  # idle mode ignores it
        (NEVER, RUNNING, 10**6, False, False, False, (), "wait-for-idle"),  # never times out
        (NEVER, [], 0, False, True, False, (), "idle"),
        (CKPT, RUNNING, 60, True, True, False, ("1", "2"), "checkpoint-saved"),
        (CKPT, RUNNING, 60, False, False, False, (), "wait-for-idle"),
        (CKPT, RUNNING, 7200, False, True, True, ("1", "2"), "wait-timeout"),  # hung job
        (CKPT, [], 0, False, True, False, (), "idle"),
        (IDLE, [_job("9", JobState.UNKNOWN)], 0, False, False, False, (), "wait-for-idle"),
    ],
)
def test_wait_decision(
    mode: WaitMode,
    jobs: list[Job],
    after: int,
    checkpointed: bool,
    proceed: bool,
    timed_out: bool,
    interrupted: tuple[str, ...],
    rule: str,
) -> None:
    policy = RepairPolicy(wait_mode=mode, max_wait_seconds=7200.0)
    decision = wait_decision(
        _repair(),
        jobs,
        policy,
        T0 + timedelta(seconds=after),
        managed_job_checkpointed=checkpointed,
    )
    assert (decision.proceed, decision.timed_out, decision.interrupted_jobs) == (
        proceed,
        timed_out,
        interrupted,
    )
    assert decision.rule == rule and decision.reason


def test_the_stored_wait_deadline_wins() -> None:
    repair = _repair(wait_deadline=T0 + timedelta(minutes=5))
    decision = wait_decision(repair, RUNNING, RepairPolicy(), T0 + timedelta(minutes=5))
    assert decision.proceed and decision.timed_out


def test_without_an_approval_time_the_wait_never_times_out() -> None:
    decision = wait_decision(
        _repair(approved_at=None), RUNNING, RepairPolicy(), T0 + timedelta(days=9)
    )
    assert not decision.proceed


def _alert(node: str, severity: Severity, state: AlertState = AlertState.FIRING) -> Alert:
    return Alert(
        cluster=CLUSTER,
        node=NodeName(node),
        key="xid:79",
        source=AlertSource.SIGNATURE,
        summary="x",
        description="x",
        severity=severity,
        state=state,
    )


FIRING_WARN = [_alert("n1", Severity.WARNING)]
RESOLVED = [_alert("n1", Severity.CRITICAL, AlertState.RESOLVED)]


@pytest.mark.parametrize(
    ("alerts", "repairs", "validation_failed", "expected"),
    [
        ([], [], False, NodeHealth.HEALTHY),
        (RESOLVED, [], False, NodeHealth.HEALTHY),
        (FIRING_WARN, [], False, NodeHealth.DEGRADED),
        (FIRING_WARN, [_repair(S.PENDING_APPROVAL)], False, NodeHealth.DEGRADED),
        (FIRING_WARN, [_repair(S.APPROVED)], False, NodeHealth.UNDER_REPAIR),
        ([], [_repair(S.EXECUTING)], False, NodeHealth.UNDER_REPAIR),
        ([], [_repair(S.DONE)], False, NodeHealth.HEALTHY),
        ([], [_repair(S.DONE)], True, NodeHealth.OUT_OF_SERVICE),
        ([], [_repair(S.EXECUTING)], True, NodeHealth.OUT_OF_SERVICE),
        ([], [_repair(S.DONE, action=RepairAction.REMOVE)], False, NodeHealth.OUT_OF_SERVICE),
        (
            [],
            [
                _repair(S.DONE, action=RepairAction.REMOVE),
                _repair(S.DONE, id=2, updated=T0 + timedelta(days=3)),  # repaired since
            ],
            False,
            NodeHealth.HEALTHY,
        ),
    ],
)
def test_node_health(
    alerts: list[Alert], repairs: list[Repair], validation_failed: bool, expected: NodeHealth
) -> None:
    assert node_health(alerts, repairs, validation_failed) is expected


def test_job_placement_exclusions() -> None:
    health = {
        NodeName("n1"): NodeHealth.HEALTHY,
        NodeName("n2"): NodeHealth.DEGRADED,
        NodeName("n3"): NodeHealth.DEGRADED,
        NodeName("n4"): NodeHealth.UNDER_REPAIR,
        NodeName("n5"): NodeHealth.OUT_OF_SERVICE,
    }
    alerts = [
        _alert("n2", Severity.WARNING),
        _alert("n3", Severity.CRITICAL),
        _alert("n1", Severity.CRITICAL, AlertState.RESOLVED),
    ]
    critical = critical_alert_nodes(alerts)
    assert critical == {NodeName("n3")}
    assert job_placement_exclusions(health, critical) == {"n3", "n4", "n5"}
