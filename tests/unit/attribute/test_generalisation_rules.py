"""Rounds 3 and 4 of the issue-12 rules, one by one on hand-made detections: a hung task names
its node, a minority's invalid device ordinal is theirs and everyone's is the job's (rules 2, 4),
peers' errors pointing at a node that crashed or failed on its own are its cascade (rules 3, 5,
8), a slow job names a node only with its own slowdown line and Megatron's report names a
throttled GPU (rule 6), the healthy ends of a lost GPU's NVLink links are its cascade (rule 7),
lines after torchrun's termination signal are tear-down (rule 8), and a verdict's node repair
comes from its signature's catalogue entry."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from medic.attribute import recommended_node_action
from medic.attribute.fate import LINK_FOLLOW_SECONDS, link_victims
from medic.attribute.slowdown import SLOW_JOB_SIGNATURE_ID, apply_slowdown_rules
from medic.detect.catalogue import node_actions
from medic.domain.cluster import JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role

from .test_general_rules import (
    JOB,
    NODES,
    bootstrap,
    completion,
    det,
    noise,
    verdict,
)

RUNNING = replace(JOB, state=JobState.RUNNING)


def slow_job(at: float, slow_s: float) -> Detection:
    return det(
        SLOW_JOB_SIGNATURE_ID, None, Role.ROOT, at=at, action=JobAction.NONE,
        fields={"slow_s": str(slow_s)},
    )  # fmt: skip


def throttle(node: str, at: float) -> Detection:
    return det(
        "kernel.thermal_throttle", node, Role.CONFIRMATION, at=at, domain=FaultDomain.HARDWARE,
        action=JobAction.NONE, fields={"effect": "slowdown"},
    )  # fmt: skip


# --- 6. a slow job names a node only with its own evidence ------------------------------------
def test_a_slow_job_names_the_node_whose_own_line_explains_it() -> None:
    v = verdict([slow_job(900, 600), throttle("node002", 320)], job=RUNNING)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.HARDWARE,
        JobAction.NONE,
        {"node002"},
    )
    assert v.root_signature == "medic.straggler.slow_node"


def test_a_slowdown_line_long_before_the_slowness_names_nobody() -> None:
    # The job slowed down at 300 s; a throttle at 0 s (more than LEAD_SECONDS before) is old news.
    v = verdict([slow_job(900, 600), throttle("node002", 0)], job=RUNNING)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SYSTEM_SOFTWARE,
        JobAction.NONE,
        frozenset(),
    )


def test_slowdown_lines_without_a_slow_job_or_on_most_nodes_name_nobody() -> None:
    alone = [throttle("node002", 10)]
    assert apply_slowdown_rules(alone, NODES) == alone
    everywhere = [slow_job(900, 600), *(throttle(n, 400) for n in NODES[:3])]
    assert apply_slowdown_rules(everywhere, NODES) == everywhere
    assert verdict(everywhere, job=RUNNING).implicated_nodes == frozenset()


# --- 7. the healthy ends of a lost GPU's links --------------------------------------------------
def _domain(*nodes: str) -> list[Detection]:
    return [noise("nccl.mnnvl_clique", n, fabric="aa.bb", clique="0x1") for n in nodes]


def _hw(sid: str, node: str, at: float) -> Detection:
    return det(sid, node, Role.ROOT, domain=FaultDomain.HARDWARE, implicates_node=True, at=at)


def test_domain_mates_nvlink_errors_after_a_gpu_loss_are_its_cascade() -> None:
    lost = _hw("xid.fallen_off_bus", "node002", 10)
    ends = [_hw("xid.74", "node001", 11), _hw("xid.149", "node003", 12)]
    v = verdict([*_domain(*NODES), lost, *ends])
    assert v.implicated_nodes == {"node002"}
    rewritten = link_victims([*_domain(*NODES), lost, *ends])
    assert {d.fields.get("victim_of") for d in rewritten if d.signature_id != "xid.fallen_off_bus"
            and d.role is Role.CASCADE} == {"node002"}  # fmt: skip


def test_nvlink_errors_before_the_loss_or_outside_its_domain_stay_evidence() -> None:
    lost = _hw("xid.fallen_off_bus", "node002", 10)
    before = _hw("xid.74", "node001", 5)
    assert verdict([*_domain(*NODES), lost, before]).implicated_nodes == {"node001", "node002"}
    # No MNNVL lines: an NVLink error is the node's own (its links stay inside it).
    after = _hw("xid.74", "node001", 11)
    assert verdict([lost, after]).implicated_nodes == {"node001", "node002"}
    # Another domain: its links never reached the lost GPU (the fate rule then makes node001,
    # whose domain failed second, a victim of node002's domain, which failed first).
    other = [noise("nccl.mnnvl_clique", "node001", fabric="cc.dd", clique="0x1")]
    rewritten = link_victims([*other, *_domain("node002"), lost, after])
    assert all(d.role is Role.ROOT for d in rewritten if d.signature_id == "xid.74")


def test_a_process_nvlink_error_after_another_node_s_driver_link_event_is_its_cascade() -> None:
    # No MNNVL line: node002's driver logs the link fault; node001 and node003 only see CUDA's
    # error (their traffic crossed that link), node004 logged its own Xid 74 as well.
    link = _hw("xid.149", "node002", 10)
    cuda = [_hw("cuda.nvlink_uncorrectable", n, 10.5) for n in ("node001", "node002", "node003")]
    own = [_hw("xid.74", "node004", 10.6), _hw("cuda.nvlink_uncorrectable", "node004", 10.7)]
    v = verdict([link, *cuda, *own])
    assert v.implicated_nodes == {"node002", "node004"}
    # Before the driver's line, long after it, or in another known domain: the node's own.
    early = _hw("cuda.nvlink_uncorrectable", "node001", 9)
    late = _hw("cuda.nvlink_uncorrectable", "node003", 10 + LINK_FOLLOW_SECONDS + 1)
    assert verdict([link, early, late]).implicated_nodes == {"node001", "node002", "node003"}
    apart = [noise("nccl.mnnvl_clique", "node001", fabric="cc.dd", clique="0x1")]
    moved = link_victims([*apart, *_domain("node002"), link, cuda[0]])
    assert [d.role for d in moved if d.signature_id == "cuda.nvlink_uncorrectable"] == [Role.ROOT]


# --- 8. tear-down after the launcher's termination signal ---------------------------------------
def test_a_node_fault_after_its_launchers_termination_signal_is_tear_down() -> None:
    limit = det("slurm.time_limit", None, Role.ROOT, domain=FaultDomain.SCHEDULER, at=100)
    # All three at the same second; the node's own lines come first in their file.
    signal = replace(noise("torchelastic.signal_exception", "node003"), time=limit.time, seq=1)
    fault = replace(_hw("cuda.nvlink_uncorrectable", "node003", 100), seq=2)
    v = verdict([replace(limit, seq=9), signal, fault])
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SCHEDULER,
        JobAction.RESTART,
        frozenset(),
    )
    # Without the signal, the same fault before the banner is evidence against its node.
    early = replace(fault, time=fault.time - timedelta(seconds=30))
    assert verdict([limit, early]).implicated_nodes == {"node003"}


# --- node repair from the catalogue ---------------------------------------------------------------
def test_the_verdicts_node_repair_comes_from_its_signature() -> None:
    v = verdict([_hw("nccl.nvls_bind_failed", "node002", 10)])
    assert recommended_node_action(v) == "escalate"  # without the catalogue: nothing known
    assert recommended_node_action(v, node_actions()) == "reboot"
    slow = verdict([slow_job(900, 600), throttle("node002", 320)], job=RUNNING)
    # The straggler's repair is its cause's (kernel.thermal_throttle has none: escalate).
    assert recommended_node_action(slow, node_actions()) == "escalate"


# --- round 4 ---------------------------------------------------------------------------------
def _hung(node: str) -> Detection:
    return det("kernel.hung_task", node, Role.CONFIRMATION, implicates_node=True, at=30)


def test_a_hung_task_names_its_node_unless_every_node_hangs() -> None:
    timeouts = [det("nccl.watchdog_timeout", n, at=700) for n in NODES]
    assert verdict([_hung("node004"), *timeouts]).implicated_nodes == {"node004"}
    assert verdict([*(_hung(n) for n in NODES), *timeouts]).implicated_nodes == frozenset()


def _ordinal(node: str, rank: int) -> Detection:
    return det(
        "cuda.invalid_device_ordinal", node, Role.ROOT, domain=FaultDomain.APPLICATION, rank=rank,
        fields={"exception": "RuntimeError", "message": "CUDA error: invalid device ordinal"},
    )  # fmt: skip


def test_invalid_device_ordinal_on_every_node_stops_and_on_one_names_it() -> None:
    everywhere = [_ordinal(n, i * 8 + 7) for i, n in enumerate(NODES)]
    v = verdict(everywhere)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.APPLICATION,
        JobAction.STOP,
        frozenset(),
    )
    v = verdict([_ordinal("node003", 23)])
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SYSTEM_SOFTWARE,
        JobAction.RESTART,
        {"node003"},
    )


def test_peers_pointing_at_a_node_that_failed_on_its_own_are_its_cascade() -> None:
    # A contained Xid 94 on node002 (not evidence against it), the peers' errors point at it.
    contained = det(
        "xid.94", "node002", Role.ROOT, domain=FaultDomain.HARDWARE, at=10,
        fields={"xid": "94"}, text="NVRM: Xid (PCI:0000:9b:00): 94, pid=1, Contained: SM",
    )  # fmt: skip
    peers = [completion(n, "10.0.1.10", at=0) for n in ("node001", "node003", "node004")]
    base = [bootstrap(i) for i in range(4)]
    v = verdict([*base, contained, *peers])
    assert (v.domain, v.implicated_nodes) == (FaultDomain.HARDWARE, frozenset())
    # Slurm's node failure on node002: the scheduler's verdict on node002, not its network.
    failed = det(
        "slurm.node_failure", None, Role.ROOT, domain=FaultDomain.SCHEDULER, at=300,
        implicates_node=True, fields={"node": "node002"},
    )  # fmt: skip
    v = verdict([*base, failed, *peers])
    assert (v.domain, v.implicated_nodes) == (FaultDomain.SCHEDULER, {"node002"})


def test_a_node_failure_takes_the_domain_of_the_node_s_own_evidence() -> None:
    # srun's "Node failure on node002" (the scheduler's report) and node002's own kernel: an
    # uncorrected memory error at the same moment says what failed.
    failed = det(
        "slurm.node_failure", None, Role.ROOT, domain=FaultDomain.SCHEDULER, at=10, seq=1,
        implicates_node=True, fields={"node": "node002"},
    )  # fmt: skip
    ue = _hw("edac.uncorrected", "node002", 10)
    v = verdict([failed, ue])
    assert (v.domain, v.implicated_nodes) == (FaultDomain.HARDWARE, {"node002"})
    assert v.summary.startswith("hardware fault on node002")
    # Another node's hardware line does not explain node002's failure.
    assert verdict([failed, _hw("edac.uncorrected", "node003", 10)]).implicated_nodes == {
        "node002", "node003",
    }  # fmt: skip


def _report(k: int, mxr: int, clock: int, clock_rank: int) -> Detection:
    text = (
        f"[2026-03-20 09:{10 + k}:00] | MnRtt/Rnk: 3449.00ms/0 | MxRtt/Rnk: 3630.00ms/{mxr} |"
        f" MnClk/Rnk: {clock}MHz/{clock_rank} | MxClk/Rnk: 1980MHz/0 |"
    )
    return det(
        "megatron.straggler_report", "node001", Role.NOISE, domain=FaultDomain.NONE,
        action=JobAction.NONE, at=60 * k, text=text,
    )  # fmt: skip


def test_megatron_names_a_throttled_gpu_even_when_only_a_little_slow() -> None:
    throttled = [_report(k, 21, 1485, 21) for k in range(4)]
    assert verdict(throttled, job=RUNNING).implicated_nodes == {"node003"}
    # 5% slower, its clock no lower than its peers': noise, nobody named.
    fine = [_report(k, 21, 1950, 7) for k in range(4)]
    assert verdict(fine, job=RUNNING).implicated_nodes == frozenset()


def test_nodes_without_an_mnnvl_line_are_not_victims_of_each_other() -> None:
    # Domain 1 (node001-002) failed at init and printed no MNNVL line; domain 2 printed its own.
    fabric = [noise("nccl.mnnvl_clique", n, fabric="cc.dd", clique="0x2") for n in NODES[2:]]
    first = [_hw("nccl.nvls_bind_failed", n, 10 + i) for i, n in enumerate(NODES[:2])]
    later = [_hw("xid.74", "node003", 40)]
    assert verdict([*fabric, *first, *later]).implicated_nodes == {"node001", "node002"}


def test_a_noise_line_that_explains_slowness_names_its_node_as_hardware() -> None:
    # Corrected PCIe errors are noise in the catalogue; during a slow job they name their node.
    aer = det(
        "xid.pcie_aer_corrected", "node004", Role.NOISE, domain=FaultDomain.NONE,
        action=JobAction.NONE, at=350, fields={"effect": "slowdown"},
    )  # fmt: skip
    v = verdict([slow_job(900, 600), aer], job=RUNNING)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.HARDWARE,
        JobAction.NONE,
        {"node004"},
    )


def test_peers_pointing_at_one_node_never_outrank_the_schedulers_end() -> None:
    preempted = det("slurm.preempted", None, Role.ROOT, domain=FaultDomain.SCHEDULER, at=100)
    peers = [completion(n, "10.0.1.10", at=0) for n in ("node001", "node003", "node004")]
    v = verdict([*(bootstrap(i) for i in range(4)), preempted, *peers])
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SCHEDULER,
        JobAction.RESTART,
        frozenset(),
    )
