"""Contract tests of ``medic.ports.RepairStore`` on ``SqlStore``, run on every database engine.

Same engines as ``test_store.py`` (whose helpers this module reuses): SQLite always, PostgreSQL
and MariaDB/MySQL when ``MEDIC_TEST_POSTGRES_URL`` / ``MEDIC_TEST_MYSQL_URL`` name a disposable
database. For speed the schema is reset once per engine and module (every medic table, the
repair tables of revision ``0002`` included, and ``alembic_version`` dropped, then migrated from
scratch); between tests the repair tables are emptied and the schema brought back to the head
revision (the migration test leaves it at ``0001``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from contract.test_store import ENGINES, T0, _drop_everything, _race
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    AlertState,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RepairUpdate,
    RequesterKind,
    ValidationOutcome,
    ValidationResult,
    WaitMode,
)
from medic.errors import ConflictError, InputError, NotFoundError
from medic.ports import RepairStore
from medic.store import SqlStore, create_store
from medic.store.engine import migrations_config, upgrade_schema
from medic.store.tables import metadata, repair_policies

pytestmark = pytest.mark.db

C = ClusterName("alpha")
B = ClusterName("beta")
S = RepairState
REPAIR_TABLES = {"alerts", "repairs", "repair_policies", "breakers", "validations"}


@pytest.fixture(scope="module", params=ENGINES)
def fresh_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database emptied of medic's schema, once per engine for the whole module."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('repairs') / 'medic.db'}"
    url = os.environ[request.param]
    _drop_everything(url)
    return url


@pytest.fixture
def db_url(fresh_url: str) -> str:
    """The module's database at the head revision with empty repair tables."""
    engine = sa.create_engine(fresh_url)
    try:
        upgrade_schema(engine)
        with engine.begin() as conn:
            for table in reversed(metadata.sorted_tables):  # children (validations) first
                if table.name in REPAIR_TABLES:
                    conn.execute(table.delete())
    finally:
        engine.dispose()
    return fresh_url


@pytest.fixture
def store(db_url: str) -> Iterator[SqlStore]:
    opened = create_store(db_url)
    yield opened
    opened.close()


@pytest.fixture
def two_stores(db_url: str, store: SqlStore) -> Iterator[tuple[SqlStore, SqlStore]]:
    other = create_store(db_url)  # its own engine and connections
    yield store, other
    other.close()


def _alert(node: str = "n1", key: str = "xid:79", **kw: Any) -> Alert:
    fields: dict[str, Any] = {
        "cluster": C,
        "node": NodeName(node),
        "key": key,
        "source": AlertSource.SIGNATURE,
        "summary": f"Xid 79 on {node}",
        "description": "GPU has fallen off the bus ✗",
        "severity": Severity.CRITICAL,
        "evidence": {"xid": 79, "mnemonic": "GPU_FELL_OFF_BUS", "pci": ["0000:3b:00"]},
        "detector": "medic",
        "mapped_action": RepairAction.REBOOT,
        "xid": 79,
    }
    return Alert(**{**fields, **kw})


def _request(node: str = "n1", **kw: Any) -> RepairRequest:
    fields: dict[str, Any] = {
        "cluster": C,
        "node": NodeName(node),
        "action": RepairAction.REBOOT,
        "requested_by": "medic",
        "requester_kind": RequesterKind.MEDIC,
        "reason": f"xid 79 on {node}",
        "alert_keys": ("xid:79",),
    }
    return RepairRequest(**{**fields, **kw})


def _at(seconds: float) -> Any:
    return T0 + timedelta(seconds=seconds)


