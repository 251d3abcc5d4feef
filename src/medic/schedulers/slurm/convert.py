"""Canonical Slurm records -> medic's ``Job`` and ``Node``.

Pure functions, no I/O. Records reach this module already canonical: the JSON of every Slurm
version through ``normalise`` (and ``versions``), ``scontrol show ... -o`` text through
``scontrol``. Mapping rules:

* node state = base state + flags: DRAIN/FAIL on an idle node is DRAINED, on a busy one DRAINING;
  DOWN, NOT_RESPONDING (``*``), REBOOT_ISSUED and power-saving states are DOWN; a node only not
  responding (not DOWN yet) is also flagged ``not_responding``;
* job state = Slurm's name (a CANCELLED job is CANCELLED, ...); a pending job is *held* when its
  priority is 0 or its reason says so (``JobHeldUser``, ``JobHeldAdmin``, requeued-held);
* GPUs = the sum of the ``gpu`` entries of the node's GRES (``gpu:8``, ``gpu:h100:8(S:0-1)``);
* output paths: Slurm's filename patterns (``%j``, ``%x``, ``%N``...) expanded as Slurm does for a
  batch job, relative paths against the working directory (``scontrol`` prints them expanded).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from medic.domain.cluster import Job, JobState, Node, NodeState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.schedulers.slurm.hostlist import expand_hostlist
from medic.schedulers.slurm.records import CanonicalJob, CanonicalNode

__all__ = [
    "expand_output_pattern",
    "gpu_count",
    "is_held",
    "is_not_responding",
    "job_from_canonical",
    "job_state",
    "merge_accounting_runs",
    "node_from_canonical",
    "node_state",
    "split_state",
]

_JOB_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "CONFIGURING": JobState.RUNNING,
    "RUNNING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.COMPLETING,
    "COMPLETING": JobState.COMPLETING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL,
    "PREEMPTED": JobState.PREEMPTED,
}
_HELD_REASONS = {"JOBHELDUSER", "JOBHELDADMIN", "JOB_REQUEUED_IN_HELD_STATE", "SPECIALEXIT"}
_DOWN_FLAGS = {"NOT_RESPONDING", "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP"}
_DRAIN_FLAGS = {"DRAIN", "FAIL"}
_BUSY = {"ALLOCATED", "MIXED", "COMPLETING"}
_SINFO_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}


def _upper(flags: Iterable[str]) -> set[str]:
    return {f.upper() for f in flags}


def node_state(state: str, flags: Iterable[str]) -> NodeState:
    """Slurm's base state and flags -> ``NodeState`` (see the module docstring)."""
    base, extra = split_state(state.upper())
    present = _upper(flags) | extra
    if base in ("DOWN", "ERROR", "FUTURE") or present & _DOWN_FLAGS:
        return NodeState.DOWN
    if present & _DRAIN_FLAGS or base in ("DRAIN", "DRAINED", "DRAINING", "DRNG"):
        busy = base in _BUSY or base in ("DRAINING", "DRNG") or "COMPLETING" in present
        return NodeState.DRAINING if busy else NodeState.DRAINED
    simple = {"IDLE": NodeState.IDLE, "ALLOCATED": NodeState.ALLOCATED, "MIXED": NodeState.MIXED}
    if "COMPLETING" in present and base == "IDLE":
        return NodeState.ALLOCATED
    return simple.get(base, NodeState.UNKNOWN)


def split_state(state: str) -> tuple[str, set[str]]:
    """``IDLE+DRAIN`` / ``idle*`` -> ``IDLE`` and ``{DRAIN}`` / ``{NOT_RESPONDING}``."""
    base, *flags = state.split("+")
    extra = set(flags)
    while base and base[-1] in _SINFO_SUFFIX_FLAGS:
        extra.add(_SINFO_SUFFIX_FLAGS[base[-1]])
        base = base[:-1]
    return base, extra


def gpu_count(gres: str) -> int:
    """GPUs in a GRES string: ``gpu:8``, ``gpu:h100:8(S:0-1)``, ``gpu:a:2,gpu:b:2`` -> 8, 8, 4."""
    total = 0
    for entry in re.split(r",(?![^(]*\))", gres):
        parts = re.sub(r"\(.*?\)", "", entry).strip().split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        match = re.match(r"\d+", count)
        total += int(match.group()) if match else 1
    return total


def node_from_canonical(record: CanonicalNode) -> Node:
    reason = record["reason"].strip() or None
    return Node(
        name=NodeName(record["name"]),
        state=node_state(record["state"], record["flags"]),
        partitions=tuple(record["partitions"]),
        gpus=gpu_count(record["gres"]),
        reason=reason,
        comment=record["comment"].strip() or None,
        not_responding=is_not_responding(record["state"], record["flags"]),
    )


def is_not_responding(state: str, flags: Iterable[str]) -> bool:
    """``NOT_RESPONDING`` (``*``) on a node slurmctld has not set DOWN yet: it will after
    ``SlurmdTimeout``, ending the node's jobs (and requeueing the requeueable ones) itself."""
    base, extra = split_state(state.upper())
    return "NOT_RESPONDING" in _upper(flags) | extra and base not in ("DOWN", "ERROR", "FUTURE")


