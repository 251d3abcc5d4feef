"""Typed ports: the small interfaces the control loop depends on.

Each port has a real adapter and a fake or simulator next to it. Adapters raise only
``medic.errors`` exceptions: ``TransientError`` for "try again", ``PermanentError`` /
``NotFoundError`` for "this will not work", so the loop can decide without parsing messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from medic.domain.actions import ActionRecord, ActionStatus
from medic.domain.advice import Advice, AdviceRequest, Reconciliation
from medic.domain.attempts import Attempt, Progress
from medic.domain.audit import AuditEvent, AuditKind, AuditOrder
from medic.domain.auth import Session, Token
from medic.domain.cluster import Job, JobSpec, Node
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.domain.logs import LogLine
from medic.domain.modes import ClusterModes
from medic.domain.repairs import (
    Alert,
    AlertState,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RepairUpdate,
    ValidationResult,
)

__all__ = [
    "AttributionProvider",
    "AuditQuery",
    "Clock",
    "ControllerLedger",
    "Diagnoser",
    "FaultInjector",
    "LogSource",
    "Metrics",
    "ModeStore",
    "NodeProvider",
    "RepairStore",
    "Scheduler",
    "Store",
    "TokenStore",
    "Workload",
]


@runtime_checkable
class Clock(Protocol):
    """Source of the current time (UTC, timezone-aware). Tests inject a fake one."""

    def now(self) -> datetime: ...


class Scheduler(Protocol):
    """One cluster's workload manager (sim, Slurm; Kubernetes later).

    Mutating calls are idempotent at the level of state: holding a held job, releasing a running
    job or draining a drained node is not an error. Every method may raise ``TransientError``
    (scheduler unreachable, busy) and the mutating ones ``NotFoundError`` for an unknown id.
    """

    @property
    def cluster(self) -> ClusterName: ...

    def list_nodes(self) -> Sequence[Node]:
        """All nodes with their current state."""
        ...

    def list_jobs(self) -> Sequence[Job]:
        """Jobs medic should watch: pending, running and recently ended ones."""
        ...

    def get_job(self, job_id: JobId) -> Job:
        """Fresh state of one job. Raises ``NotFoundError`` when the scheduler forgot it."""
        ...

    def requeue_hold(self, job_id: JobId) -> None:
        """Stop the job's current attempt and put it back in the queue, held.

        The job's restart count grows by one; it will not start until :meth:`release`.
        """
        ...

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        """Replace the set of nodes the job must not run on (only while pending)."""
        ...

    def release(self, job_id: JobId) -> None:
        """Let a held job be scheduled again."""
        ...

    def cancel(self, job_id: JobId, reason: str) -> None:
        """Stop the job for good."""
        ...

    def drain_node(self, node: NodeName, reason: str) -> None:
        """Stop new work on a node. ``reason`` starts with ``medic:`` when medic drains."""
        ...

    def resume_node(self, node: NodeName, reason: str) -> None:
        """Return a node drained by medic to service. Never used on others' drains."""
        ...


class LogSource(Protocol):
    """New log lines since the previous call: job output and node kernel logs.

    The source keeps its own cursor (and may persist it through the store) so a line is returned
    once. It never raises on malformed content: undecodable bytes are replaced, not dropped.
    """

    def read_new(self, jobs: Sequence[Job]) -> Sequence[LogLine]:
        """Lines since the last call; ``jobs`` tells a tailing source what to follow."""
        ...


class NodeProvider(Protocol):
    """Machine-level operations below the scheduler (reboot, power-cycle, reprovision).

    Node repair drives it through two calls: :meth:`execute` starts (or runs) one repair action
    on a node the scheduler already drained, and :meth:`rejoined` tells when the node is back.
    ``TransientError``: try again later; ``PermanentError``: this provider cannot do that here
    (e.g. no hook configured for the action); ``NotFoundError``: unknown node.
    """

    def reboot(self, node: NodeName, reason: str) -> None: ...

    def can(self, action: RepairAction) -> bool:
        """True when this provider can carry ``action`` out here (Slurm alone reboots; the other
        actions need an operator hook). Asked before a node is touched, so that a repair nobody
        can execute never drains a node."""
        ...

    def boot_id(self, node: NodeName) -> str:
        """An id that changes at every boot; guards power-cycles against double execution."""
        ...

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        """Carry out ``action`` on ``node`` for repair ``repair_id``. May return once the action
        is under way (a reboot) or once it is done (an operator hook command). Asking again while
        it is under way does not start it twice."""
        ...

    def rejoined(self, node: NodeName, action: RepairAction, boot_id_before: str | None) -> bool:
        """True once ``node`` answers again after ``action`` and has no reboot pending; for an
        action that restarts the machine also booted since (boot id differs from
        ``boot_id_before``; None: not known, only responsiveness counts). False while it is on
        its way back; raises ``TransientError`` when that cannot be told now."""
        ...


