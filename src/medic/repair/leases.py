"""Which repair engine works on a repair: a lease in the store, taken by compare-and-set.

Several engines share one store: replicas, or a medic restarted after it was killed. In some
states a repair's work must be done by exactly one of them (:data:`LEASED`: the drain of a
cordoned node, moving the jobs off a draining one, the action of an executing one, the
validation suite). The engine that moves a repair records itself in the same compare-and-set as
the repair's ``owner``, with a lease of :data:`LEASE_SECONDS`, and renews it at the start of
each pass while the repair is in one of those states (a write every :data:`RENEW_SECONDS` at
most, also while a slow action runs off the loop). Another engine takes the repair over
(``RepairStore.claim_repair``) only once that lease ran out: its engine stopped, or stalled a
whole lease long. A medic killed in the middle of a repair is therefore replaced within a lease,
whatever the state; the engine that takes over decides from the store and the node what is left
to do (:mod:`medic.repair.execution` for an action whose outcome was never recorded). Each
takeover is audited (``repair-taken-over``), and each step the stopped engine left with no
outcome is given one there, explicitly unknown (:func:`~medic.repair.steps.close_in_doubt`).

Each engine is its own owner, ``host:pid:nonce``: a restarted process is a new owner and waits
for its predecessor's leases to run out. The replicas' clocks must agree to within a few
seconds (a fraction of the lease).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from medic.domain.audit import AuditKind
from medic.domain.repairs import Repair, RepairState, RepairUpdate
from medic.errors import ConflictError, MedicError
from medic.ports import AuditQuery
from medic.repair.steps import Audit, close_in_doubt

__all__ = ["LEASED", "LEASE_SECONDS", "RENEW_SECONDS", "LeaseStore", "Leases", "engine_owner"]

logger = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
"""How long a repair stays its engine's without a renewal: the longest a stopped engine's repair
waits for another engine."""
RENEW_SECONDS = 10.0
"""A held lease is renewed once this much of it has passed (so a pass may stall for 20 s)."""
LEASED = frozenset(
    {RepairState.CORDONED, RepairState.DRAINING, RepairState.EXECUTING, RepairState.VALIDATING}
)
"""States whose work only the repair's owner does; in the others any engine may move it on."""


class LeaseStore(Protocol):
    """What leases need of the store (``RepairStore.claim_repair``)."""

    def claim_repair(
        self, repair_id: int, state: RepairState, owner: str, now: datetime, until: datetime
    ) -> Repair: ...


def engine_owner() -> str:
    """A new owner name for one engine: ``host:pid:nonce`` (readable in the audit trail)."""
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Leases:
    """The leases one engine holds (see the module docstring)."""

    def __init__(
        self,
        store: LeaseStore,
        clock: Callable[[], datetime],
        audit: Audit,
        owner: str | None = None,
        trail: AuditQuery | None = None,
    ) -> None:
        self._store = store
        self._now = clock
        self._audit = audit
        self._trail = trail
        """Where a takeover finds the steps the stopped engine left in doubt (None: not read)."""
        self.owner = owner or engine_owner()
        self._held: dict[int, datetime] = {}
        """Repair id -> the end of the lease this engine holds on it."""

    def stamp(self, update: RepairUpdate | None, now: datetime) -> RepairUpdate:
        """``update`` that also makes this engine the repair's owner (a move it makes)."""
        lease = now + timedelta(seconds=LEASE_SECONDS)
        return replace(update or RepairUpdate(), owner=self.owner, lease_until=lease)

    def moved(self, repair: Repair) -> None:
        """This engine moved ``repair`` (stamped): it holds it, unless it is finished."""
        if repair.state.is_terminal or repair.owner != self.owner or repair.lease_until is None:
            self._held.pop(repair.id, None)
        else:
            self._held[repair.id] = repair.lease_until

    def holds(self, repair_id: int) -> bool:
        """True while this engine's lease on the repair runs."""
        until = self._held.get(repair_id)
        return until is not None and until > self._now()

    def owns(self, repair: Repair) -> bool:
        """True when this engine holds ``repair`` (as read: in its state), taking it over first
        when nobody's lease runs on it (its engine stopped)."""
        now = self._now()
        theirs = repair.owner is not None and repair.owner != self.owner
        if not theirs and self.holds(repair.id):
            return True
        if theirs and repair.lease_until is not None and repair.lease_until > now:
            return False  # its engine still renews it
        try:
            taken = self._claim(repair, now)
        except ConflictError as exc:
            logger.info("repair %s: %s", repair.id, exc)
            return False
        except MedicError as exc:  # the store did not answer: not this engine's for now
            logger.warning("repair %s: cannot take its lease: %s", repair.id, exc)
            return False
        if repair.owner != self.owner:
            ended = repair.lease_until.isoformat() if repair.lease_until else None
            payload: dict[str, Any] = {"repair_id": repair.id, "state": repair.state.value}
            payload["owner"] = self.owner
            payload |= {"previous_owner": repair.owner, "lease_ended": ended}
            payload["why"] = (
                f"{repair.owner or 'no engine'} held the repair until {ended or 'never'} and "
                f"did not renew it: {self.owner} carries the {repair.state.value} state on"
            )
            self._audit(AuditKind.REPAIR_TAKEN_OVER, taken, payload, now)
            if self._trail is not None:
                why = f"{repair.owner or 'its engine'} started it and stopped before recording it"
                close_in_doubt(self._trail, taken, self._audit, now, why)
        return True

    def renew(self, open_repairs: Sequence[Repair]) -> None:
        """Renew the leases due for it on this engine's repairs in a :data:`LEASED` state; forget
        the others. A lease another engine took meanwhile (this one stalled) is given up."""
        now = self._now()
        current = {r.id: r for r in open_repairs if r.state in LEASED}
        self._held = {i: until for i, until in self._held.items() if i in current}
        due = timedelta(seconds=LEASE_SECONDS - RENEW_SECONDS)
        for repair_id, until in list(self._held.items()):
            if until - now > due:
                continue
            try:
                self._claim(current[repair_id], now)
            except ConflictError as exc:
                logger.warning("repair %s: lease lost: %s", repair_id, exc)
                self._held.pop(repair_id, None)
            except MedicError as exc:  # the store did not answer: the lease runs out by itself
                logger.warning("repair %s: cannot renew its lease: %s", repair_id, exc)

    def _claim(self, repair: Repair, now: datetime) -> Repair:
        until = now + timedelta(seconds=LEASE_SECONDS)
        taken = self._store.claim_repair(repair.id, repair.state, self.owner, now, until)
        self._held[repair.id] = until
        return taken
