"""The issue-12 rules in attribution, one by one, on hand-made detections (the scenario fixtures
test them end to end on real log wording)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from medic.attribute import attribute
from medic.config.settings import PolicySettings
from medic.domain.advice import AdviceAction
from medic.domain.cluster import ClusterName, Job, JobState, Mode
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import JobId, NodeName, SignatureId
from medic.policy.recovery import decide

T0 = datetime(2026, 3, 14, 10, 0, tzinfo=UTC)
NODES = tuple(NodeName(f"node00{i}") for i in range(1, 5))
JOB = Job(JobId("1"), ClusterName("c"), "j", JobState.FAILED, "p", NODES, num_nodes=4)


def det(
    sid: str, node: str | None, role: Role = Role.CASCADE, *, at: float = 0, **kw: Any
) -> Detection:
    return Detection(
        job_id=JOB.id,
        attempt=0,
        signature_id=SignatureId(sid),
        domain=kw.pop("domain", FaultDomain.SYSTEM_SOFTWARE),
        role=role,
        severity=Severity.ERROR,
        action=kw.pop("action", JobAction.RESTART),
        time=T0 + timedelta(seconds=at),
        node=NodeName(node) if node else None,
        seq=kw.pop("seq", int(at * 10) + 1),
        **kw,
    )


def noise(sid: str, node: str | None, **fields: str) -> Detection:
    return det(sid, node, Role.NOISE, domain=FaultDomain.NONE, action=JobAction.NONE, fields=fields)


def progress(sid: str, node: str | None, at: float = 0) -> Detection:
    return det(sid, node, Role.PROGRESS, at=at, domain=FaultDomain.NONE, action=JobAction.NONE)


def verdict(detections: list[Detection], job: Job = JOB, **kw: Any) -> Any:
    return attribute(job, 0, detections, now=T0 + timedelta(minutes=5), **kw)


def bootstrap(i: int) -> Detection:
    return noise("nccl.bootstrap_address", NODES[i], address=f"10.0.{i}.10", device="ib0")


def completion(node: str, peer: str, at: float = 0) -> Detection:
    return det(
        "nccl.ib_completion_error",
        node,
        Role.ROOT,
        at=at,
        domain=FaultDomain.NETWORK,
        fields={"peer": f"{peer}<54862>", "status": "12"},
    )


# --- 1. a finished job is not a failure --------------------------------------------------------
def test_completion_in_the_frameworks_words_wins_over_errors() -> None:
    v = verdict(
        [det("nccl.watchdog_timeout", "node002"), progress("megatron.training_done", "node001")]
    )
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.NONE,
        JobAction.NONE,
        frozenset(),
    )


def test_torchrun_success_counts_only_when_no_agent_failed_after_it() -> None:
    ok = [progress("torchelastic.worker_group_succeeded", n, at=60) for n in NODES]
    assert verdict(ok).action is JobAction.NONE
    failed = [
        *ok[:3],
        det("torchelastic.child_failed", "node004", domain=FaultDomain.APPLICATION, at=61),
    ]
    assert verdict(failed).action is JobAction.RESTART


# --- 2. launch failures name their node ---------------------------------------------------------
def test_a_launch_failure_on_one_node_implicates_it_and_on_all_nobody() -> None:
    one = [
        det("pyxis.import_failed", "node003", Role.ROOT),
        det("torch.store_barrier_timeout", "node001", at=900),
    ]
    assert verdict(one).implicated_nodes == {"node003"}
    every = [det("pyxis.import_failed", n, Role.ROOT) for n in NODES]
    assert verdict(every).implicated_nodes == frozenset()


def test_a_silent_node_is_implicated_when_the_attempt_failed() -> None:
    v = verdict(
        [det("torch.store_barrier_timeout", n, at=900) for n in NODES[:3]],
        silent_nodes=frozenset({NodeName("node004")}),
    )
    assert v.implicated_nodes == {"node004"} and v.action is JobAction.RESTART


# --- 3. network faults name their node when the evidence does ---------------------------------
def test_peers_pointing_at_one_address_implicate_the_node_behind_it() -> None:
    found = [
        *map(bootstrap, range(4)),
        completion("node001", "10.0.2.10"),
        completion("node002", "10.0.2.10"),
        completion("node004", "10.0.2.10"),
    ]
    v = verdict(found)
    assert (v.domain, v.implicated_nodes) == (FaultDomain.NETWORK, {"node003"})


def test_peers_pointing_at_a_crashed_node_do_not_blame_its_network() -> None:
    found = [
        *map(bootstrap, range(4)),
        completion("node001", "10.0.2.10", at=5),
        completion("node002", "10.0.2.10", at=5),
        det(
            "python.exception",
            "node003",
            Role.ROOT,
            domain=FaultDomain.APPLICATION,
            fields={"exception": "KeyError", "message": "'x'"},
        ),
    ]
    assert "node003" not in verdict(found).implicated_nodes


def test_the_same_port_error_on_most_nodes_is_systemic() -> None:
    ports = [
        det(
            "nccl.ib_port_error",
            n,
            Role.CONFIRMATION,
            domain=FaultDomain.NETWORK,
            action=JobAction.NONE,
            implicates_node=True,
        )
        for n in NODES[:3]
    ]
    v = verdict([*ports, det("nccl.remote_error", "node004", domain=FaultDomain.NETWORK)])
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.NETWORK,
        JobAction.RESTART,
        frozenset(),
    )


# --- 4. deterministic errors stop after one attempt --------------------------------------------
def _type_error(node: str = "node001") -> Detection:
    return det(
        "python.exception",
        node,
        Role.ROOT,
        domain=FaultDomain.APPLICATION,
        rank=5,
        fields={"exception": "TypeError", "message": "forward() got an unexpected kwarg"},
    )


def test_one_rank_type_error_stops_and_the_list_is_a_setting() -> None:
    found = [_type_error(), det("nccl.watchdog_timeout", "node002", at=600)]
    assert verdict(found).action is JobAction.STOP
    assert verdict(found, deterministic=()).action is JobAction.RESTART
    assert "TypeError" in PolicySettings().deterministic_errors


def test_an_earlier_node_fault_wins_over_a_listed_error() -> None:
    xid = det(
        "xid.fallen_off_bus",
        "node003",
        Role.ROOT,
        domain=FaultDomain.HARDWARE,
        implicates_node=True,
        at=-1,
    )
    assert verdict([xid, _type_error()]).action is JobAction.RESTART


def test_loopback_stops_a_failing_multi_node_job_only() -> None:
    lo = [
        det(
            "nccl.loopback_interface",
            n,
            Role.CONFIRMATION,
            domain=FaultDomain.APPLICATION,
            action=JobAction.NONE,
        )
        for n in NODES
    ]
    assert verdict([*lo, det("nccl.system_error", "node001")]).action is JobAction.STOP
    assert (
        verdict(lo[:1], job=Job(JOB.id, JOB.cluster, "j", JobState.RUNNING, "p", NODES[:1])).action
        is JobAction.NONE
    )


# --- 5. contained errors are not node faults ----------------------------------------------------
def _xid94(pid: str, at: float) -> Detection:
    return det(
        "xid.94",
        "node002",
        Role.ROOT,
        domain=FaultDomain.HARDWARE,
        implicates_node=True,
        at=at,
        fields={"xid": "94", "pid": pid, "pci": "0000:3b:00"},
    )


def test_a_contained_xid94_restarts_without_excluding_unless_it_recurs() -> None:
    once = verdict([_xid94("10", 0)])
    assert (once.action, once.implicated_nodes) == (JobAction.RESTART, frozenset())
    twice = verdict([_xid94("10", 0), _xid94("11", 60)])
    assert twice.implicated_nodes == {"node002"}


# --- 6. stragglers from real jobs ---------------------------------------------------------------
def _sniff(lines: list[tuple[str, list[tuple[int, str, str]]]]) -> list[Detection]:
    """Megatron's GPU sniff test: (metric, [(rank, node, deviation)]) in print order."""
    out: list[Detection] = []
    for metric, outliers in lines:
        text = f"  {metric} [TFLOP/s/GPU]: median=700.00, mean=690.00, min=560.00, max=760.00"
        out.append(replace(noise("megatron.sniff_metric", "node001"), text=text, seq=len(out) + 1))
        for rank, node, deviation in outliers:
            d = noise("megatron.sniff_outlier", "node001", rank=str(rank), deviation=deviation)
            out.append(replace(d, fields={**d.fields, "node": node}, seq=len(out) + 1))
    return out


