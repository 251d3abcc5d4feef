"""Which mode (observe or act) each watched job runs in, decided once per pass.

A job's own comment (``{"medic": {"mode": ...}}``) wins; else the run-time modes operators switch
through the API for its partition or its cluster (``ModeStore``), else ``scheduler.mode``. The
stored modes are read once per pass; when the store cannot answer, the last known stay in force.
"""

from __future__ import annotations

import logging

from medic.domain.cluster import Job, Mode
from medic.domain.ids import ClusterName, JobId
from medic.domain.modes import ClusterModes
from medic.errors import MedicError
from medic.ports import ModeStore, Store

__all__ = ["JobModes"]

logger = logging.getLogger(__name__)


class JobModes:
    """The modes of one cluster's watched jobs."""

    def __init__(self, cluster: ClusterName, store: Store, default: Mode) -> None:
        self._cluster = cluster
        self._store = store
        self._default = default
        self._overrides: dict[JobId, Mode | None] = {}
        """Each watched job's own mode from its comment (None: it sets none)."""
        self._modes: ClusterModes | None = None
        """The run-time modes stored for this cluster, read once per pass."""

    def read(self) -> None:
        """Read the run-time modes operators switch through the API (``ModeStore``)."""
        if not isinstance(self._store, ModeStore):
            return
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

    def of(self, job: Job) -> Mode:
        """The job's mode: its comment's override on top of :meth:`stored`."""
        override = self._overrides.get(job.id)
        return override if override is not None else self.stored(job)
