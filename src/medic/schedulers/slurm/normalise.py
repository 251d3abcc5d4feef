"""Slurm JSON payloads -> canonical records: the entry points the adapter calls.

Each ``normalise_*`` function takes a whole payload (``squeue --json``, ``sinfo --json``,
``sacct --json``, or slurmrestd's equivalent), passes its records through the version chain of
:mod:`medic.schedulers.slurm.versions` down to the v0.0.38 shape, and reads that shape into
``CanonicalJob`` / ``CanonicalNode`` dicts (:mod:`medic.schedulers.slurm.records`), which
``convert`` turns into medic's domain objects. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from medic.schedulers.slurm.records import CanonicalJob, CanonicalNode, mapping, number, text
from medic.schedulers.slurm.versions import (
    Adapter,
    Raw,
    Version,
    chain,
    first_and_rest,
    payload_version,
    sinfo_entries,
    wait_status,
)

__all__ = ["normalise_accounting_jobs", "normalise_jobs", "normalise_nodes"]


def _records(payload: Mapping[str, Any], key: str) -> list[Raw]:
    items = payload.get(key)
    return (
        [dict(item) for item in items if isinstance(item, Mapping)]
        if isinstance(items, list)
        else []
    )


def _run(
    version: Version, records: list[Raw], step: Callable[[Adapter], Callable[[Raw], Raw]]
) -> list[Raw]:
    for adapter in chain(version):
        records = [step(adapter)(record) for record in records]
    return records


def normalise_jobs(payload: Mapping[str, Any]) -> list[CanonicalJob]:
    """``squeue --json`` (or slurmrestd ``/jobs``) -> canonical jobs."""
    raw = _run(payload_version(payload), _records(payload, "jobs"), lambda a: a.job)
    return [_job_v0_0_38(r) for r in raw]


def normalise_accounting_jobs(payload: Mapping[str, Any]) -> list[CanonicalJob]:
    """``sacct --json`` (or slurmrestd ``/slurmdb/.../jobs``) -> canonical jobs, one per record
    (``--duplicates`` gives one record per run of a requeued job)."""
    raw = _run(payload_version(payload), _records(payload, "jobs"), lambda a: a.accounting_job)
    return [_accounting_v0_0_38(r) for r in raw]


def normalise_nodes(payload: Mapping[str, Any]) -> list[CanonicalNode]:
    """``sinfo --json`` (either shape) or slurmrestd ``/nodes`` -> canonical nodes, one per node."""
    records = _records(payload, "nodes") or sinfo_entries(_records(payload, "sinfo"))
    raw = _run(payload_version(payload), records, lambda a: a.node)
    return [_node_v0_0_38(r) for r in raw]


# --- v0.0.38 -> canonical -------------------------------------------------------------------
def _time(value: Any) -> int | None:
    seconds = number(value)
    return seconds if seconds else None  # Slurm writes 0 for "not yet"


def _node_v0_0_38(raw: Raw) -> CanonicalNode:
    partitions = raw.get("partitions")
    return CanonicalNode(
        name=text(raw.get("name")),
        state=text(raw.get("state")).upper() or "UNKNOWN",
        flags=[str(f).upper() for f in raw.get("state_flags") or []],
        reason=text(raw.get("reason")),
        reason_user=text(raw.get("reason_set_by_user")),
        partitions=[text(p) for p in partitions] if isinstance(partitions, list) else [],
        gres=text(raw.get("gres")),
        boot_time=_time(raw.get("boot_time")),
        comment=text(raw.get("comment")),
    )


def _job_v0_0_38(raw: Raw) -> CanonicalJob:
    state, flags = first_and_rest(raw.get("job_state"))
    return CanonicalJob(
        job_id=text(raw.get("job_id")),
        name=text(raw.get("name")),
        state=state,
        flags=[*flags, *(str(f).upper() for f in raw.get("state_flags") or [])],
        reason=text(raw.get("state_reason")),
        partition=text(raw.get("partition")),
        nodes=text(raw.get("nodes")),
        excluded_nodes=text(raw.get("excluded_nodes")),
        node_count=number(raw.get("node_count")),
        restart_count=number(raw.get("restart_cnt")) or 0,
        priority=number(raw.get("priority")),
        hold=bool(raw.get("hold")),
        submit_time=_time(raw.get("submit_time")),
        start_time=_time(raw.get("start_time")),
        end_time=_time(raw.get("end_time")),
        exit_code=_shell_code(wait_status(raw.get("exit_code"))),
        comment=text(raw.get("comment")),
        admin_comment=text(raw.get("admin_comment")),
        stdout=text(raw.get("standard_output")),
        stderr=text(raw.get("standard_error")),
        workdir=text(raw.get("current_working_directory")),
        user=text(raw.get("user_name")),
        array_job_id=number(raw.get("array_job_id")) or None,
        array_task_id=number(raw.get("array_task_id")),
    )


def _shell_code(status: int | None) -> int | None:
    """Raw wait status -> exit status, or 128 + signal for a killed job."""
    if status is None:
        return None
    return 128 + (status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


def _accounting_v0_0_38(raw: Raw) -> CanonicalJob:
    state = mapping(raw.get("state"))
    times = mapping(raw.get("time"))
    comment = raw.get("comment")
    array = mapping(raw.get("array"))
    return CanonicalJob(
        job_id=text(raw.get("job_id")),
        name=text(raw.get("name")),
        state=text(state.get("current")).upper() or "UNKNOWN",
        flags=[str(f).upper() for f in raw.get("state_flags") or []],
        reason=text(state.get("reason")),
        partition=text(raw.get("partition")),
        nodes=text(raw.get("nodes")) if raw.get("nodes") != "None assigned" else "",
        excluded_nodes="",
        node_count=number(raw.get("allocation_nodes")),
        restart_count=0,
        priority=number(raw.get("priority")),
        hold=bool(raw.get("hold")),
        submit_time=_time(times.get("submission")),
        start_time=_time(times.get("start")),
        end_time=_time(times.get("end")),
        exit_code=_shell_code(wait_status(raw.get("exit_code"))),
        comment=text(comment.get("job")) if isinstance(comment, Mapping) else text(comment),
        admin_comment=text(comment.get("administrator")) if isinstance(comment, Mapping) else "",
        stdout=text(raw["stdout"]) if raw.get("stdout") else None,
        stderr=text(raw.get("stderr")),
        workdir=text(raw.get("working_directory")),
        user=text(raw.get("user")),
        array_job_id=number(array.get("job_id")) or None,
        array_task_id=number(array.get("task_id")),
    )
