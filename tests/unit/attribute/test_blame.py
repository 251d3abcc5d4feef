"""Attribution on multi-node scenarios: real log lines through the real matcher, then blame."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medic.attribute.blame import NODE_FAIL_SIGNATURE_ID, attribute, fan_out_kernel, is_fatal
from medic.attribute.grouping import node_of_rank
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.domain.logs import LogLine, LogStream

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB_ID = JobId("42")
NODES = tuple(NodeName(f"node00{i}") for i in range(1, 5))
JOB = Job(
    id=JOB_ID,
    cluster=ClusterName("sim"),
    name="train",
    state=JobState.RUNNING,
    partition="p0",
    nodes=NODES,
    num_nodes=4,
    restart_count=1,
)
ATTEMPT = 1
DIAGNOSER = SignatureDiagnoser()

XID79 = "NVRM: Xid (PCI:0000:3a:00): 79, pid=4242, name=python, GPU has fallen off the bus."
XID48 = (
    "NVRM: Xid (PCI:0000:18:00): 48, pid=4242, name=python, An uncorrectable double bit error"
    " (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."
)
LINK_DOWN = "mlx5_core 0000:0c:00.0: mlx5_port_change_event:1159:(pid 0): Link down on port 1"
LAUNCH = "RuntimeError: CUDA error: unspecified launch failure"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
KEY_ERROR = "KeyError: 'labels'"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total"
    " capacity of 79.10 GiB of which 1.21 GiB is free."
)


def watchdog(rank: int) -> str:
    return (
        f"[E0101 00:10:00.000000 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught"
        " collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1,"
        " NumelOut=1, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
    )


def ib_error(node: NodeName) -> str:
    return (
        f"{node}:4242:4250 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from"
        " peer 10.0.0.1<43512> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
    )


def iteration(step: int) -> str:
    return (
        f" [2026-01-01 00:00:00] iteration {step:>8}/{100000:>8} | consumed samples: 1 |"
        " elapsed time per iteration (ms): 500.0 | tokens per second: 1000.0 |"
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Timeline:
    """Log lines of one attempt, turned into stamped detections the way the loop does it."""

    def __init__(self) -> None:
        self.lines: list[LogLine] = []

    def job(self, seconds: float, node: NodeName, rank: int, text: str) -> Timeline:
        self.lines.append(
            LogLine(
                LogStream.JOB,
                f"[rank{rank}]: {text}",
                at(seconds),
                node,
                JOB_ID,
                rank,
                len(self.lines),
            )
        )
        return self

    def ranks(
        self, seconds: float, node_index: int, text: str, local: range = range(8)
    ) -> Timeline:
        for local_rank in local:
            self.job(seconds, NODES[node_index], node_index * 8 + local_rank, text)
        return self

    def peers_watchdog(self, seconds: float, *node_indexes: int) -> Timeline:
        for index in node_indexes:
            self.job(seconds, NODES[index], index * 8, watchdog(index * 8))
        return self

    def kernel(self, seconds: float, node: NodeName, text: str) -> Timeline:
        self.lines.append(LogLine(LogStream.KERNEL, text, at(seconds), node, None, None, 0))
        return self

    def detections(self) -> list[Detection]:
        routed = fan_out_kernel(DIAGNOSER.scan(self.lines), {n: [JOB_ID] for n in NODES})
        return [replace(d, attempt=ATTEMPT) for d in routed]

    def verdict(self, job: Job = JOB, **kwargs: object) -> Verdict:
        return attribute(job, ATTEMPT, self.detections(), now=at(100.0), **kwargs)  # type: ignore[arg-type]


def healthy_prefix(step: int = 120) -> Timeline:
    timeline = Timeline()
    for i in range(5):
        timeline.job(float(i), NODES[0], 0, iteration(step - 4 + i))
    return timeline


# --- hardware ------------------------------------------------------------------------------------


def test_xid79_blames_only_the_faulty_node() -> None:
    verdict = (
        healthy_prefix()
        .kernel(10.0, NODES[1], XID79)
        .ranks(10.0, 1, LAUNCH)
        .peers_watchdog(40.0, 0, 2, 3)
        .verdict()
    )
    assert verdict.domain is FaultDomain.HARDWARE
    assert verdict.action is JobAction.RESTART
    assert verdict.implicated_nodes == {NODES[1]}
    assert verdict.root_signature == "xid.fallen_off_bus"
    assert verdict.evidence[0].signature_id == "xid.fallen_off_bus"
    assert any(d.signature_id == "nccl.watchdog_timeout" for d in verdict.evidence)
    assert 0.9 <= verdict.confidence <= 1.0
    assert (verdict.job_id, verdict.attempt, verdict.time) == (JOB_ID, ATTEMPT, at(100.0))
    assert "node002" in verdict.summary and "\n" not in verdict.summary


@pytest.mark.parametrize("kernel_at", [9.5, 10.0, 13.0, 19.9])
def test_kernel_line_wins_within_the_failure_window(kernel_at: float) -> None:
    # The victims' CUDA errors may be read before the kernel line that explains them.
    verdict = Timeline().ranks(10.0, 1, LAUNCH).kernel(kernel_at, NODES[1], XID79).verdict()
    assert verdict.domain is FaultDomain.HARDWARE
    assert verdict.implicated_nodes == {NODES[1]}


def test_cuda_errors_alone_are_ambiguous() -> None:
    verdict = Timeline().ranks(10.0, 1, LAUNCH).peers_watchdog(40.0, 0, 2, 3).verdict()
    # Eight ranks, same message: still not a deterministic application error.
    assert verdict.action is JobAction.RESTART
    assert verdict.domain is FaultDomain.APPLICATION
    assert verdict.implicated_nodes == frozenset()
    assert verdict.confidence < 0.5


def test_ecc_blames_the_gpu_node() -> None:
    verdict = (
        Timeline()
        .kernel(5.0, NODES[2], XID48)
        .ranks(5.0, 2, ECC)
        .peers_watchdog(35.0, 0, 1, 3)
        .verdict()
    )
    assert (verdict.domain, verdict.action) == (FaultDomain.HARDWARE, JobAction.RESTART)
    assert verdict.implicated_nodes == {NODES[2]}
    assert verdict.confidence == pytest.approx(0.95)  # kernel line and CUDA error agree


def test_ecc_error_without_kernel_access_still_implicates_its_node() -> None:
    verdict = Timeline().ranks(5.0, 2, ECC, range(1)).verdict()
    assert verdict.implicated_nodes == {NODES[2]}


# --- network -------------------------------------------------------------------------------------


def test_ib_link_down_blames_that_node() -> None:
    timeline = Timeline().kernel(5.0, NODES[3], LINK_DOWN)
    timeline.job(5.0, NODES[3], 24, ib_error(NODES[3])).peers_watchdog(35.0, 0, 1, 2)
    verdict = timeline.verdict()
    assert (verdict.domain, verdict.action) == (FaultDomain.NETWORK, JobAction.RESTART)
    assert verdict.implicated_nodes == {NODES[3]}
    assert verdict.root_signature == "mlx5.link_down"


def test_ib_completion_errors_alone_implicate_nobody() -> None:
    timeline = Timeline().job(5.0, NODES[3], 24, ib_error(NODES[3]))
    verdict = timeline.job(5.1, NODES[0], 0, ib_error(NODES[0])).verdict()
    assert (verdict.domain, verdict.action) == (FaultDomain.NETWORK, JobAction.RESTART)
    assert verdict.implicated_nodes == frozenset()


# --- cascades only -------------------------------------------------------------------------------


def test_watchdog_everywhere_restarts_and_blames_nobody() -> None:
    verdict = healthy_prefix().peers_watchdog(600.0, 0, 1, 2, 3).verdict()
    assert verdict.action is JobAction.RESTART
    assert verdict.domain is FaultDomain.SYSTEM_SOFTWARE
    assert verdict.implicated_nodes == frozenset()
    assert verdict.root_signature is None
    assert verdict.confidence <= 0.3
    assert 1 <= len(verdict.evidence) <= 3


def test_cascade_never_wins_over_a_later_root() -> None:
    verdict = Timeline().peers_watchdog(1.0, 0, 2).kernel(30.0, NODES[1], XID79).verdict()
    assert verdict.root_signature == "xid.fallen_off_bus"


# --- application ---------------------------------------------------------------------------------


def test_same_traceback_on_all_ranks_stops() -> None:
    timeline = healthy_prefix(step=57)
    for index in range(4):
        timeline.ranks(10.0, index, "Traceback (most recent call last):")
        timeline.ranks(10.0, index, KEY_ERROR)
    verdict = timeline.verdict()
    assert (verdict.domain, verdict.action) == (FaultDomain.APPLICATION, JobAction.STOP)
    assert verdict.root_signature == "python.exception"
    assert "step 57" in verdict.summary and "32 rank(s)" in verdict.summary
    assert verdict.confidence >= 0.9
    assert all(d.signature_id == "python.exception" for d in verdict.evidence)


def test_two_ranks_are_enough_but_one_is_not() -> None:
    # ValueError is not in policy.deterministic_errors: only two ranks raising it establish it.
    error = "ValueError: expected sequence of length 2048 at dim 1 (got 2047)"
    one = Timeline().job(10.0, NODES[0], 3, error).peers_watchdog(40.0, 1, 2, 3).verdict()
    assert (one.domain, one.action) == (FaultDomain.APPLICATION, JobAction.RESTART)
    two = Timeline().job(10.0, NODES[0], 3, error).job(10.2, NODES[2], 17, error)
    assert two.verdict().action is JobAction.STOP


def test_a_listed_error_on_one_rank_stops() -> None:
    one = Timeline().job(10.0, NODES[0], 3, KEY_ERROR).peers_watchdog(40.0, 1, 2, 3).verdict()
    assert (one.domain, one.action) == (FaultDomain.APPLICATION, JobAction.STOP)


def test_same_exception_at_different_steps_is_not_established() -> None:
    error = "ValueError: expected sequence of length 2048 at dim 1 (got 2047)"
    timeline = Timeline().job(1.0, NODES[0], 0, iteration(10)).job(2.0, NODES[0], 3, error)
    timeline.job(3.0, NODES[0], 0, iteration(11)).job(4.0, NODES[1], 9, error)
    assert timeline.verdict().action is JobAction.RESTART


def test_numbers_do_not_split_the_same_error() -> None:
    timeline = Timeline().job(1.0, NODES[0], 3, "ValueError: bad shape 4096 on rank 3")
    verdict = timeline.job(1.0, NODES[1], 9, "ValueError: bad shape 4096 on rank 9").verdict()
    assert verdict.action is JobAction.STOP


def test_cuda_oom_stops_even_on_one_rank() -> None:
    verdict = healthy_prefix().job(10.0, NODES[0], 0, OOM).peers_watchdog(40.0, 1, 2).verdict()
    assert (verdict.domain, verdict.action) == (FaultDomain.APPLICATION, JobAction.STOP)
    assert verdict.root_signature == "cuda.oom"


def test_oom_on_every_local_rank_zero() -> None:
    timeline = Timeline()
    for index in range(4):
        timeline.job(10.0, NODES[index], index * 8, OOM)
    verdict = timeline.verdict()
    assert verdict.action is JobAction.STOP
    assert len(verdict.evidence) == 4


def test_single_rank_exception_with_a_hardware_root_elsewhere_is_hardware() -> None:
    timeline = Timeline().job(10.0, NODES[0], 3, "RuntimeError: bad value")
    verdict = timeline.kernel(11.0, NODES[2], XID79).verdict()
    assert (verdict.domain, verdict.action) == (FaultDomain.HARDWARE, JobAction.RESTART)
    assert verdict.implicated_nodes == {NODES[2]}


def test_hardware_in_the_same_window_beats_an_established_error() -> None:
    timeline = Timeline()
    for index in range(4):
        timeline.ranks(10.0, index, KEY_ERROR)
    assert timeline.kernel(12.0, NODES[1], XID79).verdict().domain is FaultDomain.HARDWARE


def test_established_error_long_before_a_hardware_fault_stops() -> None:
    timeline = Timeline()
    for index in range(4):
        timeline.ranks(10.0, index, KEY_ERROR)
    verdict = timeline.kernel(60.0, NODES[1], XID79).verdict()
    assert verdict.action is JobAction.STOP
    assert verdict.implicated_nodes == {NODES[1]}  # direct evidence is still reported


def test_window_can_be_narrowed() -> None:
    timeline = Timeline().ranks(10.0, 1, LAUNCH).kernel(13.0, NODES[1], XID79)
    assert timeline.verdict(window_seconds=1.0).domain is FaultDomain.APPLICATION


# --- scheduler, derived and quiet cases ----------------------------------------------------------


def test_node_fail_blames_that_node() -> None:
    job = replace(JOB, state=JobState.NODE_FAIL)
    verdict = (
        Timeline().peers_watchdog(30.0, 0, 1, 2).verdict(job, failed_nodes=frozenset({NODES[3]}))
    )
    assert (verdict.domain, verdict.action) == (FaultDomain.SCHEDULER, JobAction.RESTART)
    assert verdict.implicated_nodes == {NODES[3]}
    assert verdict.root_signature == NODE_FAIL_SIGNATURE_ID
    assert verdict.evidence[0].node == NODES[3]


def test_node_fail_adds_to_an_earlier_root() -> None:
    verdict = Timeline().kernel(10.0, NODES[1], XID79).verdict(failed_nodes=frozenset({NODES[3]}))
    assert verdict.root_signature == "xid.fallen_off_bus"
    assert verdict.implicated_nodes == {NODES[1], NODES[3]}
    assert "node004" in verdict.summary


def derived(signature: str, role: Role, action: JobAction, node: NodeName | None) -> Detection:
    return Detection(
        job_id=JOB_ID,
        attempt=ATTEMPT,
        signature_id=SignatureId(signature),
        domain=FaultDomain.HARDWARE if node else FaultDomain.SYSTEM_SOFTWARE,
        role=role,
        severity=Severity.WARNING,
        action=action,
        time=at(50.0),
        node=node,
        implicates_node=node is not None,
        text="derived",
    )


def test_hang_restarts_without_blame() -> None:
    hang = derived("medic.hang.no_progress", Role.ROOT, JobAction.RESTART, None)
    verdict = attribute(JOB, ATTEMPT, [hang], now=at(60.0))
    assert (verdict.domain, verdict.action) == (FaultDomain.SYSTEM_SOFTWARE, JobAction.RESTART)
    assert verdict.implicated_nodes == frozenset()


def test_straggler_is_not_failing_but_names_the_node() -> None:
    slow = derived("medic.straggler.slow_node", Role.ROOT, JobAction.NONE, NODES[2])
    verdict = attribute(JOB, ATTEMPT, [slow], now=at(60.0))
    assert (verdict.domain, verdict.action) == (FaultDomain.HARDWARE, JobAction.NONE)
    assert verdict.implicated_nodes == {NODES[2]}
    assert verdict.root_signature == "medic.straggler.slow_node"


def test_xid63_alone_is_a_warning_and_xid13_is_not_a_root() -> None:
    remap = (
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping,"
        " reset gpu to activate."
    )
    warning = Timeline().kernel(5.0, NODES[0], remap).verdict()
    assert warning.action is JobAction.NONE and warning.implicated_nodes == {NODES[0]}
    xid13 = "NVRM: Xid (PCI:0000:3a:00): 13, pid=1, name=python, Graphics Exception"
    assert Timeline().kernel(5.0, NODES[0], xid13).verdict().domain is FaultDomain.NONE


def test_confirmations_alone_blame_nobody() -> None:
    read_only = "EXT4-fs (nvme0n1p1): Remounting filesystem read-only"
    verdict = Timeline().kernel(5.0, NODES[0], read_only).verdict()
    assert (verdict.domain, verdict.action) == (FaultDomain.NONE, JobAction.NONE)
    assert verdict.implicated_nodes == frozenset()


def test_nothing_wrong() -> None:
    verdict = healthy_prefix().verdict()
    assert (verdict.domain, verdict.action) == (FaultDomain.NONE, JobAction.NONE)
    assert verdict.implicated_nodes == frozenset() and verdict.evidence == ()


@pytest.mark.parametrize(
    ("state", "domain"),
    [(JobState.FAILED, FaultDomain.APPLICATION), (JobState.NODE_FAIL, FaultDomain.SCHEDULER)],
)
def test_failed_job_without_evidence_restarts(state: JobState, domain: FaultDomain) -> None:
    verdict = healthy_prefix().verdict(replace(JOB, state=state))
    assert (verdict.domain, verdict.action) == (domain, JobAction.RESTART)
    assert verdict.confidence <= 0.3


def test_other_jobs_and_attempts_are_ignored() -> None:
    detections = Timeline().kernel(10.0, NODES[1], XID79).detections()
    others = [replace(d, job_id=JobId("7")) for d in detections]
    others += [replace(d, attempt=ATTEMPT - 1) for d in detections]
    assert attribute(JOB, ATTEMPT, others, now=at(1.0)).domain is FaultDomain.NONE
    unstamped = [replace(d, attempt=-1, job_id=None) for d in detections]
    assert attribute(JOB, ATTEMPT, unstamped, now=at(1.0)).domain is FaultDomain.HARDWARE


def test_naive_times_do_not_crash() -> None:
    detections = Timeline().kernel(10.0, NODES[1], XID79).ranks(10.0, 1, LAUNCH).detections()
    naive = [replace(d, time=d.time.replace(tzinfo=None)) for d in detections[:3]]
    verdict = attribute(JOB, ATTEMPT, [*naive, *detections[3:]], now=at(1.0))
    assert verdict.domain is FaultDomain.HARDWARE


# --- helpers -------------------------------------------------------------------------------------


def test_fan_out_kernel() -> None:
    kernel = DIAGNOSER.scan([LogLine(LogStream.KERNEL, XID79, T0, NODES[0])])[0]
    orphan = replace(kernel, node=NODES[3])
    nodeless = replace(kernel, node=None)
    job_line = replace(kernel, job_id=JobId("9"))
    out = fan_out_kernel(
        [kernel, orphan, nodeless, job_line], {NODES[0]: [JobId("1"), JobId("2"), JobId("1")]}
    )
    assert [(d.job_id, d.node) for d in out] == [
        ("1", NODES[0]),
        ("2", NODES[0]),
        ("9", NODES[0]),
    ]
    assert out[0].fields == kernel.fields and out[0].fields is not kernel.fields
    assert out[2] is job_line


@pytest.mark.parametrize(
    ("role", "action", "fatal"),
    [
        (Role.ROOT, JobAction.RESTART, True),
        (Role.ROOT, JobAction.STOP, True),
        (Role.CASCADE, JobAction.RESTART, True),
        (Role.ROOT, JobAction.NONE, False),
        (Role.CONFIRMATION, JobAction.RESTART, False),
        (Role.PROGRESS, JobAction.NONE, False),
        (Role.NOISE, JobAction.NONE, False),
    ],
)
def test_is_fatal(role: Role, action: JobAction, fatal: bool) -> None:
    assert is_fatal(derived("x", role, action, None)) is fatal


# --- properties ----------------------------------------------------------------------------------

_DETECTIONS = st.builds(
    Detection,
    job_id=st.sampled_from([JOB_ID, JobId("7"), None]),
    attempt=st.sampled_from([-1, ATTEMPT, 0]),
    signature_id=st.sampled_from([SignatureId(s) for s in ("a", "b", "python.exception")]),
    domain=st.sampled_from(FaultDomain),
    role=st.sampled_from(Role),
    severity=st.sampled_from(Severity),
    action=st.sampled_from(JobAction),
    time=st.datetimes(
        min_value=datetime(2025, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
    ),
    node=st.sampled_from([*NODES, None]),
    rank=st.one_of(st.none(), st.integers(0, 40)),
    implicates_node=st.booleans(),
    text=st.text(max_size=200),
    fields=st.dictionaries(
        st.sampled_from(["exception", "message", "step", "x"]), st.text(max_size=20), max_size=4
    ),
    seq=st.integers(0, 10**9),
)


@settings(max_examples=200, deadline=None)
@given(
    detections=st.lists(_DETECTIONS, max_size=30),
    failed=st.frozensets(st.sampled_from(NODES), max_size=2),
    state=st.sampled_from(JobState),
    window=st.floats(min_value=-5.0, max_value=1e6),
)
def test_attribute_never_crashes_and_blames_only_on_evidence(
    detections: list[Detection], failed: frozenset[NodeName], state: JobState, window: float
) -> None:
    verdict = attribute(
        replace(JOB, state=state),
        ATTEMPT,
        detections,
        failed_nodes=failed,
        now=at(0.0),
        window_seconds=window,
    )
    assert 0.0 <= verdict.confidence <= 1.0
    assert "\n" not in verdict.summary
    # A rank-only detection counts against the node that runs its rank (default layout).
    direct = {
        d.node if d.node is not None else node_of_rank(d.rank, NODES)
        for d in detections
        if d.implicates_node
        and d.domain is not FaultDomain.NONE
        and d.role in (Role.ROOT, Role.CONFIRMATION)
        and d.job_id in (JOB_ID, None)
        and d.attempt in (-1, ATTEMPT)
        and (d.node is not None or d.rank is not None)
    }
    assert verdict.implicated_nodes <= direct | failed
    if verdict.action is JobAction.STOP:
        assert verdict.domain is FaultDomain.APPLICATION
    if verdict.domain is FaultDomain.NONE:
        assert verdict.action is JobAction.NONE
