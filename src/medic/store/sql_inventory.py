"""Inventory part of the SQL store: clusters, nodes, jobs, attempts and their progress.

The control loop syncs up to thousands of nodes and hundreds of jobs several times a second, and
almost nothing changes between two passes. :class:`Inventory` remembers what it last wrote per
cluster and sends only rows that differ, as one bulk upsert. The memory only ever *skips* a write
of values identical to the last ones written; it is never used to choose between INSERT and
UPDATE, so rows changed or deleted by another process are still handled correctly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from medic.domain.attempts import Attempt, Progress
from medic.domain.cluster import Job, JobState, Node, NodeState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.store.columns import UtcDateTime
from medic.store.db import Database
from medic.store.tables import attempts, clusters, jobs, nodes

__all__ = ["Inventory"]

UNKNOWN_SCHEDULER = "unknown"
"""Scheduler recorded for a cluster first seen through a sync rather than ``ensure_cluster``."""

_STILL_RUNNING = [
    s.value for s in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING, JobState.UNKNOWN)
]
_NODE_COLUMNS = ("state", "partitions", "gpus", "reason", "updated_at")
_JOB_COLUMNS = tuple(c.name for c in jobs.columns if c.name not in ("cluster", "job_id"))
_PROGRESS_COLUMNS = (
    "first_step",
    "last_step",
    "last_checkpoint_step",
    "loaded_checkpoint_step",
    "last_progress_at",
)


class Inventory:
    """Writes and reads the cluster inventory; one per store, shared by all threads."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._known_clusters: set[str] = set()
        self._nodes: dict[str, dict[str, Node]] = {}
        self._jobs: dict[str, dict[str, Job]] = {}

    # --- writes ----------------------------------------------------------------------------
    def ensure_cluster(self, cluster: ClusterName, scheduler: str) -> None:
        stmt = self._db.upsert(clusters, keys=("name",), update=("scheduler",))
        self._db.write(lambda conn: conn.execute(stmt, {"name": cluster, "scheduler": scheduler}))
        with self._lock:
            self._known_clusters.add(cluster)

    def list_clusters(self) -> dict[ClusterName, str | None]:
        rows = self._db.read(lambda conn: conn.execute(sa.select(clusters)).all())
        return {
            ClusterName(row.name): None if row.scheduler == UNKNOWN_SCHEDULER else row.scheduler
            for row in sorted(rows, key=lambda r: str(r.name))
        }

    def _ensure_cluster_row(self, conn: Connection, cluster: str) -> None:
        # Nodes and jobs reference their cluster; a sync before ensure_cluster still works.
        if cluster not in self._known_clusters:
            stmt = self._db.upsert(clusters, keys=("name",), update=())
            conn.execute(stmt, {"name": cluster, "scheduler": UNKNOWN_SCHEDULER})

    def sync_nodes(self, cluster: ClusterName, current: Sequence[Node], now: datetime) -> None:
        latest: dict[str, Node] = {node.name: node for node in current}
        with self._lock:
            cached = self._nodes.get(cluster, {})
            changed = [
                node
                for name, node in latest.items()
                if (old := cached.get(name)) is not node and old != node
            ]
            if changed:
                rows = [_node_row(cluster, node, now) for node in changed]
                stmt = self._db.upsert(nodes, keys=("cluster", "name"), update=_NODE_COLUMNS)

                def work(conn: Connection) -> None:
                    self._ensure_cluster_row(conn, cluster)
                    conn.execute(stmt, rows)

                self._write_or_forget(cluster, work)
            self._nodes[cluster] = latest

    def sync_jobs(self, cluster: ClusterName, current: Sequence[Job], now: datetime) -> None:
        latest: dict[str, Job] = {job.id: job for job in current}
        with self._lock:
            cached = self._jobs.get(cluster, {})
            changed = [job for job in latest.values() if _differs(cached.get(job.id), job)]
            if changed:
                self._write_or_forget(
                    cluster, lambda conn: self._write_jobs(conn, cluster, changed, now)
                )
            self._jobs[cluster] = latest

    def _write_or_forget(self, cluster: str, work: Callable[[Connection], object]) -> None:
        try:
            self._db.write(work)
        except BaseException:
            # Whatever reached the database is unknown now: rewrite everything next time.
            self._nodes.pop(cluster, None)
            self._jobs.pop(cluster, None)
            raise
        self._known_clusters.add(cluster)

    def _write_jobs(
        self, conn: Connection, cluster: str, changed: Sequence[Job], now: datetime
    ) -> None:
        self._ensure_cluster_row(conn, cluster)
        conn.execute(
            self._db.upsert(jobs, keys=("cluster", "job_id"), update=_JOB_COLUMNS),
            [_job_row(cluster, job, now) for job in changed],
        )
        running = [_attempt_row(cluster, job, now) for job in changed if job.nodes]
        if running:
            # First recorded start and end win: a later pass must not move them.
            stmt = self._db.upsert(
                attempts,
                keys=("cluster", "job_id", "number"),
                update=("nodes", "state"),
                keep_first=("started_at", "ended_at"),
            )
            conn.execute(stmt, running)
        ended_unplaced = [
            {"j": job.id, "n": job.restart_count, "s": job.state.value, "e": job.end_time or now}
            for job in changed
            if not job.nodes and job.state.is_terminal
        ]
        if ended_unplaced:
            # A job that ended without nodes (e.g. cancelled while queued) closes an attempt
            # that exists, but never invents one.
            conn.execute(
                sa.update(attempts)
                .where(
                    attempts.c.cluster == cluster,
                    attempts.c.job_id == sa.bindparam("j"),
                    attempts.c.number == sa.bindparam("n"),
                )
                .values(
                    state=sa.bindparam("s"),
                    ended_at=sa.func.coalesce(
                        attempts.c.ended_at, sa.bindparam("e", type_=UtcDateTime())
                    ),
                ),
                ended_unplaced,
            )
        superseded = [
            {"j": job.id, "n": job.restart_count, "e": now}
            for job in changed
            if job.restart_count > 0
        ]
        if superseded:
            # A requeue starts attempt n+1; attempt n ended even if no pass saw it end.
            conn.execute(
                sa.update(attempts)
                .where(
                    attempts.c.cluster == cluster,
                    attempts.c.job_id == sa.bindparam("j"),
                    attempts.c.number < sa.bindparam("n"),
                    attempts.c.ended_at.is_(None),
                )
                .values(
                    ended_at=sa.bindparam("e", type_=UtcDateTime()),
                    # Last seen still running: it ended because of the requeue itself.
                    state=sa.case(
                        # or_ of equalities, not in_(): expanding IN cannot run in executemany.
                        (
                            sa.or_(*(attempts.c.state == v for v in _STILL_RUNNING)),
                            JobState.REQUEUED.value,
                        ),
                        else_=attempts.c.state,
                    ),
                ),
                superseded,
            )

    def update_progress(
        self, cluster: ClusterName, updates: Sequence[tuple[JobId, int, Progress]]
    ) -> None:
        if not updates:
            return
        rows: list[dict[str, object]] = [
            {
                "cluster": cluster,
                "job_id": job_id,
                "number": attempt,
                "nodes": [],
                "state": JobState.UNKNOWN.value,
                "started_at": None,
                "ended_at": None,
                "first_step": progress.first_step,
                "last_step": progress.last_step,
                "last_checkpoint_step": progress.last_checkpoint_step,
                "loaded_checkpoint_step": progress.loaded_checkpoint_step,
                "last_progress_at": progress.last_progress_at,
            }
            for job_id, attempt, progress in updates
        ]
        stmt = self._db.upsert(
            attempts, keys=("cluster", "job_id", "number"), update=_PROGRESS_COLUMNS
        )
        self._db.write(lambda conn: conn.execute(stmt, rows))

    # --- reads -----------------------------------------------------------------------------
    def list_nodes(self, cluster: ClusterName | None) -> list[Node]:
        query = sa.select(nodes).order_by(nodes.c.cluster, nodes.c.name)
        if cluster is not None:
            query = query.where(nodes.c.cluster == cluster)
        rows = self._db.read(lambda conn: conn.execute(query).all())
        return [_node(row) for row in rows]

    def list_jobs(self, cluster: ClusterName | None) -> list[Job]:
        # Numeric job ids sort as numbers ("99" before "100") when ordered by length first.
        query = sa.select(jobs).order_by(
            jobs.c.cluster, sa.func.length(jobs.c.job_id), jobs.c.job_id
        )
        if cluster is not None:
            query = query.where(jobs.c.cluster == cluster)
        rows = self._db.read(lambda conn: conn.execute(query).all())
        return [_job(row) for row in rows]

    def get_job(self, cluster: ClusterName, job_id: JobId) -> Job | None:
        query = sa.select(jobs).where(jobs.c.cluster == cluster, jobs.c.job_id == job_id)
        row = self._db.read(lambda conn: conn.execute(query).first())
        return None if row is None else _job(row)

    def list_attempts(self, cluster: ClusterName, job_id: JobId) -> list[Attempt]:
        query = (
            sa.select(attempts)
            .where(attempts.c.cluster == cluster, attempts.c.job_id == job_id)
            .order_by(attempts.c.number)
        )
        rows = self._db.read(lambda conn: conn.execute(query).all())
        return [_attempt(row) for row in rows]

    def list_attempts_between(
        self, cluster: ClusterName | None, start: datetime, end: datetime
    ) -> list[Attempt]:
        query = (
            sa.select(attempts)
            .where(
                attempts.c.started_at.is_not(None),
                attempts.c.started_at < end,
                sa.or_(attempts.c.ended_at.is_(None), attempts.c.ended_at >= start),
            )
            .order_by(attempts.c.cluster, attempts.c.job_id, attempts.c.number)
        )
        if cluster is not None:
            query = query.where(attempts.c.cluster == cluster)
        rows = self._db.read(lambda conn: conn.execute(query).all())
        return [_attempt(row) for row in rows]


