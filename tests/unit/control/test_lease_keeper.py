"""LeaseKeeper's clocks: renewed once a third of the lease passed, and no longer allowed to act
once its own deadline passed, on the monotonic clock or on the clock it writes times with."""

from __future__ import annotations

from datetime import datetime, timedelta

from medic.control.leases import LeaseKeeper
from medic.domain.leases import Lease
from medic.errors import StoreError
from medic.telemetry.metrics import PrometheusMetrics
from medic.testing import FakeClock


class FakeLeases:
    """A lease table of one row, with the store's compare-and-set rules, and a switch to fail."""

    def __init__(self) -> None:
        self.row: Lease | None = None
        self.calls = 0
        self.down = False

    def acquire_lease(self, name: str, holder: str, now: datetime, ttl_seconds: float) -> Lease:
        self.calls += 1
        if self.down:
            raise StoreError("database down")
        until = now + timedelta(seconds=ttl_seconds)
        row = self.row
        if row is not None and row.holder != holder and row.live(now):
            return row
        token = 1 if row is None else row.token + (row.holder != holder)
        acquired = now if row is None or row.holder != holder else row.acquired_at
        self.row = Lease(name, holder, token, acquired, now, until)
        return self.row

    def release_lease(self, name: str, holder: str, now: datetime) -> bool:
        return False

    def list_leases(self) -> list[Lease]:
        return [] if self.row is None else [self.row]


class Mono:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _keeper(store: FakeLeases, clock: FakeClock, mono: Mono, holder: str) -> LeaseKeeper:
    return LeaseKeeper(
        store,
        "loop/x",
        clock=clock,
        ttl_seconds=9.0,
        holder=holder,
        monotonic=mono,
        metrics=PrometheusMetrics(),
    )


def test_renewed_every_third_of_the_lease_not_every_call() -> None:
    store, clock, mono = FakeLeases(), FakeClock(), Mono()
    keeper = _keeper(store, clock, mono, "a")
    assert keeper.hold() is not None and store.calls == 1
    mono.t += 2.9
    clock.advance(2.9)
    assert keeper.hold() is not None and store.calls == 1
    mono.t += 0.2
    clock.advance(0.2)
    assert keeper.hold() is not None and store.calls == 2


def test_a_stopped_process_may_not_act_on_waking_by_either_clock() -> None:
    store, clock, mono = FakeLeases(), FakeClock(), Mono()
    keeper = _keeper(store, clock, mono, "a")
    keeper.hold()
    assert keeper.may_act()
    mono.t += 7.1  # past 9 s minus the 2 s skew margin, wall clock unchanged (another host's)
    assert not keeper.may_act() and keeper.lease is None
    mono.t -= 7.1
    clock.advance(7.1)  # the injected clock moved, the monotonic one did not (a fake clock)
    assert not keeper.may_act()


def test_the_store_unreachable_keeps_the_lease_only_until_the_deadline() -> None:
    store, clock, mono = FakeLeases(), FakeClock(), Mono()
    keeper = _keeper(store, clock, mono, "a")
    keeper.hold()
    store.down = True
    for _ in range(6):
        mono.t += 1
        clock.advance(1)
    assert keeper.hold() is not None  # 6 s: still inside its deadline
    mono.t += 1.5
    clock.advance(1.5)
    assert keeper.hold() is None


def test_another_holder_takes_over_only_after_expiry_and_it_counts_as_a_failover() -> None:
    store, clock, mono = FakeLeases(), FakeClock(), Mono()
    metrics = PrometheusMetrics()
    a = _keeper(store, clock, mono, "a")
    b = LeaseKeeper(
        store, "loop/x", clock=clock, ttl_seconds=9.0, holder="b", monotonic=mono, metrics=metrics
    )
    a.hold()
    assert b.hold() is None and b.other is not None and b.other.holder == "a"
    clock.advance(9.0)
    mono.t += 9.0
    taken = b.hold()
    assert taken is not None and taken.token == 2
    text = metrics.render()[0].decode()
    assert 'medic_lease_failovers_total{lease="loop/x"} 1.0' in text
    assert 'medic_lease_held{lease="loop/x"} 1.0' in text
    assert a.hold() is None  # a, back, stands by
