"""The durable state of node repair and of the API: alerts, repairs, policy, breaker and
validations; API tokens and console sessions; run-time modes.

Part of :mod:`medic.ports` (see its docstring); import the ports from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol, runtime_checkable

from medic.domain.auth import Session, Token
from medic.domain.ids import ClusterName, NodeName
from medic.domain.modes import ClusterModes
from medic.domain.repairs import (
    Alert,
    AlertState,
    Breaker,
    NodeHealth,
    NodeHealthEntry,
    Repair,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RepairUpdate,
    ValidationResult,
)

__all__ = ["ModeStore", "RepairStore", "TokenStore"]


class RepairStore(Protocol):
    """Durable state of node auto-repair: alerts, repairs, policy, breaker, validation results.

    Repair transitions are compare-and-set on the state (``ConflictError`` when another replica
    moved it first), and so is the lease that says which engine works on a repair; alerts are
    deduplicated by (cluster, node, key).
    """

    def upsert_alert(self, alert: Alert, now: datetime) -> Alert:
        """Record a firing alert: new -> inserted; seen before -> count+1, last_seen=now, and a
        resolved one fires again (first_seen kept)."""
        ...

    def resolve_alert(self, alert_id: int, now: datetime) -> Alert: ...

    def get_alert(self, alert_id: int) -> Alert | None: ...

    def put_node_health(
        self, cluster: ClusterName, health: Mapping[NodeName, NodeHealth], now: datetime
    ) -> None:
        """Make the cluster's stored node health ``health`` (healthy nodes need no entry); an
        entry whose health did not change keeps its ``since``."""
        ...

    def list_node_health(self, cluster: ClusterName | None = None) -> list[NodeHealthEntry]:
        """The nodes that are not healthy, as the repair engine last wrote them."""
        ...

    def list_alerts(
        self,
        *,
        cluster: ClusterName | None = None,
        node: NodeName | None = None,
        state: AlertState | None = None,
        unmapped_only: bool = False,
    ) -> list[Alert]: ...

    def create_repair(
        self,
        request: RepairRequest,
        *,
        state: RepairState,
        now: datetime,
        approved_by: str | None = None,
        rule: str | None = None,
    ) -> tuple[Repair, bool]:
        """Insert a repair; with ``request.request_id`` the pair (requested_by, request_id) is an
        idempotency key across the cluster, finished repairs included: a repeat returns the
        existing repair and False (also when a concurrent writer inserted it first)."""
        ...

    def get_repair(self, repair_id: int) -> Repair | None: ...

    def find_repair(
        self, cluster: ClusterName, requested_by: str, request_id: str
    ) -> Repair | None:
        """The repair a requester's request id names in ``cluster`` (any node, any state)."""
        ...

    def list_repairs(
        self,
        *,
        cluster: ClusterName | None = None,
        node: NodeName | None = None,
        states: frozenset[RepairState] | None = None,
        since: datetime | None = None,
    ) -> list[Repair]:
        """Repairs matching every filter (``since``: created at or after), oldest first."""
        ...

    def transition_repair(
        self,
        repair_id: int,
        expected: RepairState,
        new: RepairState,
        now: datetime,
        update: RepairUpdate | None = None,
    ) -> Repair:
        """Move a repair from ``expected`` to ``new`` (must be allowed by ``TRANSITIONS``;
        ``InputError`` otherwise) and apply ``update``. ``ConflictError`` when its state is no
        longer ``expected``; ``NotFoundError`` for an unknown id."""
        ...

    def claim_repair(
        self, repair_id: int, state: RepairState, owner: str, now: datetime, until: datetime
    ) -> Repair:
        """Take, or renew, the lease on a repair in ``state``: ``owner`` holds it until
        ``until``. A compare-and-set: it succeeds when nobody holds the repair (no owner, or a
        lease that ended at or before ``now``) or ``owner`` already does; ``ConflictError`` when
        another owner's lease still runs or the repair is no longer in ``state``;
        ``NotFoundError`` for an unknown id. ``updated_at`` is left alone."""
        ...

    def note_checkpoint_baseline(
        self, repair_id: int, state: RepairState, baseline: Mapping[str, int | None]
    ) -> Repair:
        """Add to the repair's checkpoint baseline (``"job/attempt"`` -> the job's last
        checkpoint step when the wait for it began) the jobs it has none for yet; a job's first
        baseline is never replaced (two engines noting one at once: the first one stays). The
        repair as stored after; ``ConflictError`` when it is no longer in ``state``,
        ``NotFoundError`` for an unknown id."""
        ...

    def get_repair_policy(self, cluster: ClusterName) -> RepairPolicy:
        """The cluster's policy, or the defaults when none was stored."""
        ...

    def put_repair_policy(self, cluster: ClusterName, policy: RepairPolicy) -> None: ...

    def get_breaker(self, cluster: ClusterName) -> Breaker: ...

    def set_breaker(self, breaker: Breaker, *, expected_tripped: bool) -> Breaker:
        """Compare-and-set on ``tripped`` (``ConflictError`` when someone flipped it first)."""
        ...

    def add_validation(self, result: ValidationResult) -> None: ...

    def list_validations(self, repair_id: int) -> list[ValidationResult]: ...


@runtime_checkable
class TokenStore(Protocol):
    """API tokens (only their hashes) and console sessions.

    A token's name is unique among tokens that are not revoked; a revoked token's row is kept (its
    name can be given to a new token, which replaces it). Revoking a token ends its sessions.
    """

    def create_token(self, token: Token) -> None:
        """Store a new token; ``ConflictError`` when an active token already has its name."""
        ...

    def get_token(self, name: str) -> Token | None: ...

    def find_token(self, secret_hash: str) -> Token | None:
        """The token whose secret hashes to ``secret_hash`` (revoked ones included)."""
        ...

    def list_tokens(self) -> list[Token]:
        """Every token, revoked ones included, by name."""
        ...

    def revoke_token(self, name: str, now: datetime) -> Token:
        """Revoke the token and delete its sessions (revoking twice changes nothing);
        ``NotFoundError`` for an unknown name."""
        ...

    def create_session(self, session: Session) -> None: ...

    def get_session(self, id_hash: str) -> Session | None: ...

    def delete_session(self, id_hash: str) -> bool:
        """Delete one session; False when there was none."""
        ...

    def purge_sessions(self, now: datetime) -> int:
        """Delete the sessions that ended before ``now``; how many."""
        ...


@runtime_checkable
class ModeStore(Protocol):
    """Observe/act modes switched at run time, per cluster and per partition."""

    def get_modes(self, cluster: ClusterName) -> ClusterModes:
        """The cluster's stored modes (none stored: no cluster mode, no partitions)."""
        ...

    def put_modes(self, modes: ClusterModes, now: datetime, by: str) -> ClusterModes:
        """Replace the cluster's stored modes in one transaction; the modes stored before."""
        ...
