"""The canonical shape of Slurm records, shared by ``normalise`` and ``scontrol`` (which produce it
from every Slurm version's JSON and from ``scontrol`` text) and ``convert`` (which reads it into
medic's domain objects), plus the tolerant accessors ``versions`` and ``normalise`` use on foreign
JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

__all__ = ["CanonicalJob", "CanonicalNode", "mapping", "number", "text"]


class CanonicalNode(TypedDict):
    """One node, whatever the Slurm version."""

    name: str
    state: str
    """Base state in upper case: IDLE, ALLOCATED, MIXED, DOWN, ERROR, FUTURE, UNKNOWN."""
    flags: list[str]
    """State flags in upper case: DRAIN, NOT_RESPONDING, REBOOT_REQUESTED, COMPLETING, ..."""
    reason: str
    reason_user: str
    partitions: list[str]
    gres: str
    boot_time: int | None
    comment: str
    """The node's ``Comment`` ("" when none)."""


class CanonicalJob(TypedDict):
    """One job (or one accounting record of a job), whatever the Slurm version."""

    job_id: str
    name: str
    state: str
    """Upper case, as Slurm names it: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, ..."""
    flags: list[str]
    """Further state flags where the version reports them (COMPLETING, REQUEUED, ...)."""
    reason: str
    partition: str
    nodes: str
    """Host list (``node[1-2]``); empty while pending."""
    excluded_nodes: str
    node_count: int | None
    restart_count: int
    priority: int | None
    hold: bool
    submit_time: int | None
    start_time: int | None
    end_time: int | None
    exit_code: int | None
    """Shell convention: the exit status, or 128 + signal number."""
    comment: str
    admin_comment: str
    """``AdminComment`` ("" when none): medic's hold mark lives there."""
    stdout: str | None
    """As Slurm reports it: an unexpanded pattern (``%x-%j.out``), empty for Slurm's default, or
    None when the source does not say (accounting records)."""
    stderr: str
    workdir: str
    user: str
    array_job_id: int | None
    array_task_id: int | None


def number(value: Any) -> int | None:
    """An int from a plain number or a v0.0.39+ ``{"set", "infinite", "number"}`` object; None
    when unset or infinite."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def text(value: Any) -> str:
    """A string; None -> ``""``."""
    return "" if value is None else str(value)


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}
