"""Repair steps: quick ones run in the pass, slow ones off it, each audited before and after."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from medic.domain.audit import AuditKind
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import Repair, RepairAction, RepairState, RequesterKind
from medic.errors import PermanentError, TransientError
from medic.repair.steps import Steps

T0 = datetime(2026, 11, 30, tzinfo=UTC)
REPAIR = Repair(
    id=7,
    cluster=ClusterName("c"),
    node=NodeName("n1"),
    action=RepairAction.REPROVISION,
    state=RepairState.EXECUTING,
    requested_by="medic-engine",
    requester_kind=RequesterKind.MEDIC,
    reason="xid 79",
    alert_keys=("xid:79",),
    created_at=T0,
    updated_at=T0,
)

Event = tuple[AuditKind, dict[str, Any]]


def _steps(settle: float = 0.05) -> tuple[Steps, list[Event]]:
    events: list[Event] = []

    def audit(kind: AuditKind, repair: Repair, payload: dict[str, Any], when: datetime) -> None:
        assert repair is REPAIR and when == T0
        events.append((kind, payload))

    return Steps(audit, lambda: T0, settle_seconds=settle), events


def test_a_quick_step_runs_in_the_pass_and_is_audited_before_and_after() -> None:
    steps, events = _steps()
    assert steps.now(REPAIR, "drain", lambda: 42, job="j1") == 42
    assert [k for k, _ in events] == [
        AuditKind.REPAIR_STEP_STARTED,
        AuditKind.REPAIR_STEP_SUCCEEDED,
    ]
    assert events[1][1] == {"repair_id": 7, "step": "drain", "job": "j1", "seconds": 0.0}


def test_a_failing_quick_step_is_audited_and_raised() -> None:
    steps, events = _steps()

    def refuse() -> None:
        raise PermanentError("scontrol: Invalid node name")

    with pytest.raises(PermanentError):
        steps.now(REPAIR, "drain", refuse)
    assert events[-1] == (
        AuditKind.REPAIR_STEP_FAILED,
        {
            "repair_id": 7,
            "step": "drain",
            "error": "scontrol: Invalid node name",
            "permanent": True,
        },
    )


def test_a_slow_step_runs_off_the_pass_and_is_collected_once() -> None:
    steps, events = _steps()
    gate, calls = threading.Event(), []

    def hook() -> str:
        calls.append(1)
        assert gate.wait(timeout=10)
        return "reprovisioned"

    assert steps.poll(REPAIR, "execute", hook) is None, "still running after the settle wait"
    assert steps.running(REPAIR, "execute")
    assert steps.poll(REPAIR, "execute", hook) is None, "polled again: not started twice"
    gate.set()
    finished = None
    for _ in range(200):
        finished = steps.poll(REPAIR, "execute", hook)
        if finished is not None:
            break
        threading.Event().wait(0.01)
    assert finished is not None and finished.result() == "reprovisioned"
    assert calls == [1] and not steps.running(REPAIR, "execute")
    assert [k for k, _ in events] == [
        AuditKind.REPAIR_STEP_STARTED,
        AuditKind.REPAIR_STEP_SUCCEEDED,
    ]


def test_a_quick_step_started_with_poll_finishes_within_the_settle_wait() -> None:
    steps, _ = _steps(settle=5.0)
    finished = steps.poll(REPAIR, "execute", lambda: None)
    assert finished is not None and finished.result() is None


@pytest.mark.parametrize(
    ("error", "recorded", "permanent"),
    [
        pytest.param(TransientError("BMC timeout"), "BMC timeout", False, id="transient"),
        pytest.param(
            PermanentError("no such node in the BMC inventory"),
            "no such node in the BMC inventory",
            True,
            id="permanent",
        ),
        pytest.param(ValueError("bug"), "ValueError: bug", False, id="bug"),
    ],
)
def test_a_failed_slow_step_is_audited_and_raised_when_collected(
    error: Exception, recorded: str, permanent: bool
) -> None:
    steps, events = _steps(settle=5.0)

    def hook() -> None:
        raise error

    finished = steps.poll(REPAIR, "validate", hook)
    assert finished is not None
    with pytest.raises(type(error)) as raised:
        finished.result()
    assert raised.value is error
    assert [k for k, _ in events] == [
        AuditKind.REPAIR_STEP_STARTED,
        AuditKind.REPAIR_STEP_FAILED,
    ]
    assert events[-1][1] == {
        "repair_id": 7,
        "step": "validate",
        "error": recorded,
        "permanent": permanent,
    }
    assert not steps.running(REPAIR, "validate"), "collected once"
