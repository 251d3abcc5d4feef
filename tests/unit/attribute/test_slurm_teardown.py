"""Slurm's STEP and JOB cancel banners, and srun's lines naming the failing node (issue 12, rules
2 and 8): a cancelled step is teardown, only the job's banner or the scheduler's state says a
person cancelled it; unplaced pyxis/enroot lines take their node from srun's."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from medic.attribute import attribute
from medic.attribute.launch import launch_failures, placed_by_srun
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.domain.logs import LogLine, LogStream

T0 = datetime(2026, 3, 14, 10, 0, tzinfo=UTC)
NODES = tuple(NodeName(f"node00{i}") for i in range(1, 5))
JOB = Job(JobId("1"), ClusterName("c"), "j", JobState.UNKNOWN, "p", NODES, num_nodes=4)


def scan(text: str) -> list[str]:
    line = LogLine(LogStream.JOB, text, T0, None, None, None, 1)
    return [d.signature_id for d in SignatureDiagnoser().scan([line])]


def det(sid: str, node: str | None, *, at: float = 0, **kw: object) -> Detection:
    return Detection(
        job_id=JOB.id,
        attempt=0,
        signature_id=SignatureId(sid),
        domain=kw.pop("domain", FaultDomain.SYSTEM_SOFTWARE),  # type: ignore[arg-type]
        role=kw.pop("role", Role.ROOT),  # type: ignore[arg-type]
        severity=Severity.ERROR,
        action=kw.pop("action", JobAction.RESTART),  # type: ignore[arg-type]
        time=T0 + timedelta(seconds=at),
        node=NodeName(node) if node else None,
        seq=int(at * 10) + 1,
        **kw,  # type: ignore[arg-type]
    )


def cancel() -> Detection:
    return det("slurm.cancelled", None, domain=FaultDomain.SCHEDULER, action=JobAction.NONE)


def task_exit(node: str, at: float = 1) -> Detection:
    return det(
        "slurm.task_exit",
        node,
        at=at,
        role=Role.CASCADE,
        domain=FaultDomain.APPLICATION,
        fields={"node": node, "code": "1"},
    )


_AT = "CANCELLED AT 2026-01-01T00:00:00"


@pytest.mark.parametrize(
    ("line", "signature_id"),
    [
        (f"slurmstepd: error: *** JOB 42 ON node001 {_AT} ***", "slurm.cancelled"),
        (f"slurmstepd: error: *** JOB 42 {_AT} ***", "slurm.cancelled"),
        (f"slurmstepd: error: *** STEP 42.0 ON node001 {_AT} ***", "slurm.step_cancelled"),
        (f"error: *** STEP 42.0 ON nid1 {_AT} DUE TO TASK FAILURE ***", "slurm.step_cancelled"),
        (f"slurmstepd: *** STEP 42.0 ON node001 {_AT} DUE TO TIME LIMIT ***", "slurm.time_limit"),
        (f"slurmstepd: *** JOB 42 ON node001 {_AT} DUE TO PREEMPTION ***", "slurm.preempted"),
    ],
)  # fmt: skip
def test_only_the_job_banner_is_a_persons_cancel(line: str, signature_id: str) -> None:
    assert scan(line) == [signature_id]


def test_a_step_banner_is_teardown_and_the_first_failure_decides() -> None:
    step = det(
        "slurm.step_cancelled", "node001", at=2, role=Role.NOISE, domain=FaultDomain.NONE,
        action=JobAction.NONE,
    )  # fmt: skip
    xid = det("xid.79", "node003", domain=FaultDomain.HARDWARE, implicates_node=True)
    v = attribute(JOB, 0, [xid, task_exit("node003"), step], now=T0)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.HARDWARE,
        JobAction.RESTART,
        frozenset({NodeName("node003")}),
    )


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.NODE_FAIL])
def test_the_schedulers_failed_state_is_never_a_persons_cancel(state: JobState) -> None:
    v = attribute(replace(JOB, state=state), 0, [cancel(), task_exit("node002")], now=T0)
    assert v.domain is not FaultDomain.SCHEDULER or v.action is JobAction.RESTART
    assert v.action is JobAction.RESTART


@pytest.mark.parametrize("state", [JobState.CANCELLED, JobState.UNKNOWN])
def test_a_job_banner_or_cancelled_state_is_a_persons_cancel(state: JobState) -> None:
    v = attribute(replace(JOB, state=state), 0, [cancel(), task_exit("node002")], now=T0)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SCHEDULER,
        JobAction.NONE,
        frozenset(),
    )


def pyxis(at: float = 0) -> Detection:
    return det("pyxis.import_failed", None, at=at)


def test_an_unplaced_launch_failure_takes_the_node_srun_names() -> None:
    result = launch_failures([pyxis(), task_exit("node002")], NODES)
    assert [(d.node, d.implicates_node) for d in result if d.signature_id.startswith("pyxis")] == [
        ("node002", True)
    ]
    v = attribute(JOB, 0, [pyxis(), task_exit("node002")], now=T0)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SYSTEM_SOFTWARE,
        JobAction.RESTART,
        frozenset({NodeName("node002")}),
    )


def test_srun_naming_most_nodes_names_nobody() -> None:
    exits = [task_exit(n) for n in NODES[:3]]
    assert placed_by_srun(exits, NODES) == []
    v = attribute(JOB, 0, [pyxis(), *exits], now=T0)
    assert v.implicated_nodes == frozenset()
    assert v.action is JobAction.RESTART


def test_two_minority_nodes_each_get_the_launch_failure() -> None:
    eight = tuple(NodeName(f"node00{i}") for i in range(1, 9))
    result = launch_failures([pyxis(), task_exit("node002"), task_exit("node005")], eight)
    nodes = {d.node for d in result if d.signature_id.startswith("pyxis") and d.implicates_node}
    assert nodes == {"node002", "node005"}
