"""Node auto-repair: health alerts, repair actions, the repair lifecycle and the repair policy.

A failed health check on a node becomes an :class:`Alert`. Alerts whose signal has an action
mapping become a :class:`Repair` recommendation for the lightest action that fixes them; the
policy decides whether it waits for a person or runs automatically, and when. A repair moves
through :class:`RepairState` by compare-and-set transitions listed in :data:`TRANSITIONS`, so two
replicas can never both act on it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName

__all__ = [
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Alert",
    "AlertSource",
    "AlertState",
    "Breaker",
    "NodeHealth",
    "NodeHealthEntry",
    "Repair",
    "RepairAction",
    "RepairPolicy",
    "RepairRequest",
    "RepairState",
    "RepairUpdate",
    "RequestChannel",
    "RequesterKind",
    "ValidationOutcome",
    "ValidationResult",
    "WaitMode",
]


class AlertSource(enum.StrEnum):
    SIGNATURE = "signature"
    """A catalogue signature in the node's kernel or job logs."""
    SCHEDULER = "scheduler"
    """The scheduler's node state (DOWN / DRAIN / NOT_RESPONDING set by someone else)."""
    AGENT = "agent"
    """``medic agent`` on the node (NVML, filesystems, InfiniBand)."""
    DETECTOR = "detector"
    """A bring-your-own detector, through the API or a Slurm node comment."""


