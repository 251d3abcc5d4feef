"""``SqlStore``: every store port of ``medic.ports`` on SQLAlchemy Core.

This class is a thin facade: the work lives, for ``Store`` (``Inventory``, ``Evidence``,
``AdviceStore``, ``ActionLedger``, ``AuditLog``, ``AuditQuery``, ``CursorStore``), in
``sql_inventory`` (clusters, nodes, jobs, attempts), ``sql_diagnosis`` (detections, verdicts),
``sql_advice`` (advice), ``sql_actions`` (the step ledger), ``sql_leases`` (leases and fencing),
``sql_audit`` (audit trail, cursors); for
``RepairStore`` in ``sql_repairs`` (repairs, validation results), ``sql_repair_state`` (alerts,
repair policy, breaker) and ``sql_health`` (node health); for ``TokenStore`` and ``ModeStore`` in
``sql_tokens`` (API tokens, console sessions, run-time modes), all on one
:class:`~medic.store.db.Database`. The composition root hands it to each consumer typed by the
ports that consumer uses.

One instance is safe to share between threads (control loop, API workers): every call takes its
own pooled connection and transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy.engine import Engine

from medic.domain.actions import ActionRecord, ActionStatus
from medic.domain.advice import Advice, AdviceRequest, Reconciliation
from medic.domain.attempts import Attempt, Progress
from medic.domain.audit import AuditEvent, AuditKind, AuditOrder
from medic.domain.auth import Session, Token
from medic.domain.cluster import Job, Node
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.domain.leases import Fence, Lease
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
from medic.store import (
    sql_actions,
    sql_advice,
    sql_audit,
    sql_diagnosis,
    sql_health,
    sql_leases,
    sql_repair_state,
    sql_repairs,
    sql_tokens,
)
from medic.store.db import Database
from medic.store.sql_inventory import Inventory

__all__ = ["SqlStore"]


class SqlStore:
    """Durable state in SQLite, PostgreSQL or MySQL/MariaDB (see ``medic.ports.Store``,
    ``RepairStore``, ``TokenStore`` and ``ModeStore``)."""

    def __init__(self, engine: Engine) -> None:
        """Wrap a ready engine; the schema must be migrated (``create_store`` does both)."""
        self._db = Database(engine)
        self._inventory = Inventory(self._db)

    @property
    def url(self) -> str:
        """The database URL with the password masked."""
        return self._db.url

    def close(self) -> None:
        """Close all pooled connections; the store must not be used afterwards."""
        self._db.engine.dispose()

    def __repr__(self) -> str:
        return f"SqlStore({self._db.url!r})"

    # --- inventory -------------------------------------------------------------------------
    def ensure_cluster(self, cluster: ClusterName, scheduler: str) -> None:
        self._inventory.ensure_cluster(cluster, scheduler)

    def list_clusters(self) -> dict[ClusterName, str | None]:
        return self._inventory.list_clusters()

    def sync_nodes(self, cluster: ClusterName, nodes: Sequence[Node], now: datetime) -> None:
        self._inventory.sync_nodes(cluster, nodes, now)

    def sync_jobs(self, cluster: ClusterName, jobs: Sequence[Job], now: datetime) -> None:
        self._inventory.sync_jobs(cluster, jobs, now)

    def list_nodes(self, cluster: ClusterName | None = None) -> list[Node]:
        return self._inventory.list_nodes(cluster)

    def list_jobs(self, cluster: ClusterName | None = None) -> list[Job]:
        return self._inventory.list_jobs(cluster)

    def get_job(self, cluster: ClusterName, job_id: JobId) -> Job | None:
        return self._inventory.get_job(cluster, job_id)

    def list_attempts(self, cluster: ClusterName, job_id: JobId) -> list[Attempt]:
        return self._inventory.list_attempts(cluster, job_id)

    def list_attempts_between(
        self, cluster: ClusterName | None, start: datetime, end: datetime
    ) -> list[Attempt]:
        return self._inventory.list_attempts_between(cluster, start, end)

    def update_progress(
        self, cluster: ClusterName, job_id: JobId, attempt: int, progress: Progress
    ) -> None:
        self._inventory.update_progress(cluster, [(job_id, attempt, progress)])

    def update_progress_many(
        self, cluster: ClusterName, updates: Sequence[tuple[JobId, int, Progress]]
    ) -> None:
        self._inventory.update_progress(cluster, updates)

    # --- diagnosis -------------------------------------------------------------------------
    def add_detections(self, cluster: ClusterName, detections: Sequence[Detection]) -> None:
        sql_diagnosis.add_detections(self._db, cluster, detections)

    def list_detections(
        self, cluster: ClusterName, job_id: JobId, attempt: int | None = None
    ) -> list[Detection]:
        return sql_diagnosis.list_detections(self._db, cluster, job_id, attempt)

    def add_verdict(self, cluster: ClusterName, verdict: Verdict) -> int:
        return sql_diagnosis.add_verdict(self._db, cluster, verdict)

    def list_verdicts(self, cluster: ClusterName, job_id: JobId) -> list[Verdict]:
        return sql_diagnosis.list_verdicts(self._db, cluster, job_id)

    # --- advice ----------------------------------------------------------------------------
    def publish_advice(self, request: AdviceRequest, now: datetime) -> Advice:
        return sql_advice.publish_advice(self._db, request, now)

    def get_advice(self, advice_id: AdviceId) -> Advice | None:
        return sql_advice.get_advice(self._db, advice_id)

    def advice_for_job(self, cluster: ClusterName, job_id: JobId) -> Advice | None:
        return sql_advice.advice_for_job(self._db, cluster, job_id)

    def list_advice(
        self, *, cluster: ClusterName | None = None, active_only: bool = False
    ) -> list[Advice]:
        return sql_advice.list_advice(self._db, cluster, active_only)

    def report_reconciliation(
        self,
        advice_id: AdviceId,
        observed_generation: int,
        status: Reconciliation,
        reason: str,
        now: datetime,
    ) -> Advice:
        # ``reason`` has no place in Advice; the caller records it in the audit trail.
        del reason
        return sql_advice.report_reconciliation(
            self._db, advice_id, observed_generation, status, now
        )

    # --- scheduler actions -----------------------------------------------------------------
    def begin_action(
        self, record: ActionRecord, fence: Fence | None = None, event: AuditEvent | None = None
    ) -> bool:
        return sql_actions.begin_action(self._db, record, fence, event)

    def get_action(self, key: str) -> ActionRecord | None:
        return sql_actions.get_action(self._db, key)

    def finish_action(
        self,
        key: str,
        status: ActionStatus,
        now: datetime,
        error: str | None = None,
        begun_by: tuple[str, int] | None = None,
        event: AuditEvent | None = None,
    ) -> None:
        sql_actions.finish_action(self._db, key, status, now, error, begun_by, event)

    def list_actions(
        self, cluster: ClusterName | None = None, job_id: JobId | None = None
    ) -> list[ActionRecord]:
        return sql_actions.list_actions(self._db, cluster, job_id)

    # --- leases ----------------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, now: datetime, ttl_seconds: float) -> Lease:
        return sql_leases.acquire_lease(self._db, name, holder, now, ttl_seconds)

    def release_lease(self, name: str, holder: str, now: datetime) -> bool:
        return sql_leases.release_lease(self._db, name, holder, now)

    def list_leases(self) -> list[Lease]:
        return sql_leases.list_leases(self._db)

    @property
    def single_process(self) -> bool:
        """True on SQLite: one process may act on it (the embedded default)."""
        return self._db.dialect == "sqlite"

    # --- audit -----------------------------------------------------------------------------
    def append_audit(self, event: AuditEvent) -> int:
        return sql_audit.append_audit(self._db, event)

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
        return sql_audit.query_audit(
            self._db,
            cluster=cluster,
            job_id=job_id,
            subject_type=subject_type,
            subject_id=subject_id,
            kind=kind,
            actor=actor,
            since=since,
            until=until,
            after_id=after_id,
            before_id=before_id,
            order=order,
            limit=limit,
        )

    # --- cursors ---------------------------------------------------------------------------
    def get_cursor(self, source: str) -> str | None:
        return sql_audit.get_cursor(self._db, source)

    def set_cursor(self, source: str, value: str) -> None:
        sql_audit.set_cursor(self._db, source, value)

    # --- node auto-repair: alerts ------------------------------------------------------------
    def upsert_alert(self, alert: Alert, now: datetime) -> Alert:
        return sql_repair_state.upsert_alert(self._db, alert, now)

    def resolve_alert(self, alert_id: int, now: datetime) -> Alert:
        return sql_repair_state.resolve_alert(self._db, alert_id, now)

    def get_alert(self, alert_id: int) -> Alert | None:
        return sql_repair_state.get_alert(self._db, alert_id)

    def put_node_health(
        self, cluster: ClusterName, health: Mapping[NodeName, NodeHealth], now: datetime
    ) -> None:
        sql_health.put_node_health(self._db, cluster, health, now)

    def list_node_health(self, cluster: ClusterName | None = None) -> list[NodeHealthEntry]:
        return sql_health.list_node_health(self._db, cluster)

    def list_alerts(
        self,
        *,
        cluster: ClusterName | None = None,
        node: NodeName | None = None,
        state: AlertState | None = None,
        unmapped_only: bool = False,
    ) -> list[Alert]:
        return sql_repair_state.list_alerts(
            self._db, cluster=cluster, node=node, state=state, unmapped_only=unmapped_only
        )

    # --- node auto-repair: repairs -----------------------------------------------------------
    def create_repair(
        self,
        request: RepairRequest,
        *,
        state: RepairState,
        now: datetime,
        approved_by: str | None = None,
        rule: str | None = None,
    ) -> tuple[Repair, bool]:
        return sql_repairs.create_repair(
            self._db, request, state=state, now=now, approved_by=approved_by, rule=rule
        )

    def get_repair(self, repair_id: int) -> Repair | None:
        return sql_repairs.get_repair(self._db, repair_id)

    def find_repair(
        self, cluster: ClusterName, requested_by: str, request_id: str
    ) -> Repair | None:
        return sql_repairs.find_repair(self._db, cluster, requested_by, request_id)

    def list_repairs(
        self,
        *,
        cluster: ClusterName | None = None,
        node: NodeName | None = None,
        states: frozenset[RepairState] | None = None,
        since: datetime | None = None,
    ) -> list[Repair]:
        return sql_repairs.list_repairs(
            self._db, cluster=cluster, node=node, states=states, since=since
        )

    def transition_repair(
        self,
        repair_id: int,
        expected: RepairState,
        new: RepairState,
        now: datetime,
        update: RepairUpdate | None = None,
    ) -> Repair:
        return sql_repairs.transition_repair(self._db, repair_id, expected, new, now, update)

    def claim_repair(
        self, repair_id: int, state: RepairState, owner: str, now: datetime, until: datetime
    ) -> Repair:
        return sql_repairs.claim_repair(self._db, repair_id, state, owner, now, until)

    def note_checkpoint_baseline(
        self, repair_id: int, state: RepairState, baseline: Mapping[str, int | None]
    ) -> Repair:
        return sql_repairs.note_checkpoint_baseline(self._db, repair_id, state, baseline)

    # --- node auto-repair: policy, breaker, validation ---------------------------------------
    def get_repair_policy(self, cluster: ClusterName) -> RepairPolicy:
        return sql_repair_state.get_repair_policy(self._db, cluster)

    def put_repair_policy(self, cluster: ClusterName, policy: RepairPolicy) -> None:
        sql_repair_state.put_repair_policy(self._db, cluster, policy)

    def get_breaker(self, cluster: ClusterName) -> Breaker:
        return sql_repair_state.get_breaker(self._db, cluster)

    def set_breaker(self, breaker: Breaker, *, expected_tripped: bool) -> Breaker:
        return sql_repair_state.set_breaker(self._db, breaker, expected_tripped=expected_tripped)

    def add_validation(self, result: ValidationResult) -> None:
        sql_repairs.add_validation(self._db, result)

    def list_validations(self, repair_id: int) -> list[ValidationResult]:
        return sql_repairs.list_validations(self._db, repair_id)

    # --- the HTTP API: tokens and console sessions -----------------------------------------
    def create_token(self, token: Token) -> None:
        sql_tokens.create_token(self._db, token)

    def get_token(self, name: str) -> Token | None:
        return sql_tokens.get_token(self._db, name)

    def find_token(self, secret_hash: str) -> Token | None:
        return sql_tokens.find_token(self._db, secret_hash)

    def list_tokens(self) -> list[Token]:
        return sql_tokens.list_tokens(self._db)

    def revoke_token(self, name: str, now: datetime) -> Token:
        return sql_tokens.revoke_token(self._db, name, now)

    def create_session(self, session: Session) -> None:
        sql_tokens.create_session(self._db, session)

    def get_session(self, id_hash: str) -> Session | None:
        return sql_tokens.get_session(self._db, id_hash)

    def delete_session(self, id_hash: str) -> bool:
        return sql_tokens.delete_session(self._db, id_hash)

    def purge_sessions(self, now: datetime) -> int:
        return sql_tokens.purge_sessions(self._db, now)

    # --- run-time modes ----------------------------------------------------------------------
    def get_modes(self, cluster: ClusterName) -> ClusterModes:
        return sql_tokens.get_modes(self._db, cluster)

    def put_modes(self, modes: ClusterModes, now: datetime, by: str) -> ClusterModes:
        return sql_tokens.put_modes(self._db, modes, now, by)
