"""Leases: which medic process does a piece of control work, and the fencing token it acts with.

A lease is a row in the store (``leases``): its holder, the time it runs out, and a fencing token
that grows by one each time the lease changes hands. Every process that may act (``medic
serve``'s embedded controller, ``medic controller``) takes the lease of the work first (per
cluster: :func:`loop_lease` for the control loop, :func:`controller_lease` for carrying job
advice out) by compare-and-set, renews it while it works, and carries
the token on every step it records in the ledger; the store refuses a step whose token is no
longer the lease's, in the transaction that would record it. A process that stalls past its
lease (a SIGSTOP, a long GC pause, a partition from the database) can therefore record nothing
once another took over, and checks its own deadline (monotonic clock, see
:class:`~medic.control.leases.LeaseKeeper`) right before it issues a command.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from medic.domain.ids import ClusterName

__all__ = ["Fence", "Lease", "controller_lease", "loop_lease"]


@dataclass(frozen=True, slots=True)
class Fence:
    """What a step is recorded under: a lease, its holder and its fencing token."""

    lease: str
    holder: str
    token: int


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease as stored (or as just taken)."""

    name: str
    holder: str
    token: int
    """The fencing token: 1 for the first holder, one more at each change of holder."""
    acquired_at: datetime
    """When the current holder took it."""
    renewed_at: datetime
    expires_at: datetime

    @property
    def fence(self) -> Fence:
        return Fence(self.name, self.holder, self.token)

    def live(self, now: datetime) -> bool:
        """True while the lease has not run out (by ``now``, the caller's clock)."""
        return now < self.expires_at


def loop_lease(cluster: ClusterName) -> str:
    """The lease of one cluster's control loop: observing it, deciding, node repair."""
    return f"loop/{cluster}"


def controller_lease(cluster: ClusterName) -> str:
    """The lease of carrying out one cluster's job advice: taken by the embedded controller of
    the loop's holder, or by a remote controller (``medic controller``), whichever acts."""
    return f"controller/{cluster}"