class AlertState(enum.StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


class RepairAction(enum.StrEnum):
    """Repairs, lightest first within the escalation ladder (reset < reboot < reprovision <
    migrate). Power-cycling the host is a separate remedy for an unreachable host; removal for
    RMA is human-only and never automatic."""

    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    REPROVISION = "reprovision"
    MIGRATE = "migrate"
    POWER_CYCLE = "power_cycle"
    REMOVE = "remove"

    @property
    def human_only(self) -> bool:
        return self is RepairAction.REMOVE


class RequesterKind(enum.StrEnum):
    MEDIC = "medic"
    """medic's own policy, from an alert with an action mapping."""
    DETECTOR = "detector"
    USER = "user"


class RequestChannel(enum.StrEnum):
    """How a request reached medic, and so whether its requester's name is authenticated."""

    API = "api"
    """The repair API: the requester is the API token's principal (authenticated)."""
    SCHEDULER = "scheduler"
    """A ``medic-request:`` Slurm drain reason or node comment: anyone who may drain a node (or
    set its comment) writes any ``detector=`` name there (not authenticated)."""


class RepairState(enum.StrEnum):
    PENDING_APPROVAL = "pending_approval"
    APPROVED = "approved"
    CORDONED = "cordoned"
    WAITING_FOR_IDLE = "waiting_for_idle"
    DRAINING = "draining"
    EXECUTING = "executing"
    REJOINING = "rejoining"
    VALIDATING = "validating"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def is_active(self) -> bool:
        """Approved and not finished: the node is (about to be) out of service."""
        return not self.is_terminal and self is not RepairState.PENDING_APPROVAL


TERMINAL_STATES = frozenset(
    {RepairState.DONE, RepairState.FAILED, RepairState.CANCELLED, RepairState.REJECTED}
)
OPEN_STATES = frozenset(RepairState) - TERMINAL_STATES
"""A repair in one of these still holds its node (one open repair per node)."""

_S = RepairState
TRANSITIONS: dict[RepairState, frozenset[RepairState]] = {
    # pending -> pending: a person changes the action before deciding.
    _S.PENDING_APPROVAL: frozenset({_S.PENDING_APPROVAL, _S.APPROVED, _S.REJECTED, _S.CANCELLED}),
    _S.APPROVED: frozenset({_S.CORDONED, _S.CANCELLED, _S.FAILED}),
    _S.CORDONED: frozenset({_S.WAITING_FOR_IDLE, _S.DRAINING, _S.CANCELLED, _S.FAILED}),
    _S.WAITING_FOR_IDLE: frozenset({_S.DRAINING, _S.CANCELLED, _S.FAILED}),
    _S.DRAINING: frozenset({_S.EXECUTING, _S.CANCELLED, _S.FAILED}),
    _S.EXECUTING: frozenset({_S.REJOINING, _S.FAILED}),
    _S.REJOINING: frozenset({_S.VALIDATING, _S.DONE, _S.FAILED}),
    _S.VALIDATING: frozenset({_S.DONE, _S.FAILED}),
    _S.DONE: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.REJECTED: frozenset(),
}
"""Allowed repair transitions. Cancelling is possible until the repair starts executing."""


class NodeHealth(enum.StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    """At least one alert is firing."""
    UNDER_REPAIR = "under_repair"
    OUT_OF_SERVICE = "out_of_service"
    """Failed revalidation or removed: stays out until repaired and revalidated."""


@dataclass(frozen=True, slots=True)
class NodeHealthEntry:
    """A node that is not healthy, in the read model the repair engine keeps (no entry:
    healthy)."""

    cluster: ClusterName
    node: NodeName
    health: NodeHealth
    since: datetime
    """When it entered this health (as the engine saw it)."""


class WaitMode(enum.StrEnum):
    IDLE = "idle"
    """Hold until the node runs no job, up to ``max_wait_seconds``, then proceed."""
    NEVER_INTERRUPT = "never_interrupt"
    """Hold until the node runs no job, however long."""
    CHECKPOINT = "checkpoint"
    """For a job medic manages: proceed after the job's next checkpoint (or when idle)."""


class ValidationOutcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ABORT = "abort"
    """The suite could not run: the machine returns to its previous state, not marked faulty."""


@dataclass(frozen=True, slots=True)
class Alert:
    """A failed health check on one node. Deduplicated by (cluster, node, key)."""

    cluster: ClusterName
    node: NodeName
    key: str
    """Stable identity of the signal, e.g. ``xid:79``, ``sig:host.xfs_shutdown``,
    ``slurm:drain``, ``agent:ecc_dbe``, ``detector:<name>:<check>``."""
    source: AlertSource
    summary: str
    description: str
    severity: Severity
    evidence: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """Machine-readable: Xid code and mnemonic, peak temperature and throttle count, ..."""
    detector: str = "medic"
    mapped_action: RepairAction | None = None
    """The lightest repair for this signal; None: recorded and listed, never repaired."""
    xid: int | None = None
    state: AlertState = AlertState.FIRING
    first_seen: datetime | None = None
    """The first sighting ever (a resolved alert that fires again keeps it)."""
    last_seen: datetime | None = None
    count: int = 1
    id: int | None = None
    firing_since: datetime | None = None
    """Start of the current firing episode (the store's; None: ``first_seen``). Persistence
    counts from here, so an alert that cleared and came back has to hold again."""


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """Ask for one repair of one node (the schema allows exactly one target node)."""

    cluster: ClusterName
    node: NodeName
    action: RepairAction
    requested_by: str
    """Detector name, user name, or ``medic`` for the policy."""
    requester_kind: RequesterKind
    reason: str
    alert_keys: tuple[str, ...] = ()
    """Evidence: the alerts this repair answers. A repair never starts without one."""
    request_id: str | None = None
    """Client-provided id; (requested_by, request_id) is an idempotency key across the cluster,
    finished repairs included."""
    xid: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    channel: RequestChannel = RequestChannel.SCHEDULER
    """How it arrived. Unauthenticated unless the API says so: a caller that forgets to set it
    never gains the trust the policy gives a detector's name."""


@dataclass(frozen=True, slots=True)
class Repair:
    id: int
    cluster: ClusterName
    node: NodeName
    action: RepairAction
    state: RepairState
    requested_by: str
    requester_kind: RequesterKind
    reason: str
    alert_keys: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    request_id: str | None = None
    xid: int | None = None
    approved_by: str | None = None
    """User name, or ``auto`` when the policy approved it."""
    rule: str | None = None
    """The policy rule that decided (e.g. ``auto:xid:79``, ``approval-required``)."""
    approved_at: datetime | None = None
    wait_deadline: datetime | None = None
    interrupted_jobs: tuple[str, ...] = ()
    """Jobs the repair interrupted (recorded with why, never silently)."""
    escalated_from: RepairAction | None = None
    boot_id: str | None = None
    """The node's boot id before executing; guards power-cycles against repeating."""
    error: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    owner: str | None = None
    """The repair engine that carries the current state's work out (None: none yet). It holds
    the repair until ``lease_until`` and renews that while it works; another engine takes the
    repair over (a compare-and-set) only once the lease ran out: its engine stopped."""
    lease_until: datetime | None = None
    checkpoint_baseline: dict[str, int | None] = field(
        default_factory=dict, hash=False, compare=False
    )
    """In ``checkpoint`` wait mode: each running job's last checkpoint step (``"job/attempt"``
    -> step, None: none yet) when the repair began waiting for it. Kept on the repair, so an
    engine that restarted or took it over decides as the first one would."""


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """Per-cluster repair policy (defaults: approve before repair, detectors' requests
    included; wait for idle up to 2 h)."""

    auto_actions: frozenset[RepairAction] = frozenset()
    """Action classes approved automatically (for every signal that maps to them)."""
    auto_xids: frozenset[int] = frozenset()
    """Xid codes whose mapped action is approved automatically."""
    wait_mode: WaitMode = WaitMode.IDLE
    max_wait_seconds: float = 7200.0
    """Longest hold for an idle node (cap 86,400); then the repair proceeds, recorded."""
    cooldown_seconds: float = 1800.0
    """No new recommendation for a node this long after a repair on it finished."""
    persistence_seconds: float = 0.0
    """How long a signal must hold before it becomes a recommendation (per-key overrides below)."""
    persistence_overrides: dict[str, float] = field(default_factory=dict, hash=False)
    max_concurrent_fraction: float = 0.05
    """Concurrency budget: each pool (partition) gives repairs at work at once its share,
    ``max(1, ceil(fraction x pool nodes))``, and the cluster as a whole at most
    ``max(1, floor(fraction x cluster nodes))``; a repair waiting for a busy node holds a waiting
    slot, bounded by the same numbers, not a working one."""
    breaker_fraction: float = 0.10
    """Trip the circuit breaker when this fraction of the cluster's nodes, or of one pool's,
    began firing a repairable alert (or had a repair approved automatically) ..."""
    breaker_window_seconds: float = 600.0
    """... within this window: a cluster-level cause is likely, automatic repair pauses."""
    detector_cap_per_hour: int = 50
    """Per-cluster cap on detector-initiated repair requests per hour."""
    validate_after: frozenset[RepairAction] = frozenset({RepairAction.MIGRATE})
    """Actions after which the machine runs the validation suite."""
    trusted_detectors: frozenset[str] = frozenset()
    """Detectors whose requests are approved automatically (``foo`` trusts ``foo`` and
    ``foo:<part>``); any other detector's request waits for a person."""
    trust_scheduler_requests: bool = False
    """Whether a trusted name in a Slurm drain reason or node comment counts as that detector.
    Off: such a request always waits for a person (whoever may drain a node writes any name)."""


@dataclass(frozen=True, slots=True)
class Breaker:
    cluster: ClusterName
    tripped: bool = False
    tripped_at: datetime | None = None
    reason: str | None = None
    reset_by: str | None = None
    reset_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ValidationResult:
    repair_id: int
    node: NodeName
    outcome: ValidationOutcome
    tests: tuple[tuple[str, bool, str], ...]
    """(test name, passed, log excerpt) for each configured validation command."""
    time: datetime
    ticket: str | None = None
    """Ticket id opened on failure; the machine stays out until repaired and revalidated."""


@dataclass(frozen=True, slots=True)
class RepairUpdate:
    """Fields a repair transition may set alongside its new state (None: leave unchanged)."""

    action: RepairAction | None = None
    approved_by: str | None = None
    rule: str | None = None
    approved_at: datetime | None = None
    wait_deadline: datetime | None = None
    interrupted_jobs: tuple[str, ...] | None = None
    escalated_from: RepairAction | None = None
    boot_id: str | None = None
    error: str | None = None
    owner: str | None = None
    """The engine making the move, which then holds the repair until ``lease_until``."""
    lease_until: datetime | None = None