def _or_conflict(work: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        try:
            return work()
        except ConflictError:
            return "conflict"

    return run


@contextmanager
def _slow_reads(table: str) -> Iterator[None]:
    """Pause after every read of ``table``, so both racers read before either writes."""

    def pause(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and f"FROM {table} " in statement:
            time.sleep(0.05)

    sa.event.listen(sa.Engine, "after_cursor_execute", pause)
    try:
        yield
    finally:
        sa.event.remove(sa.Engine, "after_cursor_execute", pause)


# --- alerts --------------------------------------------------------------------------------
def test_is_a_repair_store(store: SqlStore) -> None:
    typed: RepairStore = store  # mypy checks SqlStore against the protocol here
    assert typed is store


def test_alert_dedupe_count_and_refire(store: SqlStore) -> None:
    first = store.upsert_alert(_alert(), T0)
    assert first.id is not None
    assert first == replace(
        _alert(), id=first.id, first_seen=T0, firing_since=T0, last_seen=T0, count=1
    )
    assert first.evidence == _alert().evidence  # evidence is not part of ==
    assert first.first_seen is not None and first.first_seen.tzinfo is not None

    again = store.upsert_alert(_alert(summary="Xid 79 again", evidence={"xid": 79}), _at(5))
    assert (again.id, again.count, again.first_seen, again.last_seen) == (first.id, 2, T0, _at(5))
    assert again.firing_since == T0, "still the same firing episode"
    assert (again.summary, again.evidence) == ("Xid 79 again", {"xid": 79})  # latest wins

    resolved = store.resolve_alert(first.id, _at(6))
    assert resolved == replace(again, state=AlertState.RESOLVED)
    assert store.resolve_alert(first.id, _at(7)) == resolved  # resolving twice is harmless

    refired = store.upsert_alert(_alert(), _at(9))
    assert (refired.id, refired.state, refired.count) == (first.id, AlertState.FIRING, 3)
    assert (refired.first_seen, refired.last_seen) == (T0, _at(9))
    assert refired.firing_since == _at(9), "it cleared and came back: a new episode"

    # Another node, key or cluster is another alert.
    others = [
        store.upsert_alert(_alert("n2"), T0),
        store.upsert_alert(_alert(key="xid:48", xid=48), T0),
        store.upsert_alert(replace(_alert(), cluster=B), T0),
    ]
    assert len({first.id, *(a.id for a in others)}) == 4
    assert all(a.count == 1 for a in others)
    assert store.list_alerts() == [refired, *others]
    with pytest.raises(NotFoundError):
        store.resolve_alert(first.id + 1000, T0)


def test_list_alerts_filters_and_unmapped(store: SqlStore) -> None:
    agent = _alert(
        "n2",
        "agent:thermal",
        source=AlertSource.AGENT,
        detector="agent",
        severity=Severity.WARNING,
        mapped_action=None,
        xid=None,
        evidence={},
    )
    slurm = _alert("n3", "slurm:drain", source=AlertSource.SCHEDULER, mapped_action=None)
    byod = _alert("n1", "detector:hc:nvlink", source=AlertSource.DETECTOR, detector="hc")
    stored = [store.upsert_alert(a, T0) for a in (_alert(), agent, slurm, byod)]
    other = store.upsert_alert(replace(agent, cluster=B), T0)
    store.resolve_alert(stored[2].id or 0, _at(1))
    stored[2] = replace(stored[2], state=AlertState.RESOLVED)

    assert stored[1].mapped_action is None and stored[1].xid is None
    assert store.list_alerts(cluster=C) == stored
    assert store.list_alerts(cluster=C, node=NodeName("n1")) == [stored[0], stored[3]]
    assert store.list_alerts(cluster=C, unmapped_only=True) == [stored[1], stored[2]]
    assert store.list_alerts(unmapped_only=True, state=AlertState.FIRING) == [stored[1], other]
    assert store.list_alerts(state=AlertState.RESOLVED) == [stored[2]]
    assert store.list_alerts(cluster=ClusterName("gamma")) == []


# --- repairs -------------------------------------------------------------------------------
def test_repair_round_trip_and_update_fields(store: SqlStore) -> None:
    request = _request(
        requested_by="hc",
        requester_kind=RequesterKind.DETECTOR,
        alert_keys=("xid:79", "detector:hc:gpu"),
        request_id="req-1",
        xid=79,
        evidence={"peak_temp_c": 93.5, "checks": ["gpu", "nvlink"], "nested": {"a": None}},
    )
    repair, created = store.create_repair(
        request, state=S.APPROVED, now=T0, approved_by="auto", rule="auto:xid:79"
    )
    assert created is True
    assert repair == Repair(
        id=repair.id,
        cluster=C,
        node=NodeName("n1"),
        action=RepairAction.REBOOT,
        state=S.APPROVED,
        requested_by="hc",
        requester_kind=RequesterKind.DETECTOR,
        reason="xid 79 on n1",
        alert_keys=("xid:79", "detector:hc:gpu"),
        created_at=T0,
        updated_at=T0,
        request_id="req-1",
        xid=79,
        approved_by="auto",
        rule="auto:xid:79",
        approved_at=T0,
    )
    assert repair.evidence == request.evidence
    assert store.get_repair(repair.id) == repair
    assert store.get_repair(repair.id + 1000) is None

    update = RepairUpdate(
        action=RepairAction.REPROVISION,
        approved_by="alice",
        rule="manual",
        approved_at=_at(1),
        wait_deadline=_at(7200),
        interrupted_jobs=("101", "102"),
        escalated_from=RepairAction.REBOOT,
        boot_id="6c3f-boot",
        error="first reboot did not clear it",
    )
    cordoned = store.transition_repair(repair.id, S.APPROVED, S.CORDONED, _at(2), update)
    assert cordoned == replace(
        repair,
        state=S.CORDONED,
        updated_at=_at(2),
        action=RepairAction.REPROVISION,
        approved_by="alice",
        rule="manual",
        approved_at=_at(1),
        wait_deadline=_at(7200),
        interrupted_jobs=("101", "102"),
        escalated_from=RepairAction.REBOOT,
        boot_id="6c3f-boot",
        error="first reboot did not clear it",
    )
    # No update, or one with only some fields: everything else is left as it was.
    draining = store.transition_repair(repair.id, S.CORDONED, S.DRAINING, _at(3))
    assert draining == replace(cordoned, state=S.DRAINING, updated_at=_at(3))
    executing = store.transition_repair(
        repair.id, S.DRAINING, S.EXECUTING, _at(4), RepairUpdate(boot_id="next")
    )
    assert executing == replace(draining, state=S.EXECUTING, updated_at=_at(4), boot_id="next")
    assert store.get_repair(repair.id) == executing
    assert executing.evidence == request.evidence


def test_pending_repair_has_no_approval(store: SqlStore) -> None:
    repair, _ = store.create_repair(_request(), state=S.PENDING_APPROVAL, now=T0)
    assert (repair.approved_by, repair.rule, repair.approved_at) == (None, None, None)
    assert (repair.request_id, repair.interrupted_jobs, repair.escalated_from) == (None, (), None)


def test_create_repair_is_idempotent_on_requester_and_request_id(store: SqlStore) -> None:
    request = _request(requested_by="hc", requester_kind=RequesterKind.DETECTOR, request_id="r1")
    first, created = store.create_repair(request, state=S.PENDING_APPROVAL, now=T0)
    assert created is True
    # A repeat, even with other content or a later time, returns the stored repair.
    repeat = replace(request, node=NodeName("n9"), reason="again")
    assert store.create_repair(repeat, state=S.APPROVED, now=_at(5)) == (first, False)

    # The key is (cluster, requested_by, request_id): change any part and it is a new repair.
    for other in (
        replace(request, requested_by="other-detector"),
        replace(request, request_id="r2"),
        replace(request, cluster=B),
    ):
        assert store.create_repair(other, state=S.PENDING_APPROVAL, now=T0)[1] is True

    # Finished repairs keep their key.
    store.transition_repair(first.id, S.PENDING_APPROVAL, S.CANCELLED, _at(1))
    again, created = store.create_repair(request, state=S.PENDING_APPROVAL, now=_at(2))
    assert (again.id, again.state, created) == (first.id, S.CANCELLED, False)
    assert store.find_repair(request.cluster, "hc", "r1") == again
    assert store.find_repair(request.cluster, "hc", "r404") is None
    assert (
        store.find_repair(B, "hc", "r1") is not None and store.find_repair(B, "hc", "r1") != again
    )

    # Without a request id there is no key: NULLs never collide.
    plain = [store.create_repair(_request(), state=S.PENDING_APPROVAL, now=T0) for _ in range(3)]
    assert [created for _, created in plain] == [True, True, True]
    assert len({repair.id for repair, _ in plain}) == 3
    assert len(store.list_repairs()) == 7


def test_transition_is_compare_and_set(store: SqlStore) -> None:
    repair, _ = store.create_repair(_request(), state=S.PENDING_APPROVAL, now=T0)
    approved = store.transition_repair(repair.id, S.PENDING_APPROVAL, S.APPROVED, _at(1))
    assert (approved.state, approved.created_at, approved.updated_at) == (S.APPROVED, T0, _at(1))

    # Stale expectation: ConflictError and nothing changes.
    with pytest.raises(ConflictError, match="approved"):
        store.transition_repair(
            repair.id, S.PENDING_APPROVAL, S.REJECTED, _at(2), RepairUpdate(error="late")
        )
    assert store.get_repair(repair.id) == approved
    with pytest.raises(NotFoundError):
        store.transition_repair(repair.id + 1000, S.APPROVED, S.CORDONED, _at(2))

    path = [S.CORDONED, S.WAITING_FOR_IDLE, S.DRAINING, S.EXECUTING, S.REJOINING]
    path += [S.VALIDATING, S.DONE]
    current = approved
    for step, new in enumerate(path, start=3):
        current = store.transition_repair(repair.id, current.state, new, _at(step))
    assert (current.state, current.updated_at) == (S.DONE, _at(9))
    assert store.get_repair(repair.id) == current


def test_a_lease_is_taken_renewed_and_taken_over_by_compare_and_set(store: SqlStore) -> None:
    repair, _ = store.create_repair(_request(), state=S.APPROVED, now=T0, approved_by="auto")
    assert (repair.owner, repair.lease_until) == (None, None)
    update = RepairUpdate(owner="engine-a", lease_until=_at(31))
    cordoned = store.transition_repair(repair.id, S.APPROVED, S.CORDONED, _at(1), update)
    assert (cordoned.owner, cordoned.lease_until) == ("engine-a", _at(31))

    # another engine cannot take a lease that still runs; its owner renews it
    with pytest.raises(ConflictError, match="held by engine-a until"):
        store.claim_repair(repair.id, S.CORDONED, "engine-b", _at(30), _at(60))
    renewed = store.claim_repair(repair.id, S.CORDONED, "engine-a", _at(10), _at(40))
    assert (renewed.owner, renewed.lease_until, renewed.updated_at) == ("engine-a", _at(40), _at(1))
    # a repair that left the state is not claimed, whoever asks
    with pytest.raises(ConflictError, match="not draining"):
        store.claim_repair(repair.id, S.DRAINING, "engine-a", _at(11), _at(41))
    # the lease ran out (its engine stopped): taken over, exactly at the end included
    taken = store.claim_repair(repair.id, S.CORDONED, "engine-b", _at(40), _at(70))
    assert (taken.owner, taken.lease_until, taken.state) == ("engine-b", _at(70), S.CORDONED)
    assert store.get_repair(repair.id) == taken
    with pytest.raises(NotFoundError):
        store.claim_repair(repair.id + 1000, S.CORDONED, "engine-b", _at(41), _at(71))


def test_racing_claims_on_an_expired_lease_one_wins(
    two_stores: tuple[SqlStore, SqlStore],
) -> None:
    a, b = two_stores
    for round_ in range(4):
        repair, _ = a.create_repair(_request(f"n{round_}"), state=S.APPROVED, now=T0)
        update = RepairUpdate(owner="gone", lease_until=_at(1))
        a.transition_repair(repair.id, S.APPROVED, S.CORDONED, _at(0), update)
        first = partial(a.claim_repair, repair.id, S.CORDONED, "engine-a", _at(5), _at(35))
        second = partial(b.claim_repair, repair.id, S.CORDONED, "engine-b", _at(5), _at(35))
        results = _race(_or_conflict(first), _or_conflict(second))
        assert results.count("conflict") == 1
        (winner,) = [r for r in results if r != "conflict"]
        assert b.get_repair(repair.id) == winner and winner.owner in ("engine-a", "engine-b")


@pytest.mark.parametrize(
    ("expected", "new"),
    [
        (S.PENDING_APPROVAL, S.EXECUTING),  # skips approval
        (S.EXECUTING, S.CANCELLED),  # too late to cancel
        (S.DONE, S.FAILED),  # terminal
        (S.APPROVED, S.APPROVED),  # not a transition
    ],
)
def test_disallowed_transition_is_an_input_error(
    store: SqlStore, expected: RepairState, new: RepairState
) -> None:
    repair, _ = store.create_repair(_request(), state=expected, now=T0)
    with pytest.raises(InputError, match="not allowed"):
        store.transition_repair(repair.id, expected, new, _at(1))
    assert store.get_repair(repair.id) == repair


def test_list_repairs_filters_oldest_first(store: SqlStore) -> None:
    def create(node: str, state: RepairState, at: float, cluster: ClusterName = C) -> Repair:
        request = replace(_request(node), cluster=cluster)
        return store.create_repair(request, state=state, now=_at(at))[0]

    # Inserted out of time order: the list follows created_at, not the id.
    late = create("n1", S.PENDING_APPROVAL, 30)
    early = create("n1", S.DONE, 10)
    middle = create("n2", S.EXECUTING, 20)
    other = create("n1", S.APPROVED, 15, B)

    assert store.list_repairs() == [early, other, middle, late]
    assert store.list_repairs(cluster=C) == [early, middle, late]
    assert store.list_repairs(cluster=C, node=NodeName("n1")) == [early, late]
    active = frozenset(s for s in RepairState if s.is_active)
    assert store.list_repairs(states=active) == [other, middle]
    assert store.list_repairs(cluster=C, states=frozenset({S.DONE, S.PENDING_APPROVAL})) == [
        early,
        late,
    ]
    assert store.list_repairs(states=frozenset()) == []
    assert store.list_repairs(since=_at(20)) == [middle, late]  # created at or after
    assert store.list_repairs(node=NodeName("n2"), since=_at(20) + timedelta(microseconds=1)) == []


# --- policy, breaker, validations ----------------------------------------------------------
def test_repair_policy_default_and_round_trip(store: SqlStore, db_url: str) -> None:
    assert store.get_repair_policy(C) == RepairPolicy()
    policy = RepairPolicy(
        auto_actions=frozenset({RepairAction.RESET_GPU, RepairAction.REBOOT}),
        auto_xids=frozenset({79, 48, 154}),
        wait_mode=WaitMode.CHECKPOINT,
        max_wait_seconds=86_400.0,
        cooldown_seconds=0.5,
        persistence_seconds=120.25,
        persistence_overrides={"xid:79": 0.0, "agent:thermal": 900.5},
        max_concurrent_fraction=0.125,
        breaker_fraction=0.3,
        breaker_window_seconds=3600.0,
        detector_cap_per_hour=7,
        validate_after=frozenset({RepairAction.MIGRATE, RepairAction.REPROVISION}),
        trusted_detectors=frozenset({"nvsentinel", "dcgm:health"}),
        trust_scheduler_requests=True,
    )
    store.put_repair_policy(C, policy)
    assert store.get_repair_policy(C) == policy
    assert store.get_repair_policy(B) == RepairPolicy()
    empty = RepairPolicy(validate_after=frozenset(), wait_mode=WaitMode.NEVER_INTERRUPT)
    store.put_repair_policy(C, empty)  # replaces the stored one
    assert store.get_repair_policy(C) == empty

    # A document written before a field existed: the missing fields take their defaults.
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            row = {"cluster": B, "policy": {"auto_xids": [79]}, "updated_at": T0}
            conn.execute(sa.insert(repair_policies).values(row))
    finally:
        engine.dispose()
    assert store.get_repair_policy(B) == RepairPolicy(auto_xids=frozenset({79}))


def test_breaker_round_trip_and_compare_and_set(store: SqlStore) -> None:
    assert store.get_breaker(C) == Breaker(C)
    tripped = Breaker(C, tripped=True, tripped_at=T0, reason="6 of 40 nodes in 10 min")
    assert store.set_breaker(tripped, expected_tripped=False) == tripped
    assert store.get_breaker(C) == tripped
    assert store.get_breaker(B) == Breaker(B)

    with pytest.raises(ConflictError):
        store.set_breaker(replace(tripped, reason="again"), expected_tripped=False)
    assert store.get_breaker(C) == tripped

    reset = replace(tripped, tripped=False, reset_by="alice", reset_at=_at(60))
    assert store.set_breaker(reset, expected_tripped=True) == reset
    with pytest.raises(ConflictError):
        store.set_breaker(reset, expected_tripped=True)
    # Writing the closed breaker over a closed one is allowed (tripped unchanged).
    assert store.set_breaker(replace(reset, reason=None), expected_tripped=False).reason is None
    # A cluster without a row has a closed breaker: expecting it tripped is a conflict.
    with pytest.raises(ConflictError):
        store.set_breaker(Breaker(B), expected_tripped=True)
    assert store.get_breaker(B) == Breaker(B)


def test_validations_round_trip(store: SqlStore) -> None:
    repair, _ = store.create_repair(_request(action=RepairAction.MIGRATE), state=S.APPROVED, now=T0)
    failed = ValidationResult(
        repair_id=repair.id,
        node=NodeName("n1"),
        outcome=ValidationOutcome.FAIL,
        tests=(("dcgmi diag -r 3", False, "Xid 79 ✗\n" + "x" * 70_000), ("nccl", True, "")),
        time=_at(10),
        ticket="OPS-1234",
    )
    passed = replace(failed, outcome=ValidationOutcome.PASS, tests=(), time=_at(20), ticket=None)
    aborted = replace(failed, outcome=ValidationOutcome.ABORT, time=_at(15), ticket=None)
    for result in (failed, passed, aborted):
        store.add_validation(result)
    assert store.list_validations(repair.id) == [failed, aborted, passed]  # by time
    assert store.list_validations(repair.id + 1000) == []
    with pytest.raises(NotFoundError):
        store.add_validation(replace(passed, repair_id=repair.id + 1000))


# --- concurrency ---------------------------------------------------------------------------
def test_concurrent_create_repair_inserts_once(two_stores: tuple[SqlStore, SqlStore]) -> None:
    a, b = two_stores
    with _slow_reads("repairs"):
        for round_ in range(3):
            request = _request(
                requested_by="hc", requester_kind=RequesterKind.DETECTOR, request_id=f"r{round_}"
            )
            create = partial(a.create_repair, request, state=S.PENDING_APPROVAL, now=T0)
            create_b = partial(b.create_repair, request, state=S.PENDING_APPROVAL, now=T0)
            (first, first_new), (second, second_new) = _race(create, create_b)
            assert first == second
            assert sorted([first_new, second_new]) == [False, True]
    assert sorted(r.request_id or "" for r in a.list_repairs()) == ["r0", "r1", "r2"]


def test_racing_transitions_one_wins(two_stores: tuple[SqlStore, SqlStore]) -> None:
    a, b = two_stores
    for round_ in range(4):
        repair, _ = a.create_repair(_request(f"n{round_}"), state=S.PENDING_APPROVAL, now=T0)
        approve = partial(a.transition_repair, repair.id, S.PENDING_APPROVAL, S.APPROVED, _at(1))
        reject = partial(b.transition_repair, repair.id, S.PENDING_APPROVAL, S.REJECTED, _at(1))
        results = _race(_or_conflict(approve), _or_conflict(reject))
        assert results.count("conflict") == 1
        (winner,) = [r for r in results if r != "conflict"]
        assert b.get_repair(repair.id) == winner
        assert winner.state in (S.APPROVED, S.REJECTED)


def test_racing_breaker_trips_one_wins(two_stores: tuple[SqlStore, SqlStore]) -> None:
    a, b = two_stores
    with _slow_reads("breakers"):
        for round_ in range(3):
            cluster = ClusterName(f"c{round_}")
            trip_a = Breaker(cluster, tripped=True, tripped_at=T0, reason="replica a")
            trip_b = replace(trip_a, reason="replica b")
            results = _race(
                _or_conflict(partial(a.set_breaker, trip_a, expected_tripped=False)),
                _or_conflict(partial(b.set_breaker, trip_b, expected_tripped=False)),
            )
            assert results.count("conflict") == 1
            (winner,) = [r for r in results if r != "conflict"]
            assert a.get_breaker(cluster) == winner


def test_concurrent_first_sightings_count_both(two_stores: tuple[SqlStore, SqlStore]) -> None:
    a, b = two_stores
    with _slow_reads("alerts"):
        for round_ in range(3):
            alert = _alert(f"n{round_}")
            _race(partial(a.upsert_alert, alert, T0), partial(b.upsert_alert, alert, _at(1)))
    stored = a.list_alerts()
    assert [(x.node, x.count) for x in stored] == [("n0", 2), ("n1", 2), ("n2", 2)]


# --- migration -----------------------------------------------------------------------------
def test_upgrade_from_0001_keeps_data_and_downgrade_removes_repair_tables(
    fresh_url: str, tmp_path: Path
) -> None:
    if fresh_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        db_url = fresh_url
        _drop_everything(db_url)  # the next test's db_url fixture migrates it back to head
    engine = sa.create_engine(db_url)
    try:
        upgrade_schema(engine, "0001")
        assert not REPAIR_TABLES & set(sa.inspect(engine).get_table_names())
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO cursors (source, value) VALUES ('s', 'v')"))
        upgraded = create_store(db_url)  # migrates 0001 -> head
        try:
            assert upgraded.get_cursor("s") == "v"
            upgraded.create_repair(_request(), state=S.PENDING_APPROVAL, now=T0)
        finally:
            upgraded.close()
        engine.dispose()  # forget cached table information
        assert set(sa.inspect(engine).get_table_names()) >= REPAIR_TABLES

        config = migrations_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0001")
        engine.dispose()
        names = set(sa.inspect(engine).get_table_names())
        assert not REPAIR_TABLES & names and {"cursors", "audit_events"} <= names
    finally:
        engine.dispose()


def test_upgrade_from_0004_gives_existing_repairs_no_owner_and_downgrade_drops_the_lease(
    fresh_url: str, tmp_path: Path
) -> None:
    if fresh_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        db_url = fresh_url
        _drop_everything(db_url)  # the next test's db_url fixture migrates it back to head
    engine = sa.create_engine(db_url)
    try:
        upgrade_schema(engine, "0004")
        columns = {c["name"] for c in sa.inspect(engine).get_columns("repairs")}
        assert not {"owner", "lease_until"} & columns
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO repairs (cluster, node, action, state, requested_by, "
                    "requester_kind, reason, alert_keys, interrupted_jobs, evidence, created_at, "
                    "updated_at) VALUES ('alpha', 'n1', 'reboot', 'executing', 'medic', 'medic', "
                    "'xid 79', '[]', '[]', '{}', :t, :t)"
                ),
                {"t": T0.replace(tzinfo=None)},
            )
        upgraded = create_store(db_url)  # migrates 0004 -> head
        try:
            (repair,) = upgraded.list_repairs(cluster=C)
            assert (repair.state, repair.owner, repair.lease_until) == (S.EXECUTING, None, None)
            taken = upgraded.claim_repair(repair.id, S.EXECUTING, "engine-a", _at(1), _at(31))
            assert taken.owner == "engine-a", "an existing repair is free to take"
        finally:
            upgraded.close()

        config = migrations_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0004")
        engine.dispose()
        columns = {c["name"] for c in sa.inspect(engine).get_columns("repairs")}
        assert not {"owner", "lease_until"} & columns and "boot_id" in columns
    finally:
        engine.dispose()
