"""Leases and fenced steps on every engine: take, renew, hand over, release; a step recorded under
a stale fencing token is refused in the transaction that would record it; a fenced finish records
only its own try; concurrent takers of one expired lease make exactly one holder."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta

import pytest

from contract.test_store import T0, C, _race
from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.ids import AdviceId, JobId
from medic.domain.leases import Fence
from medic.errors import ConflictError, FencedError
from medic.store import SqlStore, create_store

_NAMES = itertools.count(1)
TTL = 10.0


def _name() -> str:
    return f"controller/lease-{next(_NAMES)}"


def _step(key: str) -> ActionRecord:
    return ActionRecord(
        key=key,
        cluster=C,
        kind=ActionKind.REQUEUE_HOLD,
        status=ActionStatus.STARTED,
        job_id=JobId("7"),
        node=None,
        advice_id=AdviceId(1),
        started_at=T0,
    )


def test_a_lease_is_taken_renewed_and_handed_over_only_once_it_ran_out(store: SqlStore) -> None:
    name = _name()
    first = store.acquire_lease(name, "a", T0, TTL)
    assert (first.holder, first.token, first.expires_at) == ("a", 1, T0 + timedelta(seconds=TTL))

    later = T0 + timedelta(seconds=4)
    assert store.acquire_lease(name, "b", later, TTL) == first  # live: b gets a's lease back
    renewed = store.acquire_lease(name, "a", later, TTL)
    assert (renewed.token, renewed.acquired_at, renewed.renewed_at) == (1, T0, later)

    expired = later + timedelta(seconds=TTL)
    taken = store.acquire_lease(name, "b", expired, TTL)
    assert (taken.holder, taken.token, taken.acquired_at) == ("b", 2, expired)
    assert store.acquire_lease(name, "a", expired, TTL).holder == "b"
    assert [lease for lease in store.list_leases() if lease.name == name] == [taken]


def test_a_released_lease_is_taken_at_once(store: SqlStore) -> None:
    name = _name()
    store.acquire_lease(name, "a", T0, TTL)
    assert store.release_lease(name, "b", T0) is False  # not b's to give up
    assert store.release_lease(name, "a", T0 + timedelta(seconds=1)) is True
    taken = store.acquire_lease(name, "b", T0 + timedelta(seconds=1), TTL)
    assert (taken.holder, taken.token) == ("b", 2)


def test_a_step_under_a_stale_or_expired_fence_is_refused(store: SqlStore) -> None:
    name = _name()
    store.acquire_lease(name, "a", T0, TTL)
    stale = Fence(name, "a", 1)
    later = T0 + timedelta(seconds=TTL + 1)
    with pytest.raises(FencedError, match="ran out"):
        store.begin_action(replace(_step("fence/expired"), started_at=later), stale)
    store.acquire_lease(name, "b", later, TTL)
    with pytest.raises(FencedError, match="held by b \\(token 2\\)"):
        store.begin_action(replace(_step("fence/stale"), started_at=later), stale)
    assert store.get_action("fence/stale") is None and store.get_action("fence/expired") is None

    fresh = Fence(name, "b", 2)
    assert store.begin_action(replace(_step("fence/ok"), started_at=later), fresh) is True
    begun = store.get_action("fence/ok")
    assert begun is not None and (begun.holder, begun.token) == ("b", 2)


def test_a_fenced_begin_retries_a_failed_step_and_a_fenced_finish_only_its_own_try(
    store: SqlStore,
) -> None:
    name = _name()
    store.acquire_lease(name, "a", T0, TTL)
    a = Fence(name, "a", 1)
    step = _step("fence/retry")
    assert store.begin_action(step, a) is True
    assert store.begin_action(step, a) is False  # started, no outcome: not begun twice
    store.finish_action(step.key, ActionStatus.FAILED, T0, "slurm said no", ("a", 1))
    assert store.begin_action(step, a) is True  # a failed try is begun again
    again = store.get_action(step.key)
    assert again is not None and (again.status, again.error) == (ActionStatus.STARTED, None)

    later = T0 + timedelta(seconds=TTL + 1)
    store.acquire_lease(name, "b", later, TTL)
    # b found a's try in doubt and recorded its outcome; a, waking up, cannot overwrite it
    store.finish_action(step.key, ActionStatus.FAILED, later, "in doubt", ("a", 1))
    with pytest.raises(ConflictError, match="no longer by a"):
        store.finish_action(step.key, ActionStatus.SUCCEEDED, later, None, ("a", 1))
    done = store.get_action(step.key)
    assert done is not None and (done.status, done.error) == (ActionStatus.FAILED, "in doubt")


def test_concurrent_takers_of_an_expired_lease_make_one_holder(store: SqlStore) -> None:
    second = create_store(_raw_url(store))
    try:
        for round_ in range(5):
            name = _name()
            store.acquire_lease(name, "old", T0, TTL)
            later = T0 + timedelta(seconds=TTL + round_ + 1)
            a, b = _race(
                lambda: store.acquire_lease(name, "a", later, TTL),  # noqa: B023
                lambda: second.acquire_lease(name, "b", later, TTL),  # noqa: B023
            )
            assert a == b, "both see the same winner"
            assert a.holder in ("a", "b") and a.token == 2
    finally:
        second.close()


def _raw_url(store: SqlStore) -> str:
    """The store's URL with its password (the test databases have none)."""
    return store.url.replace(":***@", "@")


def test_a_step_and_its_audit_event_are_recorded_together_or_not_at_all(store: SqlStore) -> None:
    name = _name()
    store.acquire_lease(name, "a", T0, TTL)
    fence = Fence(name, "a", 1)

    def event(key: str, kind: AuditKind) -> AuditEvent:
        return AuditEvent(
            time=T0,
            actor="medic-controller",
            kind=kind,
            subject_type=SubjectType.JOB,
            subject_id="7",
            cluster=C,
            payload={"key": key},
        )

    def trail(key: str) -> list[AuditKind]:
        events = store.query_audit(cluster=C, job_id=JobId("7"), limit=10_000)
        return [e.kind for e in events if e.payload.get("key") == key]

    ok = _step("atomic/ok")
    assert store.begin_action(ok, fence, event(ok.key, AuditKind.ACTION_STARTED))
    store.finish_action(
        ok.key,
        ActionStatus.SUCCEEDED,
        T0,
        None,
        ("a", 1),
        event(ok.key, AuditKind.ACTION_SUCCEEDED),
    )
    assert trail(ok.key) == [AuditKind.ACTION_STARTED, AuditKind.ACTION_SUCCEEDED]

    store.acquire_lease(name, "b", T0 + timedelta(seconds=TTL + 1), TTL)
    refused = replace(_step("atomic/refused"), started_at=T0 + timedelta(seconds=TTL + 1))
    with pytest.raises(FencedError):
        store.begin_action(refused, fence, event(refused.key, AuditKind.ACTION_STARTED))
    assert store.get_action(refused.key) is None and trail(refused.key) == []
    with pytest.raises(ConflictError):  # a's try is over: neither its outcome nor its event
        store.finish_action(
            ok.key,
            ActionStatus.FAILED,
            T0,
            "late",
            ("b", 2),
            event(ok.key, AuditKind.ACTION_FAILED),
        )
    assert trail(ok.key) == [AuditKind.ACTION_STARTED, AuditKind.ACTION_SUCCEEDED]