def test_sniff_test_names_the_node_slow_in_two_metrics_not_the_ranks_ahead() -> None:
    slow = [(r, "node003", "-18.0") for r in range(16, 24)]
    ahead = [(3, "node001", "+12.5")]
    once = [(9, "node002", "-14.0")]  # slow in one metric only: noise
    lines = _sniff(
        [("GEMM throughput (8192x8192x8192, bf16)", slow + ahead),
         ("GEMM throughput (4096x4096x16384, bf16)", slow),
         ("Send/recv busbw (DP PG, 268 MB)", once)]
    )  # fmt: skip
    v = verdict(lines, job=replace(JOB, state=JobState.RUNNING))
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.HARDWARE, JobAction.NONE, {"node003"},
    )  # fmt: skip
    # Slow only in bus bandwidths: the node's link.
    link = [(r, "node004", "-30.0") for r in range(24, 32)]
    v = verdict(
        _sniff([("All-reduce busbw (global PG)", link), ("Send/recv busbw (DP PG)", link)]),
        job=replace(JOB, state=JobState.RUNNING),
    )
    assert (v.domain, v.implicated_nodes) == (FaultDomain.NETWORK, {"node004"})
    # Half of the job slow is not a node's fault; an outlier before any metric line is unread.
    half = [(r, n, "-25.0") for r, n in ((8, "node002"), (16, "node003"))]
    v = verdict(
        _sniff([("GEMM a", half), ("GEMM b", half)]), job=replace(JOB, state=JobState.RUNNING)
    )
    assert v.implicated_nodes == set()
    orphan = noise("megatron.sniff_outlier", "node001", rank="8", deviation="-40")
    orphan = replace(orphan, fields={**orphan.fields, "node": "node002"})
    assert (
        verdict([orphan, orphan], job=replace(JOB, state=JobState.RUNNING)).implicated_nodes
        == set()
    )


