"""Which mode (observe or act) each watched job runs in, decided once per pass.

A job's own comment (``{"medic": {"mode": ...}}``) wins; else the run-time modes operators switch
through the API for its partition or its cluster (``ModeStore``), else ``scheduler.mode``. The
stored modes are read once per pass; when the store cannot answer, the last known stay in force.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from medic.domain.cluster import Job, Mode, Node
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.modes import ClusterModes
from medic.errors import MedicError
from medic.ports import ModeStore

__all__ = ["JobModes"]

logger = logging.getLogger(__name__)


class JobModes:
    """The modes of one cluster's watched jobs."""

    def __init__(self, cluster: ClusterName, modes: ModeStore, default: Mode) -> None:
        self._cluster = cluster
        self._store = modes
        self._default = default
        self._overrides: dict[JobId, Mode | None] = {}
        """Each watched job's own mode from its comment (None: it sets none)."""
        self._modes: ClusterModes | None = None
        """The run-time modes stored for this cluster, read once per pass."""

    def read(self) -> None:
        """Read the run-time modes operators switch through the API (``ModeStore``)."""
        try:
            self._modes = self._store.get_modes(self._cluster)
        except MedicError as exc:
            logger.warning("cannot read the run-time modes, keeping the last known: %s", exc)

    def set_override(self, job_id: JobId, mode: Mode | None) -> None:
        self._overrides[job_id] = mode

    def forget(self, job_id: JobId) -> None:
        self._overrides.pop(job_id, None)

    def stored(self, job: Job) -> Mode:
        """The job's partition mode, else the cluster's stored mode, else ``scheduler.mode``."""
        modes = self._modes
        return self._default if modes is None else modes.for_partition(job.partition, self._default)

    def acting_nodes(self, nodes: Iterable[Node]) -> frozenset[NodeName]:
        """The nodes in act mode: every partition of the node in act mode (the cluster's mode for
        a node in none). A node shared with an observe-mode partition is never acted on: its
        jobs' owners asked for recommendations only."""
        modes = self._modes

        def mode(partition: str | None) -> Mode:
            return self._default if modes is None else modes.for_partition(partition, self._default)

        # Once per distinct set of partitions, not per node: a cluster has few of those.
        acts: dict[tuple[str, ...], bool] = {}
        acting: list[NodeName] = []
        for n in nodes:
            act = acts.get(n.partitions)
            if act is None:
                act = acts[n.partitions] = all(
                    mode(p) is Mode.ACT for p in (n.partitions or (None,))
                )
            if act:
                acting.append(n.name)
        return frozenset(acting)

    def of(self, job: Job) -> Mode:
        """The job's mode: its comment's override on top of :meth:`stored`."""
        override = self._overrides.get(job.id)
        return override if override is not None else self.stored(job)
