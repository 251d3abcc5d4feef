"""Grouping rules: rank to node placement, confirmations that explain cascades, curable errors."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from medic.attribute import attribute, node_of_rank
from medic.attribute.grouping import place
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.domain.logs import LogLine, LogStream

T0 = datetime(2026, 3, 14, tzinfo=UTC)
NODES = tuple(NodeName(f"gpu-{i}") for i in (3, 7, 11, 12))
JOB = Job(
    id=JobId("9"),
    cluster=ClusterName("c"),
    name="train",
    state=JobState.RUNNING,
    partition="p",
    nodes=NODES,
    num_nodes=4,
)
DIAGNOSER = SignatureDiagnoser()
ECC = "[rank{r}]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
WATCHDOG = (
    "[rank{r}]:[E314 10:15:00.123456 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught"
    " collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,"
    " Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
)


def lines(*items: tuple[float, NodeName | None, str]) -> list[Detection]:
    found = DIAGNOSER.scan(
        [
            LogLine(LogStream.JOB, text, T0 + timedelta(seconds=t), node, None, None, i)
            for i, (t, node, text) in enumerate(items)
        ]
    )
    assert len(found) == len(items)
    return found


def verdict(detections: list[Detection], job: Job = JOB, **kwargs: object) -> Verdict:
    return attribute(job, 0, detections, now=T0 + timedelta(hours=1), **kwargs)  # type: ignore[arg-type]


# --- placement -------------------------------------------------------------------------------


def test_node_of_rank_default_layout_and_mapping() -> None:
    assert node_of_rank(0, NODES) == NODES[0]
    assert node_of_rank(17, NODES) == NODES[2]
    assert node_of_rank(13, NODES, gpus_per_node=4) == NODES[3]
    assert node_of_rank(17, NODES, gpus_per_node=4) is None
    assert node_of_rank(32, NODES) is None and node_of_rank(-1, NODES) is None
    assert node_of_rank(5, NODES, gpus_per_node=0) is None
    assert node_of_rank(17, NODES, rank_nodes={17: NODES[3]}) == NODES[3]
    assert node_of_rank(18, NODES, rank_nodes={17: NODES[3]}) == NODES[2]  # falls back


def test_a_rank_only_ecc_error_implicates_the_node_running_the_rank() -> None:
    detections = lines((1.0, None, ECC.format(r=21)))
    assert verdict(detections).implicated_nodes == {NODES[2]}
    assert verdict(detections, rank_nodes={21: NODES[0]}).implicated_nodes == {NODES[0]}


def test_gpus_per_node_changes_the_layout() -> None:
    detections = lines((1.0, None, ECC.format(r=13)))
    assert verdict(detections, gpus_per_node=4).implicated_nodes == {NODES[3]}


def test_the_line_s_own_node_wins_over_the_rank_layout() -> None:
    detections = lines((1.0, NODES[0], ECC.format(r=21)))
    assert verdict(detections).implicated_nodes == {NODES[0]}


def test_a_rank_outside_the_job_stays_unplaced_and_blames_nobody() -> None:
    detections = lines((1.0, None, ECC.format(r=99)))
    v = verdict(detections)
    assert (v.domain, v.implicated_nodes) == (FaultDomain.HARDWARE, frozenset())


def test_cascades_never_implicate_even_when_placed() -> None:
    detections = lines(*[(600.0, None, WATCHDOG.format(r=r)) for r in (0, 8, 16)])
    v = verdict(detections)
    assert (v.action, v.implicated_nodes, v.root_signature) == (
        JobAction.RESTART,
        frozenset(),
        None,
    )
    assert {d.node for d in v.evidence} <= set(NODES)


def scheduler_line(named: str | None, implicates: bool) -> Detection:
    return Detection(
        job_id=None,
        attempt=-1,
        signature_id=SignatureId("slurm.node_failure"),
        domain=FaultDomain.SCHEDULER,
        role=Role.ROOT,
        severity=Severity.ERROR,
        action=JobAction.RESTART,
        time=T0,
        node=NODES[0],  # printed by srun on the batch host
        implicates_node=implicates,
        text=f"srun: error: Node failure on {named}",
        fields={"node": named} if named else {},
    )


def test_a_scheduler_line_is_placed_on_the_node_it_names() -> None:
    (placed,) = place([scheduler_line(NODES[2], True)], NODES)
    assert placed.node == NODES[2]
    v = verdict([scheduler_line(NODES[2], True)])
    assert (v.domain, v.implicated_nodes) == (FaultDomain.SCHEDULER, {NODES[2]})
    # Not implicating (a preemption naming the batch host): left where it was, nobody blamed.
    assert verdict([scheduler_line(NODES[2], False)]).implicated_nodes == frozenset()


# --- no root: a confirmation explains the failure ----------------------------------------------

OOM_KILL = (
    "Memory cgroup out of memory: Killed process 4104 (python) total-vm:5123456kB,"
    " anon-rss:4987654kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:9876kB oom_score_adj:0"
)
EXIT_9 = (
    "[2026-03-14 10:05:01,512] torch.distributed.elastic.multiprocessing.api: [ERROR] failed"
    " (exitcode: -9) local_rank: 3 (pid: 4104) of binary: /usr/bin/python"
)


def test_a_host_oom_kill_explains_the_cascades() -> None:
    detections = lines(
        (300.0, NODES[1], OOM_KILL),
        (301.0, NODES[1], EXIT_9),
        *[(900.0, None, WATCHDOG.format(r=r)) for r in (0, 16, 24)],
    )
    v = verdict(detections)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.APPLICATION,
        JobAction.RESTART,
        frozenset(),
    )
    assert v.root_signature == "kernel.oom_kill" and 0.4 <= v.confidence <= 0.6


def test_a_confirmation_alone_on_a_healthy_job_is_no_failure() -> None:
    v = verdict(lines((300.0, NODES[1], OOM_KILL)))
    assert (v.domain, v.action) == (FaultDomain.NONE, JobAction.NONE)


def test_a_confirmation_explains_a_failed_job_without_cascades() -> None:
    v = verdict(lines((300.0, NODES[1], OOM_KILL)), replace(JOB, state=JobState.FAILED))
    assert (v.domain, v.action, v.root_signature) == (
        FaultDomain.APPLICATION,
        JobAction.RESTART,
        "kernel.oom_kill",
    )


# --- STOP needs a deterministic message --------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "domain"),
    [
        # Shared-filesystem errors have their own signatures (system_software, not the job's).
        (
            "OSError: [Errno 5] Input/output error: '/lustre/data/shard_{r}.bin'",
            FaultDomain.SYSTEM_SOFTWARE,
        ),
        (
            "OSError: [Errno 116] Stale file handle: '/nfs/data/shard_{r}.bin'",
            FaultDomain.SYSTEM_SOFTWARE,
        ),
        (
            "RuntimeError: Rank {r}: found NaN in local grad norm in backward pass",
            FaultDomain.APPLICATION,
        ),
        ("FloatingPointError: Loss is inf at step 1200", FaultDomain.APPLICATION),
    ],
)
def test_curable_errors_on_every_rank_restart(message: str, domain: FaultDomain) -> None:
    text = "[rank{r}]: " + message
    v = verdict(lines(*[(10.0, None, text.format(r=r)) for r in range(0, 32, 3)]))
    assert (v.domain, v.action, v.implicated_nodes) == (domain, JobAction.RESTART, frozenset())


def test_a_deterministic_error_with_a_path_still_stops() -> None:
    text = "[rank{r}]: FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/iter_5/x.pt'"
    v = verdict(lines(*[(10.0, None, text.format(r=r)) for r in range(4)]))
    assert (v.domain, v.action) == (FaultDomain.APPLICATION, JobAction.STOP)


def test_cascades_only_prefer_a_runtime_symptom_over_torchrun_s_summary() -> None:
    detections = lines(
        (1.0, NODES[0], "Root Cause (first observed failure):"),
        (1.0, NODES[0], "  traceback : Signal 6 (SIGABRT) received by PID 4101"),
        (2.0, None, WATCHDOG.format(r=8)),
    )
    v = verdict(detections)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SYSTEM_SOFTWARE,
        JobAction.RESTART,
        frozenset(),
    )
    assert "nccl.watchdog_timeout" in v.summary
