"""The durable state of job recovery, in ports sized to their consumers, and the remote
controller's ledger.

- :class:`Inventory`: clusters, nodes, jobs, their attempts and progress;
- :class:`Evidence`: detections and verdicts;
- :class:`AdviceStore`: advice and the controllers' reconciliation reports;
- :class:`AuditLog` (append) and :class:`AuditQuery` (read): the audit trail;
- :class:`ActionLedger`: the scheduler actions' step ledger (idempotency keys), audited;
- :class:`CursorStore`: log sources' saved positions;
- :class:`LeaseStore`: leases of control work and their fencing tokens;
- :class:`Store`: all of them, what the composition root opens (``SqlStore``);
- :class:`ControllerLedger`: what a controller writes, embedded (the store) or remote (HTTP).

Part of :mod:`medic.ports` (see its docstring); import the ports from there. Every store port
raises ``StoreError`` when the database fails and ``ConflictError`` when a compare-and-set loses.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from medic.domain.actions import ActionRecord, ActionStatus
from medic.domain.advice import Advice, AdviceRequest, Reconciliation
from medic.domain.attempts import Attempt, Progress
from medic.domain.audit import AuditEvent, AuditKind, AuditOrder
from medic.domain.cluster import Job, Node
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.ids import AdviceId, ClusterName, JobId
from medic.domain.leases import Fence, Lease

__all__ = [
    "ActionLedger",
    "AdviceStore",
    "AuditLog",
    "AuditQuery",
    "ControllerLedger",
    "CursorStore",
    "Evidence",
    "Inventory",
    "LeaseStore",
    "Store",
]


class Inventory(Protocol):
    """Clusters, nodes and jobs as the scheduler last showed them; jobs' attempts and progress."""

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

    def update_progress_many(
        self, cluster: ClusterName, updates: Sequence[tuple[JobId, int, Progress]]
    ) -> None:
        """:meth:`update_progress` for many attempts ``(job, attempt, progress)``, in one
        statement (the control loop's once-a-pass write)."""
        ...


class Evidence(Protocol):
    """What diagnosis found: detections (log lines matched) and verdicts (attempts decided)."""

    def add_detections(self, cluster: ClusterName, detections: Sequence[Detection]) -> None: ...

    def list_detections(
        self, cluster: ClusterName, job_id: JobId, attempt: int | None = None
    ) -> list[Detection]: ...

    def add_verdict(self, cluster: ClusterName, verdict: Verdict) -> int: ...

    def list_verdicts(self, cluster: ClusterName, job_id: JobId) -> list[Verdict]: ...


class AdviceStore(Protocol):
    """Each job's advice (one current generation) and how far controllers carried it out."""

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


class AuditLog(Protocol):
    """Write side of the audit trail: append-only, no method updates or deletes an event."""

    def append_audit(self, event: AuditEvent) -> int:
        """Append one audit event and return its id."""
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


class ActionLedger(AuditLog, Protocol):
    """The step ledger of scheduler actions (idempotency keys), each step audited."""

    def begin_action(
        self, record: ActionRecord, fence: Fence | None = None, event: AuditEvent | None = None
    ) -> bool:
        """Insert the action under its idempotency key; False when the key already exists.

        With ``fence`` (a lease holder's): ``FencedError`` unless ``fence`` is the lease's holder
        and token and the lease has not run out, checked in the transaction that records the
        step; a step whose last try failed is then begun again (True), under this fence.
        ``event`` goes to the audit trail with the step (the store: in its transaction)."""
        ...

    def get_action(self, key: str) -> ActionRecord | None: ...

    def finish_action(
        self,
        key: str,
        status: ActionStatus,
        now: datetime,
        error: str | None = None,
        begun_by: tuple[str, int] | None = None,
        event: AuditEvent | None = None,
    ) -> None:
        """Record a step's outcome, and ``event`` with it (the store: in one transaction). With
        ``begun_by`` (holder, token): only of the try they began and that is still started
        (``ConflictError`` otherwise, and ``event`` is not recorded)."""
        ...

    def list_actions(
        self, cluster: ClusterName | None = None, job_id: JobId | None = None
    ) -> list[ActionRecord]: ...


class LeaseStore(Protocol):
    """Leases of control work (:mod:`medic.domain.leases`), taken by compare-and-set."""

    def acquire_lease(self, name: str, holder: str, now: datetime, ttl_seconds: float) -> Lease:
        """Take or renew ``name`` for ``holder`` (a free, expired or own lease); the live holder's
        lease, unchanged, when another process holds it."""
        ...

    def release_lease(self, name: str, holder: str, now: datetime) -> bool:
        """Let ``holder``'s lease run out now (a clean shutdown); False when it did not hold it."""
        ...

    def list_leases(self) -> list[Lease]: ...


class CursorStore(Protocol):
    """Log sources' saved positions (e.g. file offsets), so restarts resume, not rescan."""

    def get_cursor(self, source: str) -> str | None: ...

    def set_cursor(self, source: str, value: str) -> None: ...


class Store(
    Inventory, Evidence, AdviceStore, ActionLedger, AuditQuery, CursorStore, LeaseStore, Protocol
):
    """Job recovery's durable state, every port above in one (``SqlStore``): what the composition
    root opens and hands, port by port, to its consumers."""


class ControllerLedger(Protocol):
    """What a controller writes while it carries out advice: the step ledger (idempotency keys),
    the audit trail and its reconciliation reports.

    The :class:`Store` satisfies it (the embedded controller); so does the HTTP client of the
    advice API (a remote controller). Same errors as the store: ``ConflictError`` when a
    reported generation was superseded, ``NotFoundError`` for an unknown advice or action,
    ``TransientError``/``StoreError`` for "try again".
    """

    def get_action(self, key: str) -> ActionRecord | None: ...

    def begin_action(
        self, record: ActionRecord, fence: Fence | None = None, event: AuditEvent | None = None
    ) -> bool:
        """Insert the action under its idempotency key; False when the key already exists.

        With ``fence`` (a lease holder's): ``FencedError`` unless ``fence`` is the lease's holder
        and token and the lease has not run out, checked in the transaction that records the
        step; a step whose last try failed is then begun again (True), under this fence.
        ``event`` goes to the audit trail with the step (the store: in its transaction)."""
        ...

    def finish_action(
        self,
        key: str,
        status: ActionStatus,
        now: datetime,
        error: str | None = None,
        begun_by: tuple[str, int] | None = None,
        event: AuditEvent | None = None,
    ) -> None:
        """Record a step's outcome, and ``event`` with it (the store: in one transaction). With
        ``begun_by`` (holder, token): only of the try they began and that is still started
        (``ConflictError`` otherwise, and ``event`` is not recorded)."""
        ...

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
        """Record the controller's report for ``observed_generation`` (see :class:`AdviceStore`)."""
        ...
