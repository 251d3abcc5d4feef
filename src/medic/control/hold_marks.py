"""The controller's side of the fail-open mark: put on a job right before medic holds it, taken
off once the recovery converged (:mod:`medic.domain.holds` says what the mark is,
:mod:`medic.control.fail_open` who reads it).
"""

from __future__ import annotations

import logging
from datetime import datetime

from medic.domain.advice import Advice
from medic.domain.cluster import Job
from medic.domain.holds import HoldMark, read_mark, with_mark, without_mark
from medic.errors import MedicError, PermanentError
from medic.ports import Scheduler

__all__ = ["mark_hold", "unmark_hold"]

logger = logging.getLogger(__name__)


def mark_hold(scheduler: Scheduler, advice: Advice, job: Job, now: datetime) -> None:
    """Mark the job with what ``medic watchdog`` puts back should the recovery never converge.
    A scheduler that refuses the mark for good (no right to set an admin comment) is logged and
    the hold goes ahead: recovery matters more than this net under it. A transient failure
    raises: no hold without its mark."""
    mark = HoldMark(advice.id, advice.generation, advice.attempt, now, job.excluded_nodes)
    try:
        scheduler.set_admin_comment(job.id, with_mark(job.admin_comment, mark))
    except PermanentError as exc:
        logger.warning("job %s: cannot mark the hold for the watchdog: %s", job.id, exc)


def unmark_hold(scheduler: Scheduler, advice: Advice, job: Job) -> None:
    """Take the mark of ``advice`` off a job whose recovery converged. Also when the job as read
    shows none: that read can predate the mark (a snapshot), and writing the comment back
    without a mark is harmless; another advice's mark is left alone."""
    mark = read_mark(job.admin_comment)
    if mark is not None and mark.advice_id != advice.id:
        return
    try:
        scheduler.set_admin_comment(job.id, without_mark(job.admin_comment))
    except MedicError as exc:  # ``medic watchdog`` takes it off once the job runs
        logger.warning("job %s: cannot take the hold mark off: %s", job.id, exc)
