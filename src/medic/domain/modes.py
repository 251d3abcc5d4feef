"""Observe/act modes switched at run time, per cluster and per partition.

The mode a job is watched in is, first match wins: the job's own comment (``{"medic": {"mode":
...}}``), its partition's stored mode, the cluster's stored mode, then ``scheduler.mode`` from the
settings. Operators switch the stored modes through ``PUT /api/v1/policy/modes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from medic.domain.cluster import Mode
from medic.domain.ids import ClusterName

__all__ = ["ClusterModes"]


@dataclass(frozen=True, slots=True)
class ClusterModes:
    """The stored modes of one cluster: ``mode`` for the whole cluster (None: the settings'),
    ``partitions`` for the partitions that differ."""

    cluster: ClusterName
    mode: Mode | None = None
    partitions: Mapping[str, Mode] = field(default_factory=dict)

    def for_partition(self, partition: str | None, default: Mode) -> Mode:
        """The mode of a job in ``partition`` (before its own comment is considered)."""
        if partition and partition in self.partitions:
            return self.partitions[partition]
        return self.mode if self.mode is not None else default

    def to_json(self) -> dict[str, object]:
        return {
            "mode": None if self.mode is None else self.mode.value,
            "partitions": {p: m.value for p, m in sorted(self.partitions.items())},
        }
