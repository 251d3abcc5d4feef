"""A snapshot cache in front of a scheduler: the cluster-wide listings are read at most once per
``ttl`` seconds, whatever the loop's pace.

The loop runs often so that new log lines are seen within a fraction of a second, but listing
every job and node of a real cluster that often would load its controller (``squeue`` and
``sinfo`` five times a second). Single-job reads (``get_job``) always go to the scheduler: the
controller re-reads a job before every step. Any mutating call drops the cached listings, so the
next pass sees its effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from medic.domain.cluster import Job, Node
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.ports import Clock, Scheduler

__all__ = ["SnapshotCache"]


class SnapshotCache:
    """Wraps a :class:`~medic.ports.Scheduler`; itself a Scheduler."""

    def __init__(self, inner: Scheduler, *, clock: Clock, ttl_seconds: float) -> None:
        self._inner = inner
        self._clock = clock
        self._ttl = timedelta(seconds=ttl_seconds)
        self._nodes: tuple[datetime, Sequence[Node]] | None = None
        self._jobs: tuple[datetime, Sequence[Job]] | None = None

    @property
    def cluster(self) -> ClusterName:
        return self._inner.cluster

    def list_nodes(self) -> Sequence[Node]:
        now = self._clock.now()
        if self._nodes is None or now - self._nodes[0] >= self._ttl:
            self._nodes = (now, self._inner.list_nodes())
        return self._nodes[1]

    def list_jobs(self) -> Sequence[Job]:
        now = self._clock.now()
        if self._jobs is None or now - self._jobs[0] >= self._ttl:
            self._jobs = (now, self._inner.list_jobs())
        return self._jobs[1]

    def get_job(self, job_id: JobId) -> Job:
        return self._inner.get_job(job_id)

    def _changed(self) -> None:
        self._nodes = self._jobs = None

    def requeue_hold(self, job_id: JobId) -> None:
        self._changed()
        self._inner.requeue_hold(job_id)

    def set_admin_comment(self, job_id: JobId, text: str) -> None:
        self._changed()
        self._inner.set_admin_comment(job_id, text)

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        self._changed()
        self._inner.set_excluded_nodes(job_id, nodes)

    def release(self, job_id: JobId) -> None:
        self._changed()
        self._inner.release(job_id)

    def cancel(self, job_id: JobId, reason: str) -> None:
        self._changed()
        self._inner.cancel(job_id, reason)

    def drain_node(self, node: NodeName, reason: str) -> None:
        self._changed()
        self._inner.drain_node(node, reason)

    def resume_node(self, node: NodeName, reason: str) -> None:
        self._changed()
        self._inner.resume_node(node, reason)
