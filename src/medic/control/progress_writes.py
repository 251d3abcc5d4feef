"""Progress saved by the control loop: at most every few seconds per attempt, once per pass in all.

Every watched job's progress (steps, checkpoints, last progress time) is stored so that a
restarted medic resumes hang detection and the policy counts attempts without progress. A
progress line arrives per job and step; writing each save as its own statement cost the loop a
transaction per job per pass at scale. :class:`ProgressWrites` gathers the saves of a pass and
writes them in one statement: at the end of the pass, and before any decision (the policy reads
the attempts' progress). A batch that could not be written is kept and written with the next.

A save is due when a milestone moved (first step, checkpoint saved or loaded), when the last save
is older than :data:`SAVE_SECONDS`, or when forced (the attempt is over).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from medic.control.watch import JobWatch
from medic.domain.attempts import Progress
from medic.domain.ids import ClusterName, JobId
from medic.ports import Inventory

__all__ = ["SAVE_SECONDS", "ProgressWriteFailed", "ProgressWrites"]

SAVE_SECONDS = 5.0
"""Longest time a changed progress waits before it is saved."""


class ProgressWriteFailed(Exception):
    """The batch could not be written; ``jobs``: whose progress it held (the cause is chained)."""

    def __init__(self, jobs: tuple[JobId, ...], cause: Exception) -> None:
        super().__init__(f"progress of {len(jobs)} job(s) not saved: {cause!r}")
        self.jobs = jobs
        self.cause = cause


class ProgressWrites:
    """The progress saves of one pass, for one cluster."""

    def __init__(self, cluster: ClusterName, store: Inventory) -> None:
        self._cluster = cluster
        self._store = store
        self._pending: dict[tuple[JobId, int], tuple[JobWatch, Progress, datetime]] = {}

    def offer(self, watch: JobWatch, now: datetime, *, force: bool = False) -> None:
        """Queue the watch's progress when a save is due."""
        saved = watch.saved_progress
        progress = saved.merged(watch.tracker.progress())
        if progress == saved:
            return
        milestone = (
            progress.last_checkpoint_step != saved.last_checkpoint_step
            or progress.first_step != saved.first_step
            or progress.loaded_checkpoint_step != saved.loaded_checkpoint_step
        )
        stale = (
            watch.saved_progress_at is None
            or (now - watch.saved_progress_at).total_seconds() >= SAVE_SECONDS
        )
        if force or milestone or stale:
            self._pending[(watch.job_id, watch.attempt)] = (watch, progress, now)

    def due_at(self, watch: JobWatch) -> datetime | None:
        """When the watch's changed progress falls due by age alone (None: nothing waits)."""
        if watch.saved_progress_at is None:
            return None
        if watch.saved_progress.merged(watch.tracker.progress()) == watch.saved_progress:
            return None
        return watch.saved_progress_at + timedelta(seconds=SAVE_SECONDS)

    def flush(self, held: Collection[JobId] = ()) -> None:
        """Write every queued save in one statement, but those of the ``held`` jobs (backing
        off); the watches learn what was saved. Raises :class:`ProgressWriteFailed` when the
        write failed (the saves stay queued)."""
        if not self._pending:
            return
        # A job backing off after an error keeps its save queued until its back-off ends.
        pending = {k: v for k, v in self._pending.items() if k[0] not in held}
        if not pending:
            return
        self._pending = {k: v for k, v in self._pending.items() if k[0] in held}
        updates = [(job_id, attempt, p) for (job_id, attempt), (_, p, _) in pending.items()]
        try:
            self._store.update_progress_many(self._cluster, updates)
        except Exception as exc:
            # Kept for the next flush (an entry queued since is newer and wins): a quiet job, or
            # an attempt that is over, may not offer it again.
            self._pending = pending | self._pending
            raise ProgressWriteFailed(tuple(dict.fromkeys(u[0] for u in updates)), exc) from exc
        for watch, progress, at in pending.values():
            watch.saved_progress, watch.saved_progress_at = progress, at
