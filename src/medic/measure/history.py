"""Goodput's input read from a store: the intervals of every job that ran in a window.

:mod:`medic.measure.goodput` turns attempts into intervals; this module picks the attempts a
window needs from anything that lists them (the SQL store, a fake), so that the API's goodput and
the ``/metrics`` gauge compute the same figure. It calls the store it is given and nothing else.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from medic.domain.attempts import Attempt
from medic.domain.cluster import Job
from medic.domain.ids import ClusterName, JobId
from medic.measure.goodput import Goodput, Interval, JobKey, goodput, intervals

__all__ = ["AttemptHistory", "window_goodput", "window_intervals"]


class AttemptHistory(Protocol):
    def list_attempts_between(
        self, cluster: ClusterName | None, start: datetime, end: datetime
    ) -> list[Attempt]: ...

    def list_attempts(self, cluster: ClusterName, job_id: JobId) -> list[Attempt]: ...


def window_intervals(
    store: AttemptHistory,
    cluster: ClusterName | None,
    jobs: Sequence[Job],
    start: datetime,
    now: datetime,
) -> list[Interval]:
    """The intervals of every job that ran in ``[start, now)``, history completed where needed."""
    found: dict[JobKey, list[Attempt]] = defaultdict(list)
    for a in store.list_attempts_between(cluster, start, now):
        found[(a.cluster, a.job_id)].append(a)
    # The window can cut a downtime that started before it: a job restarted in the window after an
    # attempt that ended before it, or a job still waiting to run again. Their full history is
    # read (rare: one query per such job) so that downtime is not missed. So is that of a job
    # none of whose attempts in the window saw progress: whether it ever reported progress (its
    # time is then badput, not unmeasured) is a question about its whole history.
    refetch: list[JobKey] = []
    for job in jobs:
        key = (job.cluster, JobId(job.id))
        mine = found.get(key)
        if mine:
            earliest = min(mine, key=lambda a: a.number)
            cut = earliest.number > 0 and earliest.started_at and earliest.started_at > start
            silent = earliest.number > 0 and all(a.progress.last_step is None for a in mine)
            if cut or silent:
                refetch.append(key)
        elif not job.state.is_terminal and job.restart_count > 0:
            refetch.append(key)
    for key in refetch:
        found[key] = store.list_attempts(*key)
    states = {(j.cluster, JobId(j.id)): j.state for j in jobs}
    return intervals([a for attempts in found.values() for a in attempts], now, states)


def window_goodput(
    store: AttemptHistory,
    cluster: ClusterName | None,
    jobs: Sequence[Job],
    start: datetime,
    now: datetime,
) -> Goodput:
    """Goodput of ``[start, now)`` from the store's attempts."""
    return goodput(window_intervals(store, cluster, jobs, start, now), start, now)