def _differs(previous: Job | None, job: Job) -> bool:
    # Job leaves its options out of ==; the same snapshot object is the common case.
    if previous is job:
        return False
    return previous is None or previous != job or previous.options != job.options


def _node_row(cluster: str, node: Node, now: datetime) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "name": node.name,
        "state": node.state.value,
        "partitions": list(node.partitions),
        "gpus": node.gpus,
        "reason": node.reason,
        "updated_at": now,
    }


def _job_row(cluster: str, job: Job, now: datetime) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "job_id": job.id,
        "name": job.name,
        "state": job.state.value,
        "partition": job.partition,
        "nodes": list(job.nodes),
        "excluded_nodes": sorted(job.excluded_nodes),
        "restart_count": job.restart_count,
        "held": job.held,
        "num_nodes": job.num_nodes,
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "exit_code": job.exit_code,
        "comment": job.comment,
        "log_paths": list(job.log_paths),
        "options": job.options,
        "updated_at": now,
    }


def _attempt_row(cluster: str, job: Job, now: datetime) -> dict[str, Any]:
    ended = (job.end_time or now) if job.state.is_terminal else None
    return {
        "cluster": cluster,
        "job_id": job.id,
        "number": job.restart_count,
        "nodes": list(job.nodes),
        "state": job.state.value,
        "started_at": job.start_time or now,
        "ended_at": ended,
    }


