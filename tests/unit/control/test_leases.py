"""Repair leases (who works on a repair, in the store) and the step record an engine that takes a
repair over reads back from the audit trail."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import Repair, RepairAction, RepairState, RequesterKind
from medic.errors import ConflictError, StoreError
from medic.repair.leases import LEASE_SECONDS, RENEW_SECONDS, Leases
from medic.repair.steps import RECOVERED, StepOutcome, read_record
from medic.testing import FakeClock

T0 = datetime(2026, 12, 7, tzinfo=UTC)
S = RepairState


def _repair(**kw: Any) -> Repair:
    fields: dict[str, Any] = {
        "id": 7,
        "cluster": ClusterName("c"),
        "node": NodeName("n1"),
        "action": RepairAction.REBOOT,
        "state": S.EXECUTING,
        "requested_by": "medic",
        "requester_kind": RequesterKind.MEDIC,
        "reason": "xid 79",
        "alert_keys": ("xid:79",),
        "created_at": T0,
        "updated_at": T0,
    }
    return Repair(**{**fields, **kw})


class _Store:
    """``claim_repair`` as the store contract has it, on one repair in memory."""

    def __init__(self, repair: Repair) -> None:
        self.repair = repair
        self.claims = 0
        self.down = False

    def claim_repair(
        self, repair_id: int, state: RepairState, owner: str, now: datetime, until: datetime
    ) -> Repair:
        self.claims += 1
        if self.down:
            raise StoreError("database is locked")
        r = self.repair
        free = r.owner in (None, owner) or r.lease_until is None or r.lease_until <= now
        if r.state is not state or not free:
            raise ConflictError(f"repair {repair_id} is held by {r.owner}")
        self.repair = replace(r, owner=owner, lease_until=until)
        return self.repair


def _leases(store: _Store, clock: FakeClock, owner: str) -> tuple[Leases, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []

    def audit(kind: AuditKind, repair: Repair, payload: dict[str, Any], when: datetime) -> None:
        assert kind is AuditKind.REPAIR_TAKEN_OVER
        events.append(payload)

    return Leases(store, clock.now, audit, owner=owner), events


def test_a_live_lease_is_respected_and_an_expired_one_taken_over_and_audited() -> None:
    clock = FakeClock(T0)
    lease_end = T0 + timedelta(seconds=LEASE_SECONDS)
    store = _Store(_repair(owner="a", lease_until=lease_end))
    b, events = _leases(store, clock, "b")

    clock.advance(LEASE_SECONDS - 1)
    assert not b.owns(store.repair), "its engine may still be working"
    assert store.claims == 0, "a lease the repair shows running is not even tried"
    clock.advance(1)
    assert b.owns(store.repair) and store.repair.owner == "b"
    assert [(e["previous_owner"], e["owner"], e["state"]) for e in events] == [
        ("a", "b", "executing")
    ]
    assert events[0]["lease_ended"] == lease_end.isoformat()
    assert b.owns(store.repair) and store.claims == 1, "held: no second claim"


def test_a_stale_read_loses_to_the_owner_that_renewed() -> None:
    clock = FakeClock(T0)
    store = _Store(_repair(owner="a", lease_until=T0 + timedelta(seconds=5)))
    b, events = _leases(store, clock, "b")
    stale = store.repair
    store.repair = replace(stale, lease_until=T0 + timedelta(seconds=60))  # "a" renewed since
    clock.advance(10)
    assert not b.owns(stale) and events == []


def test_the_owner_renews_on_its_cadence_and_gives_up_a_lease_taken_from_it() -> None:
    clock = FakeClock(T0)
    store = _Store(_repair())
    a, _ = _leases(store, clock, "a")
    assert a.owns(store.repair)  # nobody held it
    assert store.claims == 1
    clock.advance(RENEW_SECONDS - 1)
    a.renew([store.repair])
    assert store.claims == 1, "not due yet"
    clock.advance(1)
    a.renew([store.repair])
    assert store.claims == 2 and store.repair.lease_until == clock.now() + timedelta(
        seconds=LEASE_SECONDS
    )

    store.down = True  # the store does not answer: the lease runs out by itself
    clock.advance(RENEW_SECONDS)
    a.renew([store.repair])
    assert a.holds(7)
    clock.advance(LEASE_SECONDS)
    assert not a.holds(7) and not a.owns(store.repair), "nor taken again while it is down"

    store.down = False
    store.repair = replace(store.repair, owner="b", lease_until=clock.now() + timedelta(hours=1))
    a._held[7] = clock.now() + timedelta(seconds=1)  # it still believes it holds it
    a.renew([store.repair])
    assert not a.holds(7), "taken by another engine while this one stalled: given up"


def test_a_finished_or_unleased_repair_is_forgotten() -> None:
    clock = FakeClock(T0)
    store = _Store(_repair())
    a, _ = _leases(store, clock, "a")
    a.moved(replace(store.repair, owner="a", lease_until=T0 + timedelta(seconds=30)))
    assert a.holds(7)
    a.moved(replace(store.repair, state=S.DONE, owner="a", lease_until=T0))
    assert not a.holds(7)
    a.moved(replace(store.repair, state=S.WAITING_FOR_IDLE, owner="a", lease_until=T0))
    a.renew([replace(store.repair, state=S.WAITING_FOR_IDLE)])  # no owner-only work there
    assert not a.holds(7) and store.claims == 0


# --- the step record --------------------------------------------------------------------------


class _Trail:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def add(self, kind: AuditKind, seconds: float, **payload: Any) -> None:
        event = AuditEvent(
            time=T0 + timedelta(seconds=seconds),
            actor="medic-engine",
            kind=kind,
            subject_type=SubjectType.NODE,
            subject_id="n1",
            cluster="c",
            payload={"repair_id": 7, "step": "execute", **payload},
        )
        self.events.append(replace(event, id=len(self.events) + 1))

    def query_audit(self, *, after_id: int | None = None, limit: int = 100, **_: Any) -> list[Any]:
        after = after_id or 0
        return [e for e in self.events if (e.id or 0) > after][:limit]


STARTED, SUCCEEDED, FAILED = (
    AuditKind.REPAIR_STEP_STARTED,
    AuditKind.REPAIR_STEP_SUCCEEDED,
    AuditKind.REPAIR_STEP_FAILED,
)


@pytest.mark.parametrize(
    ("events", "outcome"),
    [
        ([], StepOutcome.NOT_STARTED),
        ([(STARTED, {})], StepOutcome.IN_DOUBT),
        ([(STARTED, {}), (SUCCEEDED, {})], StepOutcome.SUCCEEDED),
        ([(STARTED, {}), (FAILED, {"permanent": False, "error": "BMC"})], StepOutcome.FAILED),
        ([(STARTED, {}), (FAILED, {"permanent": True, "error": "no"})], StepOutcome.REFUSED),
        ([(STARTED, {}), (FAILED, {"permanent": False, "abandoned": True})], StepOutcome.IN_DOUBT),
        ([(STARTED, {}), (FAILED, {"permanent": False}), (STARTED, {})], StepOutcome.IN_DOUBT),
        ([(STARTED, {"step": "drain"})], StepOutcome.NOT_STARTED),  # another step
        ([(STARTED, {"repair_id": 6})], StepOutcome.NOT_STARTED),  # another repair's
    ],
)
def test_the_step_record(
    events: list[tuple[AuditKind, dict[str, Any]]], outcome: StepOutcome
) -> None:
    trail = _Trail()
    for seconds, (kind, payload) in enumerate(events):
        trail.add(kind, seconds, **payload)
    assert read_record(trail, _repair(), "execute").outcome is outcome


def test_the_step_record_pages_and_counts_recoveries() -> None:
    trail = _Trail()
    for i in range(600):  # more than a page of the node's events
        trail.add(AuditKind.ALERT_FIRING, i * 0.001)
    trail.add(STARTED, 1)
    trail.add(STARTED, 2, **{RECOVERED: "in doubt: issued again"})
    trail.add(FAILED, 3, permanent=True, error="hook exited 2")
    record = read_record(trail, _repair(), "execute")
    assert (record.outcome, record.recoveries, record.error) == (
        StepOutcome.REFUSED,
        1,
        "hook exited 2",
    )
    assert record.started_at == T0 + timedelta(seconds=2)
