"""FIFO first-fit scheduling for the simulated cluster: free nodes per partition and the queue.

:class:`Placement` keeps an index of the free nodes of each partition (updated through
:meth:`Placement.touch` whenever a node changes) and the pending jobs in submission order. A
scheduling pass (:meth:`Placement.schedule_if_dirty`) runs only when something changed that may let
a pending job start, and starts every job that fits, first fit: a job that does not fit now does
not block the jobs behind it. A job gets the lowest-indexed free nodes of its partition, so a
multi-node job gets neighbouring nodes whatever the set's order.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Sequence

from medic.domain.cluster import JobState
from medic.schedulers.sim.state import SimJob, SimNode

__all__ = ["Placement"]


class Placement:
    """Free nodes per partition and the FIFO queue of pending jobs.

    ``start`` is called with a job and the nodes it was given, once they are assigned to it.
    """

    def __init__(
        self, partitions: Sequence[str], start: Callable[[SimJob, tuple[SimNode, ...]], None]
    ) -> None:
        # Free nodes per partition, kept up to date by touch: scheduling never scans the cluster.
        self._free: dict[str, set[SimNode]] = {p: set() for p in partitions}
        self.size = dict.fromkeys(partitions, 0)
        """Nodes per partition."""
        self._queue: list[SimJob] = []
        """Pending jobs (held or not) in FIFO order."""
        self.dirty = False
        """Something changed that may let a pending job start."""
        self._start = start

    def add_node(self, node: SimNode) -> None:
        """A new (free) node of its partition."""
        self._free[node.partition].add(node)
        self.size[node.partition] += 1

    def touch(self, node: SimNode) -> None:
        """Keep the free-node index in step with ``node`` after any change to it."""
        if node.is_free:
            self._free[node.partition].add(node)
            self.dirty = True
        else:
            self._free[node.partition].discard(node)

    def submitted(self, job: SimJob) -> None:
        """A newly submitted job: the last in the queue."""
        self._queue.append(job)
        self.dirty = True

    def enqueue(self, job: SimJob) -> None:
        """A job pending again (requeued): back in the queue at its submission order."""
        bisect.insort(self._queue, job, key=lambda j: j.order)
        self.dirty = True

    def schedule_if_dirty(self) -> None:
        """Start every pending job that fits, if something changed since the last pass."""
        if not self.dirty:
            return
        self.dirty = False
        waiting: list[SimJob] = []
        for job in self._queue:
            if job.state is not JobState.PENDING:
                continue  # cancelled while queued
            if job.held or not self._try_start(job):
                waiting.append(job)
        self._queue = waiting

    def _try_start(self, job: SimJob) -> bool:
        free = self._free[job.partition]
        if len(free) < job.num_nodes:
            return False
        excluded = job.excluded
        usable = [n for n in free if n.name not in excluded] if excluded else free
        if len(usable) < job.num_nodes:
            return False
        # Lowest indices first: deterministic whatever the set's order, and contiguous blocks.
        chosen = tuple(heapq.nsmallest(job.num_nodes, usable, key=lambda n: n.index))
        for node in chosen:
            node.job = job
            free.discard(node)
        self._start(job, chosen)
        return True
