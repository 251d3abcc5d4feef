"""A background step whose repair moved on is abandoned, audited; one pass waits once."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from medic.domain.audit import AuditKind
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import Repair, RepairAction, RepairState, RequesterKind
from medic.repair.steps import Steps

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def _repair(repair_id: int) -> Repair:
    return Repair(
        id=repair_id,
        cluster=ClusterName("c"),
        node=NodeName(f"n{repair_id}"),
        action=RepairAction.REPROVISION,
        state=RepairState.EXECUTING,
        requested_by="medic",
        requester_kind=RequesterKind.MEDIC,
        reason="xid 79",
        alert_keys=("xid:79",),
        created_at=T0,
        updated_at=T0,
    )


def test_a_step_nobody_will_collect_is_abandoned_and_audited() -> None:
    events: list[tuple[AuditKind, int, dict[str, Any]]] = []
    steps = Steps(lambda k, r, p, t: events.append((k, r.id, p)), lambda: T0, settle_seconds=0)
    gate = threading.Event()
    for repair_id in (1, 2):
        assert steps.poll(_repair(repair_id), "execute", gate.wait) is None
    steps.abandon(lambda repair_id, step: repair_id == 2)  # repair 1 was taken over
    gate.set()
    assert not steps.running(_repair(1), "execute") and steps.running(_repair(2), "execute")
    kind, repair_id, payload = events[-1]
    assert (kind, repair_id) == (AuditKind.REPAIR_STEP_FAILED, 1)
    assert payload["error"].startswith("abandoned") and payload["step"] == "execute"


def test_one_pass_waits_for_its_new_steps_once_in_all() -> None:
    steps = Steps(lambda *_: None, lambda: T0, settle_seconds=0.3)
    gate = threading.Event()
    steps.begin_pass()
    started = time.monotonic()
    for repair_id in range(1, 6):
        assert steps.poll(_repair(repair_id), "execute", gate.wait) is None
    assert time.monotonic() - started < 1.0, "five slow steps, one settle budget"
    gate.set()
