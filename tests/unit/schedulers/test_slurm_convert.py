"""Canonical Slurm records and ``scontrol -o`` text -> ``Job``/``Node``: states, holds, GRES,
exit codes, output paths, and the scontrol parser on real 22.05 recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

from medic.domain.cluster import JobState, NodeState
from medic.domain.ids import ClusterName
from medic.schedulers.slurm import convert, scontrol
from medic.schedulers.slurm.records import CanonicalJob

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "slurm"
CLUSTER = ClusterName("c")


def record(**changes: object) -> CanonicalJob:
    base = CanonicalJob(
        job_id="7",
        name="train",
        state="RUNNING",
        flags=[],
        reason="None",
        partition="gpu",
        nodes="node[1-2]",
        excluded_nodes="",
        node_count=2,
        restart_count=0,
        priority=100,
        hold=False,
        submit_time=1_700_000_000,
        start_time=1_700_000_010,
        end_time=1_700_003_610,
        exit_code=0,
        comment="",
        admin_comment="",
        stdout="",
        stderr="",
        workdir="/home/u",
        user="u",
        array_job_id=None,
        array_task_id=None,
    )
    return CanonicalJob(**{**base, **changes})  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [
        ("IDLE", [], NodeState.IDLE),
        ("MIXED", [], NodeState.MIXED),
        ("ALLOCATED", [], NodeState.ALLOCATED),
        ("IDLE", ["DRAIN"], NodeState.DRAINED),
        ("MIXED", ["DRAIN"], NodeState.DRAINING),
        ("ALLOCATED", ["DRAIN"], NodeState.DRAINING),
        ("IDLE", ["COMPLETING", "DRAIN"], NodeState.DRAINING),
        ("IDLE", ["FAIL"], NodeState.DRAINED),
        ("IDLE", ["DRAIN", "REBOOT_REQUESTED"], NodeState.DRAINED),
        ("DOWN", ["NOT_RESPONDING"], NodeState.DOWN),
        ("DOWN", ["DRAIN"], NodeState.DOWN),
        ("IDLE", ["NOT_RESPONDING"], NodeState.DOWN),
        ("MIXED", ["NOT_RESPONDING"], NodeState.DOWN),
        ("IDLE", ["REBOOT_ISSUED"], NodeState.DOWN),
        ("IDLE", ["POWERED_DOWN"], NodeState.DOWN),
        ("IDLE", ["COMPLETING"], NodeState.ALLOCATED),
        ("FUTURE", [], NodeState.DOWN),
        ("INVAL", [], NodeState.UNKNOWN),
        ("MIXED+DRAIN", [], NodeState.DRAINING),
        ("IDLE+DRAIN+REBOOT_REQUESTED", [], NodeState.DRAINED),
        ("idle*", [], NodeState.DOWN),
        ("drain", [], NodeState.DRAINED),
        ("drng", [], NodeState.DRAINING),
    ],
)
def test_node_state(state: str, flags: list[str], expected: NodeState) -> None:
    assert convert.node_state(state, flags) is expected


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:a100:4,gpu:v100:2", 6),
        ("gpu:4(S:0,1),shard:8", 4),
        ("tmpsize:7T,gpu:l40s:4(S:0-1)", 4),
        ("gpu", 1),
        ("gpu:0", 0),
        ("", 0),
        ("(null)", 0),
        ("mps:100", 0),
    ],
)
def test_gpu_count(gres: str, gpus: int) -> None:
    assert convert.gpu_count(gres) == gpus


@pytest.mark.parametrize(
    ("state", "flags", "end", "expected"),
    [
        ("PENDING", [], None, JobState.PENDING),
        ("RUNNING", [], 1, JobState.RUNNING),
        ("CONFIGURING", [], 1, JobState.RUNNING),
        ("COMPLETING", [], 1, JobState.COMPLETING),
        ("COMPLETING", [], None, JobState.PENDING),  # scontrol, while a requeue cleans up
        ("PENDING", ["COMPLETING"], None, JobState.PENDING),
        ("COMPLETED", ["COMPLETING"], 1, JobState.COMPLETING),
        ("RUNNING", ["REQUEUED"], 1, JobState.PENDING),
        ("COMPLETED", [], 1, JobState.COMPLETED),
        ("FAILED", [], 1, JobState.FAILED),
        ("OUT_OF_MEMORY", [], 1, JobState.FAILED),
        ("BOOT_FAIL", [], 1, JobState.FAILED),
        ("CANCELLED", [], 1, JobState.CANCELLED),
        ("TIMEOUT", [], 1, JobState.TIMEOUT),
        ("DEADLINE", [], 1, JobState.TIMEOUT),
        ("NODE_FAIL", [], 1, JobState.NODE_FAIL),
        ("PREEMPTED", [], 1, JobState.PREEMPTED),
        ("REQUEUED", [], 1, JobState.PENDING),
        ("SPECIAL_EXIT", [], 1, JobState.PENDING),
        ("SUSPENDED", [], 1, JobState.UNKNOWN),
    ],
)
def test_job_state(state: str, flags: list[str], end: int | None, expected: JobState) -> None:
    assert convert.job_state(record(state=state, flags=flags, end_time=end)) is expected


@pytest.mark.parametrize(
    ("changes", "held"),
    [
        ({"state": "PENDING", "priority": 0, "reason": "JobHeldAdmin"}, True),
        ({"state": "PENDING", "priority": 0, "reason": "Resources"}, True),
        ({"state": "PENDING", "priority": 5, "reason": "JobHeldUser"}, True),
        ({"state": "PENDING", "priority": 5, "reason": "job_requeued_in_held_state"}, True),
        ({"state": "PENDING", "priority": 5, "hold": True}, True),
        ({"state": "PENDING", "priority": 5, "reason": "BeginTime"}, False),
        ({"state": "RUNNING", "priority": 0}, False),
    ],
)
def test_held(changes: dict[str, object], held: bool) -> None:
    assert convert.is_held(record(**changes)) is held


def test_a_running_job_keeps_nodes_and_drops_its_projected_end() -> None:
    job = convert.job_from_canonical(record(excluded_nodes="node[3-4]", comment="{}"), CLUSTER)
    assert job.nodes == ("node1", "node2")
    assert job.excluded_nodes == frozenset({"node3", "node4"})
    assert job.end_time is None and job.exit_code is None
    assert job.comment == "{}"
    assert job.start_time is not None and job.start_time.tzinfo is not None


def test_a_pending_job_has_no_nodes_or_start() -> None:
    job = convert.job_from_canonical(record(state="PENDING", nodes="node1"), CLUSTER)
    assert job.nodes == () and job.start_time is None and job.num_nodes == 2


def test_an_ended_job_keeps_end_and_exit_code() -> None:
    job = convert.job_from_canonical(record(state="FAILED", exit_code=3), CLUSTER)
    assert job.end_time is not None and job.exit_code == 3


@pytest.mark.parametrize(
    ("pattern", "changes", "path"),
    [
        ("", {}, "/home/u/slurm-7.out"),
        ("", {"array_job_id": 5, "array_task_id": 2}, "/home/u/slurm-5_2.out"),
        ("%x-%j.out", {}, "/home/u/train-7.out"),
        ("/logs/%u/%N.%j.%%.log", {}, "/logs/u/node1.7.%.log"),
        ("/logs/%5j.out", {}, "/logs/00007.out"),
        ("/logs/%A_%a.out", {"array_job_id": 5, "array_task_id": 2}, "/logs/5_2.out"),
        ("/logs/%J-%s-%t-%n.out", {}, "/logs/7.batch-batch-0-0.out"),
        ("/logs/x\\%j.out", {}, "/logs/x%j.out"),
        ("/logs/%q.out", {}, "/logs/%q.out"),
    ],
)
def test_expand_output_pattern(pattern: str, changes: dict[str, object], path: str) -> None:
    assert convert.expand_output_pattern(pattern, record(**changes)) == path


def test_log_paths_merge_stdout_and_stderr_and_skip_dev_null() -> None:
    same = convert.job_from_canonical(record(stdout="%x.out", stderr=""), CLUSTER)
    assert same.log_paths == ("/home/u/train.out",)
    both = convert.job_from_canonical(record(stdout="o.log", stderr="e.log"), CLUSTER)
    assert both.log_paths == ("/home/u/o.log", "/home/u/e.log")
    assert convert.job_from_canonical(record(stdout="/dev/null"), CLUSTER).log_paths == ()
    assert convert.job_from_canonical(record(stdout=None), CLUSTER).log_paths == ()


def test_merge_accounting_runs_counts_requeues() -> None:
    rows = [
        record(state="REQUEUED", start_time=10),
        record(state="CANCELLED", start_time=30),
        record(state="REQUEUED", start_time=20),
        record(job_id="8", state="COMPLETED"),
    ]
    merged = {r["job_id"]: r for r in convert.merge_accounting_runs(rows)}
    assert merged["7"]["state"] == "CANCELLED" and merged["7"]["restart_count"] == 2
    assert merged["8"]["restart_count"] == 0


# --- scontrol -o text ------------------------------------------------------------------------
def test_scontrol_values_may_hold_spaces_and_equals_signs() -> None:
    line = (
        "JobId=9 JobName=my job Priority=0 JobState=PENDING Reason=JobHeldUser "
        'Comment={"medic": {"mode": "act"}} note=a b Restarts=2 ExitCode=0:9 '
        "StdOut=/x/y.out Power="
    )
    (fields,) = scontrol.parse_scontrol_records(line + "\n\n")
    assert fields["JobName"] == "my job"
    assert fields["Comment"] == '{"medic": {"mode": "act"}} note=a b'
    assert fields["Power"] == ""
    job = convert.job_from_canonical(scontrol.job_from_scontrol(fields), CLUSTER)
    assert job.held and job.restart_count == 2 and job.log_paths == ("/x/y.out",)


@pytest.mark.parametrize(("code", "expected"), [("3:0", 3), ("0:9", 137), ("0:0", 0), ("", None)])
def test_scontrol_exit_code(code: str, expected: int | None) -> None:
    fields = {"JobId": "1", "JobState": "FAILED", "EndTime": "2026-01-01T00:00:00"}
    canonical = scontrol.job_from_scontrol({**fields, "ExitCode": code})
    assert convert.job_from_canonical(canonical, CLUSTER).exit_code == expected


def _asset(name: str) -> dict[str, str]:
    (fields,) = scontrol.parse_scontrol_records((ASSETS / "22.05" / name).read_text())
    return fields


def test_recorded_scontrol_jobs() -> None:
    held = convert.job_from_canonical(
        scontrol.job_from_scontrol(_asset("scontrol-show-job-o.pending-held.txt")), CLUSTER
    )
    assert held.state is JobState.PENDING and held.held and held.restart_count == 1
    assert held.excluded_nodes == frozenset({"node1"}) and held.comment == "medic-test"
    assert held.log_paths and held.log_paths[0].endswith("/requeue-2.out")
    failed = convert.job_from_canonical(
        scontrol.job_from_scontrol(_asset("scontrol-show-job-o.failed.txt")), CLUSTER
    )
    assert failed.state is JobState.FAILED and failed.exit_code == 3 and failed.nodes == ("node1",)
    assert failed.log_paths == ()  # /dev/null
    running = convert.job_from_canonical(
        scontrol.job_from_scontrol(_asset("scontrol-show-job-o.running.txt")), CLUSTER
    )
    assert running.state is JobState.RUNNING and running.nodes and not running.held


@pytest.mark.parametrize(
    ("name", "state", "medic"),
    [
        ("scontrol-show-node-o.idle.txt", NodeState.IDLE, False),
        ("scontrol-show-node-o.drained.txt", NodeState.DRAINED, True),
        ("scontrol-show-node-o.down.txt", NodeState.DOWN, False),
        ("scontrol-show-node-o.not-responding.txt", NodeState.DOWN, False),
        ("scontrol-show-node-o.rebooting.txt", NodeState.DRAINED, True),
    ],
)
def test_recorded_scontrol_nodes(name: str, state: NodeState, medic: bool) -> None:
    canonical = scontrol.node_from_scontrol(_asset(name))
    node = convert.node_from_canonical(canonical)
    assert node.state is state
    assert node.gpus == 8 and node.partitions
    assert bool(node.reason and node.reason.startswith("medic:")) is medic
    assert node.reason is None or "[" not in node.reason  # "[user@time]" split off
    assert canonical["boot_time"]