def job_state(record: CanonicalJob) -> JobState:
    """Slurm's job state -> ``JobState``; a job still completing on its nodes is COMPLETING.

    A requeued job is PENDING at once, even while its old processes are still being cleaned up:
    22.05's JSON already says PENDING then, ``scontrol`` says COMPLETING with no end time (a job
    that really ended has one), newer JSON ``["PENDING", "COMPLETING"]``.
    """
    flags = _upper(record["flags"])
    state = record["state"].upper()
    if state == "COMPLETING" and record["end_time"] is None:
        return JobState.PENDING
    mapped = _JOB_STATES.get(state, JobState.UNKNOWN)
    if "COMPLETING" in flags and mapped is not JobState.PENDING:
        return JobState.COMPLETING
    if "REQUEUED" in flags and mapped in (JobState.RUNNING, JobState.COMPLETING):
        return JobState.PENDING
    return mapped


def is_held(record: CanonicalJob) -> bool:
    """A job that will not start until released: a pending one with priority 0 (Slurm's hold)
    or a held reason, and one requeued-and-held while it still completes.

    ``scontrol requeuehold`` of a job that has already ended but whose processes are still being
    cleaned up leaves it COMPLETING (with an end time) with the restart counted, priority 0 and
    reason ``job_requeued_in_held_state``; it turns PENDING and held once the clean-up is done.
    A ``release`` is accepted meanwhile and sticks; a job not seen as held here would never get
    one.
    """
    state = job_state(record)
    reason = record["reason"].replace(" ", "_").upper()
    held = record["hold"] or reason in _HELD_REASONS
    if state is JobState.COMPLETING:
        return held and record["priority"] == 0
    if state is not JobState.PENDING:
        return False
    return held or record["priority"] == 0


def expand_output_pattern(pattern: str, record: CanonicalJob, *, stream: str = "out") -> str:
    """A job's stdout/stderr path as Slurm writes it for the batch step.

    Empty ``pattern`` is Slurm's default (``slurm-%j.out``, arrays ``slurm-%A_%a.out``).
    Handles ``%%``, ``%A``, ``%a``, ``%j``, ``%J``, ``%N``, ``%n``, ``%s``, ``%t``, ``%u``,
    ``%x`` and a width (``%5j``); ``\\`` disables expansion like Slurm. Relative paths resolve
    against the job's working directory.
    """
    if not pattern:
        array = record["array_task_id"] is not None
        pattern = "slurm-%A_%a.out" if array else "slurm-%j.out"
    if "\\" in pattern:
        expanded = pattern.replace("\\", "")
    else:
        nodes = expand_hostlist(record["nodes"])
        values = {
            "A": str(record["array_job_id"] or record["job_id"]),
            "a": str(record["array_task_id"] if record["array_task_id"] is not None else ""),
            "j": record["job_id"],
            "J": f"{record['job_id']}.batch",
            "N": nodes[0] if nodes else "",
            "n": "0",
            "s": "batch",
            "t": "0",
            "u": record["user"],
            "x": record["name"],
        }

        def repl(match: re.Match[str]) -> str:
            if match[2] == "%":
                return "%"
            value = values.get(match[2])
            if value is None:
                return match[0]
            return value.zfill(int(match[1])) if match[1] and value.isdigit() else value

        expanded = re.sub(r"%(\d*)([%AaJjNnstux])", repl, pattern)
    if not posixpath.isabs(expanded) and record["workdir"]:
        expanded = posixpath.join(record["workdir"], expanded)
    return expanded


def _datetime(epoch: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch else None


def _log_paths(record: CanonicalJob) -> tuple[str, ...]:
    if record["stdout"] is None:
        return ()
    out = expand_output_pattern(record["stdout"], record)
    err = expand_output_pattern(record["stderr"], record) if record["stderr"] else out
    return tuple(p for p in dict.fromkeys([out, err]) if p != "/dev/null")


def job_from_canonical(record: CanonicalJob, cluster: ClusterName) -> Job:
    state = job_state(record)
    ended = state.is_terminal
    nodes = expand_hostlist(record["nodes"]) if state is not JobState.PENDING else ()
    return Job(
        id=JobId(record["job_id"]),
        cluster=cluster,
        name=record["name"],
        state=state,
        partition=record["partition"],
        nodes=tuple(NodeName(n) for n in nodes),
        excluded_nodes=frozenset(NodeName(n) for n in expand_hostlist(record["excluded_nodes"])),
        restart_count=record["restart_count"],
        held=is_held(record),
        num_nodes=record["node_count"] or max(len(nodes), 1),
        submit_time=_datetime(record["submit_time"]),
        start_time=_datetime(record["start_time"]) if state is not JobState.PENDING else None,
        end_time=_datetime(record["end_time"]) if ended else None,
        exit_code=record["exit_code"] if ended else None,
        comment=record["comment"] or None,
        admin_comment=record["admin_comment"] or None,
        log_paths=_log_paths(record),
    )


def merge_accounting_runs(records: Iterable[CanonicalJob]) -> list[CanonicalJob]:
    """One record per job from ``sacct --duplicates`` rows (one per run): the latest run, with
    the number of runs before it as the restart count. A run that has not started (pending again
    after a requeue) is the latest."""
    runs: dict[str, list[CanonicalJob]] = {}
    for record in records:
        runs.setdefault(record["job_id"], []).append(record)
    merged = []
    for rows in runs.values():
        rows.sort(key=lambda r: r["start_time"] or float("inf"))
        latest = rows[-1].copy()
        latest["restart_count"] = len(rows) - 1
        merged.append(latest)
    return merged
