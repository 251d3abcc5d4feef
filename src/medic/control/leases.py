"""The lease one process holds for its control work: taken, renewed, and checked before acting.

:class:`LeaseKeeper` takes the lease by compare-and-set in the store and renews it once a third
of it has passed; a process that cannot renew (another holder, the database unreachable) stops
acting. The store's expiry is written by the holder's wall clock; the keeper's own deadline is
measured on the monotonic clock from the moment it *sent* the request, shortened by a margin
for clock skew, so it always ends before the store's (the wall clock is checked too).
``may_act()`` right before a scheduler command closes the gap fencing tokens leave: a process
frozen between recording a step and issuing it (SIGSTOP, a stalled VM) finds on waking that its
deadline has passed, and does not issue it. See :mod:`medic.domain.leases` and ``docs/replicas.md``.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable

from medic.domain.leases import Fence, Lease
from medic.errors import FencedError, MedicError
from medic.ports import Clock, LeaseStore, Metrics

__all__ = ["LeaseKeeper", "process_holder"]

logger = logging.getLogger(__name__)

SKEW_SECONDS = 2.0
"""How far the replicas' clocks may disagree: the keeper's deadline ends this much (at most a
quarter of the lease) before the store's expiry."""


def process_holder() -> str:
    """A new holder name for one process: ``host:pid:nonce`` (readable in the audit trail; a
    restarted process is a new holder and waits for its predecessor's lease to run out)."""
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseKeeper:
    """Holds the lease ``name`` for ``holder`` (see the module docstring)."""

    def __init__(
        self,
        store: LeaseStore,
        name: str,
        *,
        clock: Clock,
        ttl_seconds: float,
        metrics: Metrics | None = None,
        holder: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.holder = holder or process_holder()
        self._store = store
        self._clock = clock
        self._metrics = metrics
        """Where renewals are reported (None: nowhere; the remote controller has no metrics)."""
        self._ttl = ttl_seconds
        self._margin = min(SKEW_SECONDS, ttl_seconds / 4)
        self._monotonic = monotonic
        self._lease: Lease | None = None
        self._deadline = float("-inf")
        self._renewed = float("-inf")
        self._sent_at = clock.now()
        self.other: Lease | None = None
        """The live lease of another holder, when the last attempt found one."""

    @property
    def lease(self) -> Lease | None:
        """The lease while this process may act under it, else None."""
        return self._lease if self.may_act() else None

    def hold(self) -> Lease | None:
        """Take or renew the lease when due; the lease when this process holds it, else None
        (another process holds it, or the store cannot be reached and the deadline passed)."""
        sent, sent_at = self._monotonic(), self._clock.now()
        if self._lease is not None and self.may_act() and not self._due(sent):
            return self._lease
        try:
            got = self._store.acquire_lease(self.name, self.holder, sent_at, self._ttl)
        except MedicError as exc:
            logger.warning("lease %s: cannot renew: %s", self.name, exc)
            self._report(self._monotonic() - sent, self.may_act())
            return self.lease
        self._report(self._monotonic() - sent, got.holder == self.holder)
        if got.holder != self.holder:
            if self._lease is not None:
                logger.warning("lease %s: lost to %s (token %s)", self.name, got.holder, got.token)
            self._lease, self.other, self._deadline = None, got, float("-inf")
            return None
        if self._lease is None or self._lease.token != got.token:
            taken_over = got.token > 1 and got.acquired_at == got.renewed_at
            logger.info(
                "lease %s: held by %s (token %s)%s",
                self.name,
                self.holder,
                got.token,
                " after another holder's ran out" if taken_over else "",
            )
            if taken_over and self._metrics is not None:
                self._metrics.lease_failover(self.name)
        self._lease, self.other = got, None
        self._renewed, self._sent_at = sent, sent_at
        self._deadline = sent + self._ttl - self._margin
        return got

    def may_act(self) -> bool:
        """True while this process holds the lease by its own monotonic deadline, and by the
        clock it writes expiries with (the injected one; they differ in tests)."""
        if self._lease is None or self._monotonic() >= self._deadline:
            return False
        return self._since_sent() < self._ttl - self._margin

    def _due(self, now: float) -> bool:
        """A third of the lease has passed since the last renewal, on either clock."""
        if self._lease is None or now - self._renewed >= self._ttl / 3:
            return True
        return self._since_sent() >= self._ttl / 3

    def _since_sent(self) -> float:
        """Seconds since the last renewal was sent, by this process's clock (never compared
        with the store's times, which another process's clock wrote)."""
        return (self._clock.now() - self._sent_at).total_seconds()

    def fence(self) -> Fence:
        """What to record a step under; ``FencedError`` when this process may not act."""
        lease = self.lease
        if lease is None:
            raise FencedError(f"{self.holder} does not hold the lease {self.name!r}")
        return lease.fence

    def release(self) -> None:
        """Give the lease up (a clean shutdown): another process takes it at once."""
        if self._lease is None:
            return
        self._lease, self._deadline = None, float("-inf")
        try:
            self._store.release_lease(self.name, self.holder, self._clock.now())
        except MedicError as exc:  # it runs out on its own
            logger.warning("lease %s: cannot release: %s", self.name, exc)
        self._report(0.0, False)

    def _report(self, seconds: float, held: bool) -> None:
        if self._metrics is not None:
            self._metrics.lease_renewal(self.name, seconds, held)
