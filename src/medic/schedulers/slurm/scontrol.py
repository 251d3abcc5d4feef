"""``scontrol show job -o`` / ``scontrol show node -o`` text -> canonical Slurm records.

The one-line ``key=value`` format has been stable for many releases, so it is read here directly,
with no version chain. Values may hold spaces (free-text keys such as ``Comment`` and ``Reason``),
``(null)``/``N/A``-style values read as empty, times are the host's local time, and paths come
already expanded. :mod:`medic.schedulers.slurm.convert` turns the records into domain objects.
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from medic.schedulers.slurm.convert import split_state
from medic.schedulers.slurm.records import CanonicalJob, CanonicalNode

__all__ = ["job_from_scontrol", "node_from_scontrol", "parse_scontrol_records"]

_KEY = re.compile(r"(?:^|\s+)([A-Z][A-Za-z0-9_:/]*)=")
_FREE_TEXT = {"Comment", "AdminComment", "SystemComment", "JobName", "Command", "Reason", "OS"}
_KNOWN = {
    # job keys (22.05 and later) that may follow a free-text value
    "JobId", "JobName", "UserId", "GroupId", "MCS_label", "Priority", "Nice", "Account", "QOS",
    "JobState", "Reason", "Dependency", "Requeue", "Restarts", "BatchFlag", "Reboot", "ExitCode",
    "DerivedExitCode", "RunTime", "TimeLimit", "TimeMin", "SubmitTime", "EligibleTime",
    "AccrueTime", "StartTime", "EndTime", "Deadline", "SuspendTime", "SecsPreSuspend",
    "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid", "ReqNodeList", "ExcNodeList",
    "NodeList", "BatchHost", "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES",
    "Socks/Node", "NtasksPerN:B:S:C", "CoreSpec", "MinCPUsNode", "MinMemoryNode",
    "MinMemoryCPU", "MinTmpDiskNode", "Features", "DelayBoot", "OverSubscribe", "Contiguous",
    "Licenses", "Network", "Command", "WorkDir", "Comment", "AdminComment", "SystemComment",
    "StdErr", "StdIn", "StdOut", "Power", "ArrayJobId", "ArrayTaskId", "HetJobId",
    "HetJobOffset", "Reservation", "TresPerNode", "TresPerJob", "MailUser", "MailType",
    "CpusPerTres", "MemPerTres", "TresBind", "TresFreq", "NtasksPerTRES", "Prefer", "Extra",
    "Container", "ContainerID",
    # node keys
    "NodeName", "Arch", "CoresPerSocket", "CPUAlloc", "CPUEfctv", "CPUTot", "CPULoad",
    "AvailableFeatures", "ActiveFeatures", "Gres", "NodeAddr", "NodeHostName", "Port", "Version",
    "OS", "RealMemory", "AllocMem", "FreeMem", "Sockets", "Boards", "State", "ThreadsPerCore",
    "TmpDisk", "Weight", "Owner", "Partitions", "BootTime", "SlurmdStartTime", "LastBusyTime",
    "ResumeAfterTime", "CfgTRES", "AllocTRES", "CapWatts", "CurrentWatts", "AveWatts",
    "ExtSensorsJoules", "ExtSensorsWatts", "ExtSensorsTemp", "NextState", "InstanceId",
    "InstanceType",
}  # fmt: skip
_NULLS = {"(null)", "N/A", "None", "Unknown", "n/a", ""}


def parse_scontrol_records(output: str) -> list[dict[str, str]]:
    """``scontrol show job -o`` / ``show node -o`` -> one ``{key: value}`` per line.

    A value may hold spaces (``Comment={"medic": {...}}``, ``Reason=Not responding``). After a
    free-text key, a following ``Word=`` only starts a new field when it is a key scontrol is
    known to print and the record has not printed yet, so ``Comment=a b=c`` keeps its ``b=c``
    and a comment cannot forge a field printed before it.
    """
    records = []
    for line in output.splitlines():
        if not line.strip():
            continue
        fields: dict[str, str] = {}
        key: str | None = None
        pos = 0
        for match in _KEY.finditer(line):
            if (
                key is not None
                and key in _FREE_TEXT
                and (match[1] not in _KNOWN or match[1] in fields)
            ):
                # Part of the free text: an unknown key, or one the record printed already (a
                # comment ``x Restarts=5 NodeList=n9`` must not replace the job's own fields).
                continue
            if key is not None:
                fields[key] = line[pos : match.start()].strip()
            key, pos = match[1], match.end()
        if key is not None:
            fields[key] = line[pos:].strip()
        records.append(fields)
    return records


def _value(fields: dict[str, str], key: str) -> str:
    value = fields.get(key, "")
    return "" if value in _NULLS else value


def _int(fields: dict[str, str], key: str) -> int | None:
    match = re.match(r"\d+", _value(fields, key))
    return int(match.group()) if match else None


def _epoch(fields: dict[str, str], key: str) -> int | None:
    """scontrol prints local time of the host it runs on (``2026-01-01T10:00:00``)."""
    try:
        return int(datetime.fromisoformat(_value(fields, key)).astimezone(UTC).timestamp())
    except ValueError:
        return None


def _exit_code(value: str) -> int | None:
    """``ExitCode=3:0`` (status 3) / ``0:9`` (signal 9) -> 3 / 137."""
    code, _, signal = value.partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(code)


def job_from_scontrol(fields: dict[str, str]) -> CanonicalJob:
    """One ``scontrol show job -o`` record -> a canonical job (paths come expanded)."""
    return CanonicalJob(
        job_id=_value(fields, "JobId"),
        name=fields.get("JobName", ""),
        state=_value(fields, "JobState").upper() or "UNKNOWN",
        flags=[],
        reason=_value(fields, "Reason"),
        partition=_value(fields, "Partition"),
        nodes=_value(fields, "NodeList"),
        excluded_nodes=_value(fields, "ExcNodeList"),
        node_count=_int(fields, "NumNodes"),
        restart_count=_int(fields, "Restarts") or 0,
        priority=_int(fields, "Priority"),
        hold=False,
        submit_time=_epoch(fields, "SubmitTime"),
        start_time=_epoch(fields, "StartTime"),
        end_time=_epoch(fields, "EndTime"),
        exit_code=_exit_code(fields.get("ExitCode", "")),
        comment=_value(fields, "Comment"),
        admin_comment=_value(fields, "AdminComment"),
        stdout=_value(fields, "StdOut"),
        stderr=_value(fields, "StdErr"),
        workdir=_value(fields, "WorkDir"),
        user=_value(fields, "UserId").split("(")[0],
        array_job_id=_int(fields, "ArrayJobId"),
        array_task_id=_int(fields, "ArrayTaskId"),
    )


def node_from_scontrol(fields: dict[str, str]) -> CanonicalNode:
    """One ``scontrol show node -o`` record -> a canonical node.

    ``Reason=medic: x [root@2026-01-01T10:00:00]``: the bracket (who and when) is split off.
    """
    base, flags = split_state(_value(fields, "State").upper())
    reason = _value(fields, "Reason")
    user = ""
    match = re.match(r"^(?P<reason>.*?)\s*\[(?P<user>[^@\]]*)@[^\]]*\]$", reason)
    if match:
        reason, user = match["reason"], match["user"]
    return CanonicalNode(
        name=_value(fields, "NodeName"),
        state=base or "UNKNOWN",
        flags=sorted(flags),
        reason=reason,
        reason_user=user,
        partitions=[p for p in _value(fields, "Partitions").split(",") if p],
        gres=_value(fields, "Gres"),
        boot_time=_epoch(fields, "BootTime"),
        comment=_value(fields, "Comment"),
    )