class Diagnoser(Protocol):
    """Turns log lines into detections. The diagnosis engine (issue 3) replaces the first one.

    Pure: no I/O, no clock reads. Never raises on any input text.
    """

    def scan(self, lines: Sequence[LogLine]) -> list[Detection]:
        """Detections for the lines that match a signature, in input order.

        ``attempt`` on each detection is -1: the caller knows the job's current attempt.
        """
        ...


class AuditQuery(Protocol):
    """Read side of the audit trail (separate so read-only consumers need no write access)."""

    def query_audit(
        self,
        *,
        cluster: ClusterName | None = None,
        job_id: JobId | None = None,
        subject_type: str | None = None,
        subject_id: str | None = None,
        kind: AuditKind | None = None,
        actor: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        order: AuditOrder = "asc",
        limit: int = 100,
    ) -> list[AuditEvent]:
        """At most ``limit`` events matching every given filter, with ``after_id < id <
        before_id`` (either bound optional): the oldest first (``asc``: the next page is
        ``after_id`` = the last id) or the newest first (``desc``: ``before_id`` = the last id).
        Ids grow with every event written, so a cursor is stable while new events arrive."""
        ...


class Store(AuditQuery, Protocol):
    """Durable state: clusters, nodes, jobs, attempts, detections, verdicts, advice, actions, audit.

    Raises ``StoreError`` when the database fails and ``ConflictError`` when a compare-and-set
    loses. Audit events are append-only: no method updates or deletes them.
    """

    # --- inventory -------------------------------------------------------------------------
    def ensure_cluster(self, cluster: ClusterName, scheduler: str) -> None: ...

    def list_clusters(self) -> dict[ClusterName, str | None]:
        """Every cluster in the store and its scheduler kind (None: not known yet)."""
        ...

    def sync_nodes(self, cluster: ClusterName, nodes: Sequence[Node], now: datetime) -> None:
        """Upsert the nodes' current state."""
        ...

    def sync_jobs(self, cluster: ClusterName, jobs: Sequence[Job], now: datetime) -> None:
        """Upsert the jobs' current state and open the attempt ``job.restart_count`` when the job
        runs on nodes (recording its nodes and start); close an attempt whose job has ended."""
        ...

    def list_nodes(self, cluster: ClusterName | None = None) -> list[Node]: ...

    def list_jobs(self, cluster: ClusterName | None = None) -> list[Job]: ...

    def get_job(self, cluster: ClusterName, job_id: JobId) -> Job | None: ...

    def list_attempts(self, cluster: ClusterName, job_id: JobId) -> list[Attempt]:
        """The job's attempts, oldest first."""
        ...

    def list_attempts_between(
        self, cluster: ClusterName | None, start: datetime, end: datetime
    ) -> list[Attempt]:
        """Attempts (of every cluster when None) that ran during ``[start, end)``: started before
        ``end`` and not ended before ``start`` (still open counts as running). Attempts that never
        started are left out. Ordered by cluster, job, attempt number."""
        ...

    def update_progress(
        self, cluster: ClusterName, job_id: JobId, attempt: int, progress: Progress
    ) -> None:
        """Replace the progress recorded for one attempt (creating the attempt row if needed)."""
        ...

    # --- diagnosis -------------------------------------------------------------------------
    def add_detections(self, cluster: ClusterName, detections: Sequence[Detection]) -> None: ...

    def list_detections(
        self, cluster: ClusterName, job_id: JobId, attempt: int | None = None
    ) -> list[Detection]: ...

    def add_verdict(self, cluster: ClusterName, verdict: Verdict) -> int: ...

    def list_verdicts(self, cluster: ClusterName, job_id: JobId) -> list[Verdict]: ...

    # --- advice ----------------------------------------------------------------------------
    def publish_advice(self, request: AdviceRequest, now: datetime) -> Advice:
        """Store the decision as the job's advice.

        The same decision again (same attempt, action and exclusions) returns the stored advice
        unchanged; a different one raises the generation by one and resets the status to PENDING.
        """
        ...

    def get_advice(self, advice_id: AdviceId) -> Advice | None: ...

    def advice_for_job(self, cluster: ClusterName, job_id: JobId) -> Advice | None: ...

    def list_advice(
        self, *, cluster: ClusterName | None = None, active_only: bool = False
    ) -> list[Advice]: ...

    def report_reconciliation(
        self,
        advice_id: AdviceId,
        observed_generation: int,
        status: Reconciliation,
        reason: str,
        now: datetime,
    ) -> Advice:
        """Record a controller's report for ``observed_generation``.

        Raises ``NotFoundError`` for an unknown advice, ``ConflictError`` when the generation is
        no longer current (a newer decision superseded it) and ``InputError`` for a generation
        that was never published.
        """
        ...

    # --- scheduler actions -----------------------------------------------------------------
    def begin_action(self, record: ActionRecord) -> bool:
        """Insert the action under its idempotency key; False when the key already exists."""
        ...

    def get_action(self, key: str) -> ActionRecord | None: ...

    def finish_action(
        self, key: str, status: ActionStatus, now: datetime, error: str | None = None
    ) -> None: ...

    def list_actions(
        self, cluster: ClusterName | None = None, job_id: JobId | None = None
    ) -> list[ActionRecord]: ...

    # --- audit -----------------------------------------------------------------------------
    def append_audit(self, event: AuditEvent) -> int:
        """Append one audit event and return its id."""
        ...

    # --- cursors ---------------------------------------------------------------------------
    def get_cursor(self, source: str) -> str | None:
        """A log source's saved position (e.g. file offsets), so restarts resume, not rescan."""
        ...

    def set_cursor(self, source: str, value: str) -> None: ...