def test_nvrx_scores_name_the_slow_node_and_the_policy_excludes_it_next_time() -> None:
    scores = [
        det(
            "nvrx.rank_score",
            None,
            Role.NOISE,
            domain=FaultDomain.NONE,
            seq=10 + r,
            action=JobAction.NONE,
            fields={
                "rank": str(r),
                "node": NODES[r // 2],
                "score": "0.4" if r // 2 == 1 else "0.98",
            },
        )
        for r in range(8)
    ]
    running = Job(JOB.id, JOB.cluster, "j", JobState.RUNNING, "p", NODES, num_nodes=4)
    v = verdict(scores, job=running)
    assert (v.action, v.implicated_nodes) == (JobAction.NONE, {"node002"})
    advice = decide(v, running, [], mode=Mode.OBSERVE, settings=PolicySettings())
    assert advice.action is AdviceAction.EXCLUDE_NEXT and advice.exclude_nodes == {"node002"}


def test_a_ras_report_naming_ranks_ahead_names_nobody() -> None:
    lines = [
        det(
            "nccl.ras_operation_count",
            "node001",
            Role.NOISE,
            domain=FaultDomain.NONE,
            action=JobAction.NONE,
            seq=1,
            text="  30 ranks have launched up to operation 640",
        ),
        det(
            "nccl.ras_operation_count",
            "node001",
            Role.NOISE,
            domain=FaultDomain.NONE,
            action=JobAction.NONE,
            seq=2,
            text="  2 ranks have launched up to operation 641",
        ),
        det(
            "nccl.ras_rank",
            "node001",
            Role.NOISE,
            domain=FaultDomain.NONE,
            action=JobAction.NONE,
            seq=3,
            fields={"address": "node002"},
        ),
    ]
    assert verdict(lines).implicated_nodes == frozenset()
    behind = [lines[1], lines[0], lines[2]]
    behind = [replace_seq(d, i) for i, d in enumerate(behind)]
    assert verdict(behind).implicated_nodes == {"node002"}


def replace_seq(d: Detection, seq: int) -> Detection:
    from dataclasses import replace

    return replace(d, seq=seq + 1)


# --- 7. fate sharing has a first domain --------------------------------------------------------
def test_only_the_first_nvlink_domain_is_implicated() -> None:
    fabric = [
        noise("nccl.mnnvl_clique", n, fabric="aa.bb" if i < 2 else "cc.dd", clique="0x1")
        for i, n in enumerate(NODES)
    ]
    xids = [
        det(
            "xid.74",
            n,
            Role.ROOT,
            domain=FaultDomain.HARDWARE,
            implicates_node=True,
            at=0 if i >= 2 else 3,
        )
        for i, n in enumerate(NODES)
    ]
    assert verdict([*fabric, *xids]).implicated_nodes == {"node003", "node004"}
    assert verdict(xids).implicated_nodes == set(NODES)  # no domain known: each its own


# --- 8. scheduler facts win over teardown noise ------------------------------------------------
def test_a_persons_cancel_is_never_restarted_and_blames_nobody() -> None:
    cancel = det(
        "slurm.cancelled", None, Role.ROOT, domain=FaultDomain.SCHEDULER, action=JobAction.NONE
    )
    teardown = [completion(n, "10.0.0.10", at=1) for n in NODES[1:]]
    v = verdict([cancel, *teardown], job=replace(JOB, state=JobState.CANCELLED))
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SCHEDULER,
        JobAction.NONE,
        frozenset(),
    )
    advice = decide(v, JOB, [], mode=Mode.ACT, settings=PolicySettings())
    assert advice.action is AdviceAction.NONE


def test_time_limit_restarts_unless_a_node_failed_before_it() -> None:
    limit = det("slurm.time_limit", None, Role.ROOT, domain=FaultDomain.SCHEDULER, at=100)
    v = verdict([limit, det("nccl.remote_error", "node001", at=101)])
    assert (v.domain, v.action) == (FaultDomain.SCHEDULER, JobAction.RESTART)
    xid = det(
        "xid.fallen_off_bus",
        "node003",
        Role.ROOT,
        domain=FaultDomain.HARDWARE,
        implicates_node=True,
        at=10,
    )
    assert verdict([limit, xid]).implicated_nodes == {"node003"}
