"""``medic watchdog``: the fail-open guarantee that needs no medic process but itself.

A requeue is hold -> exclude -> release. A controller that dies between the hold and the release
(every replica of ``medic serve``, a ``medic controller``, the database) would leave the job
waiting in the queue for good. Right before every requeue-hold the controller marks the job in
the scheduler itself (:mod:`medic.domain.holds`: the job's admin comment), with the job's
excluded nodes as they were. This watchdog, run beside the scheduler with nothing but its CLI,
looks at every job on each poll:

* marked, held by medic (held, and requeued past the marked attempt) for
  ``controller.watchdog_timeout_seconds``: its original excluded nodes are put back and it is
  released, and the mark taken off (act mode), or it only says it would (observe mode);
* marked but no longer held by medic (released, running, ended): the recovery went on, and the
  mark is taken off once the job runs again (the controller takes it off when the recovery
  converges; this covers a controller that died right after the release). An ended job's mark
  is left as it is.

Every decision is appended, fsync'd, to the watchdog's own journal (a JSON-lines file), and
logged; it needs no database or API to be reached.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from medic.domain.cluster import Job, JobState, Mode
from medic.domain.holds import HoldMark, read_mark, without_mark
from medic.domain.ids import JobId
from medic.errors import MedicError
from medic.ports import Clock, Scheduler

__all__ = ["FailOpen"]

logger = logging.getLogger(__name__)


class FailOpen:
    """One watchdog beside one scheduler (see the module docstring)."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        clock: Clock,
        timeout_seconds: float,
        mode: Mode,
        journal: Path,
    ) -> None:
        self._scheduler = scheduler
        self._clock = clock
        self._timeout = timeout_seconds
        self._mode = mode
        self._journal = journal
        self._observed: set[tuple[JobId, int]] = set()

    def check(self) -> list[JobId]:
        """One poll over the scheduler's jobs; the jobs it released. A failure with one job
        is logged and never stops the others."""
        released = []
        for job in self._scheduler.list_jobs():
            mark = read_mark(job.admin_comment)
            if mark is None:
                continue
            try:
                if self._check(job, mark):
                    released.append(job.id)
            except MedicError as exc:
                logger.warning("watchdog: job %s: %s (will retry)", job.id, exc)
        return released

    def _check(self, job: Job, mark: HoldMark) -> bool:
        now = self._clock.now()
        if not (job.held and job.restart_count > mark.attempt):
            # An ended job is left alone (Slurm may refuse to update it; it leaves the listing).
            if job.state is JobState.RUNNING:
                self._scheduler.set_admin_comment(job.id, without_mark(job.admin_comment))
                self._write(job, mark, now, "unmarked", "no longer held by medic")
            return False
        held_for = (now - mark.held_at).total_seconds()
        if held_for < self._timeout:
            return False
        if self._mode is Mode.OBSERVE:
            if (job.id, mark.attempt) not in self._observed:
                self._observed.add((job.id, mark.attempt))
                self._write(job, mark, now, "would-release", f"held {held_for:.0f} s")
                logger.warning(
                    "watchdog (observe): would release job %s (held %.0f s)", job.id, held_for
                )
            return False
        self._write(job, mark, now, "releasing", f"held {held_for:.0f} s without convergence")
        if job.excluded_nodes != mark.excluded:
            self._scheduler.set_excluded_nodes(job.id, mark.excluded)
        self._scheduler.release(job.id)
        self._scheduler.set_admin_comment(job.id, without_mark(job.admin_comment))
        self._write(job, mark, self._clock.now(), "released", "original excluded nodes back")
        logger.warning(
            "watchdog: released job %s with its original excluded nodes after %.0f s held",
            job.id,
            held_for,
        )
        return True

    def _write(self, job: Job, mark: HoldMark, now: datetime, what: str, why: str) -> None:
        record: dict[str, Any] = {
            "time": now.isoformat(),
            "what": what,
            "why": why,
            "mode": self._mode.value,
            "cluster": job.cluster,
            "job_id": job.id,
            "advice_id": mark.advice_id,
            "generation": mark.generation,
            "attempt": mark.attempt,
            "held_at": mark.held_at.isoformat(),
            "original_excluded_nodes": sorted(mark.excluded),
        }
        try:
            self._journal.parent.mkdir(parents=True, exist_ok=True)
            with self._journal.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:  # the release matters more than its record: logged, not raised
            logger.error("watchdog: cannot write %s (%s): %s", self._journal, what, exc)