class ControllerLedger(Protocol):
    """What a controller writes while it carries out advice: the step ledger (idempotency keys),
    the audit trail and its reconciliation reports.

    The :class:`Store` satisfies it (the embedded controller); so does the HTTP client of the
    advice API (a remote controller). Same errors as the store: ``ConflictError`` when a
    reported generation was superseded, ``NotFoundError`` for an unknown advice or action,
    ``TransientError``/``StoreError`` for "try again".
    """

    def get_action(self, key: str) -> ActionRecord | None: ...

    def begin_action(self, record: ActionRecord) -> bool:
        """Insert the action under its idempotency key; False when the key already exists."""
        ...

    def finish_action(
        self, key: str, status: ActionStatus, now: datetime, error: str | None = None
    ) -> None: ...

    def append_audit(self, event: AuditEvent) -> int:
        """Append one audit event and return its id."""
        ...

    def report_reconciliation(
        self,
        advice_id: AdviceId,
        observed_generation: int,
        status: Reconciliation,
        reason: str,
        now: datetime,
    ) -> Advice:
        """Record the controller's report for ``observed_generation`` (see :class:`Store`)."""
        ...


class FaultInjector(Protocol):
    """Injects faults into a cluster and reports what it injected (simulator, test harness)."""

    def inject(
        self, kind: FaultKind, job_id: JobId | None = None, node: NodeName | None = None
    ) -> FaultRecord:
        """Inject ``kind`` into a running job (any one when None) on ``node`` (one of the job's
        nodes when None). Raises ``PermanentError`` when no running job can take the fault."""
        ...

    def faults(self) -> list[FaultRecord]:
        """Every fault injected so far, oldest first."""
        ...


class Metrics(Protocol):
    """Where the loop reports counters and latencies (Prometheus in production)."""

    def detection(self, cluster: ClusterName, signature_id: str) -> None: ...

    def detection_latency(self, seconds: float) -> None:
        """Seconds from a line being emitted to its detection being stored."""
        ...

    def action_latency(self, seconds: float) -> None:
        """Seconds from the deciding detection being stored to the scheduler action done."""
        ...

    def advice(self, cluster: ClusterName, action: str) -> None: ...

    def loop_pass(self, seconds: float) -> None:
        """Duration of one control-loop pass."""
        ...

    def loop_error(self, stage: str) -> None:
        """A pass stage (observe, evaluate, act) failed."""
        ...


class Workload(Protocol):
    """Submits training jobs (simulator, or sbatch on a real cluster)."""

    def submit(self, spec: JobSpec) -> JobId: ...


class AttributionProvider(Protocol):
    """An external attribution service (HTTP) whose verdict is recorded beside medic's own.

    Advisory only: medic's decision never waits on it for longer than its timeout and never
    depends on its answer. Raises ``TransientError`` when the service cannot be reached.
    """

    @property
    def name(self) -> str: ...

    def attribute(self, job: Job, attempt: int, detections: Sequence[Detection]) -> Verdict: ...


class RepairStore(Protocol):
    """Durable state of node auto-repair: alerts, repairs, policy, breaker, validation results.

    Repair transitions are compare-and-set on the state (``ConflictError`` when another replica
    moved it first); alerts are deduplicated by (cluster, node, key).
    """

    def upsert_alert(self, alert: Alert, now: datetime) -> Alert:
        """Record a firing alert: new -> inserted; seen before -> count+1, last_seen=now, and a
        resolved one fires again (first_seen kept)."""
        ...

    def resolve_alert(self, alert_id: int, now: datetime) -> Alert: ...

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