def _node(row: Row[Any]) -> Node:
    return Node(
        name=NodeName(row.name),
        state=NodeState(row.state),
        partitions=tuple(row.partitions),
        gpus=row.gpus,
        reason=row.reason,
    )


def _job(row: Row[Any]) -> Job:
    return Job(
        id=JobId(row.job_id),
        cluster=ClusterName(row.cluster),
        name=row.name,
        state=JobState(row.state),
        partition=row.partition,
        nodes=tuple(NodeName(n) for n in row.nodes),
        excluded_nodes=frozenset(NodeName(n) for n in row.excluded_nodes),
        restart_count=row.restart_count,
        held=bool(row.held),
        num_nodes=row.num_nodes,
        submit_time=row.submit_time,
        start_time=row.start_time,
        end_time=row.end_time,
        exit_code=row.exit_code,
        comment=row.comment,
        log_paths=tuple(row.log_paths),
        options=dict(row.options),
    )


def _attempt(row: Row[Any]) -> Attempt:
    return Attempt(
        cluster=ClusterName(row.cluster),
        job_id=JobId(row.job_id),
        number=row.number,
        nodes=tuple(NodeName(n) for n in row.nodes),
        state=JobState(row.state),
        started_at=row.started_at,
        ended_at=row.ended_at,
        progress=Progress(
            first_step=row.first_step,
            last_step=row.last_step,
            last_checkpoint_step=row.last_checkpoint_step,
            loaded_checkpoint_step=row.loaded_checkpoint_step,
            last_progress_at=row.last_progress_at,
        ),
    )
