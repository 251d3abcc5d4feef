"""Normalised log input: one line from a job's ranks or from a node's kernel log."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from medic.domain.ids import JobId, NodeName

__all__ = ["LogLine", "LogStream"]


class LogStream(enum.StrEnum):
    """Where a line came from."""

    JOB = "job"
    """The job's stdout/stderr (all ranks, possibly prefixed with the rank)."""
    KERNEL = "kernel"
    """A node's kernel log (dmesg / journalctl -k): Xid, ECC, link and filesystem messages."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of text with where and when it was observed.

    ``job_id`` is None for kernel lines: a kernel line belongs to a node, and the core maps it to
    the jobs running there. ``time`` is when medic read the line (the source's clock), which is
    what detection latency is measured against.
    """

    stream: LogStream
    text: str
    time: datetime
    node: NodeName | None = None
    job_id: JobId | None = None
    rank: int | None = None
    seq: int = 0
    """Monotonic position within its source, for ordering and evidence references."""
