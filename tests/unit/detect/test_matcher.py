"""SignatureDiagnoser.scan: what it copies from the line, what it must not match, and that it
never raises or stalls on any text."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medic.detect.catalogue import default_catalogue
from medic.detect.matcher import MAX_MATCH_CHARS, MAX_TEXT_CHARS, SignatureDiagnoser
from medic.detect.signatures import Signature
from medic.domain.diagnosis import FaultDomain, JobAction, Role, Severity
from medic.domain.ids import JobId, NodeName, SignatureId
from medic.domain.logs import LogLine, LogStream
from medic.ports import Diagnoser

CATALOGUE = default_catalogue()

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DIAGNOSER = SignatureDiagnoser()


def job_line(text: str, *, rank: int | None = None, seq: int = 7) -> LogLine:
    return LogLine(
        stream=LogStream.JOB,
        text=text,
        time=T0,
        node=NodeName("node002"),
        job_id=JobId("42"),
        rank=rank,
        seq=seq,
    )


def test_is_a_diagnoser() -> None:
    diagnoser: Diagnoser = DIAGNOSER
    assert diagnoser.scan([]) == []
    assert DIAGNOSER.signatures == CATALOGUE


def test_scan_copies_the_line_context() -> None:
    [detection] = DIAGNOSER.scan(
        [job_line("[rank9]: RuntimeError: CUDA error: uncorrectable ECC error encountered")]
    )
    assert detection.signature_id == "cuda.ecc_uncorrectable"
    assert detection.job_id == "42"
    assert detection.node == "node002"
    assert detection.time == T0
    assert detection.seq == 7
    assert detection.attempt == -1
    assert detection.rank == 9
    assert detection.implicates_node is True
    assert detection.domain is FaultDomain.HARDWARE
    assert detection.role is Role.ROOT
    assert detection.action is JobAction.RESTART
    assert detection.text.startswith("[rank9]: RuntimeError")


def test_kernel_line_has_no_job_and_fields_are_strings() -> None:
    line = LogLine(
        stream=LogStream.KERNEL,
        text="[ 12.5] NVRM: Xid (PCI:0000:3a:00): 79, pid=99, name=python, GPU has fallen off.",
        time=T0,
        node=NodeName("node003"),
    )
    [detection] = DIAGNOSER.scan([line])
    assert detection.job_id is None
    assert detection.node == "node003"
    assert detection.rank is None
    assert detection.fields == {"pci": "0000:3a:00", "xid": "79", "pid": "99"}


def test_rank_from_the_log_line_wins_over_the_prefix() -> None:
    [detection] = DIAGNOSER.scan([job_line("[rank3]: KeyError: 'x'", rank=11)])
    assert detection.rank == 11


def test_torchrun_default_prefix_is_a_local_rank_not_a_rank() -> None:
    [detection] = DIAGNOSER.scan([job_line("[default3]:  what():  CUDA error: unknown error")])
    assert detection.signature_id == "cuda.unknown_error"
    assert detection.rank is None


def test_output_follows_input_order() -> None:
    lines = [
        job_line("[rank0]: KeyError: 'a'", seq=1),
        job_line("plain chatter", seq=2),
        job_line("[rank1]: RuntimeError: CUDA error: unspecified launch failure", seq=3),
    ]
    assert [d.seq for d in DIAGNOSER.scan(lines)] == [1, 3]


NEAR_MISSES = [
    "node001:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
    "node001:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "node001:123:456 [0] NCCL INFO comm 0x5 rank 0 nranks 16 cudaDev 0 - Init COMPLETE",
    "node001:123:456 [0] NCCL INFO [Service thread] Connection closed by localRank 1",
    "node001:123:456 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
    "nvidia-smi: no errors found",
    "GPU 0: ECC errors: volatile 0, aggregate 0",
    "Total errors: 0",
    "dcgmi diag: memory test passed, no uncorrectable errors",
    "mlx5_core 0000:0c:00.0: mlx5_port_change_event:1159:(pid 0): Link up on port 1",
    "saving checkpoint at iteration       40 to /checkpoints/error-analysis",
    "loading checkpoint from /checkpoints/oom_test at iteration 30",
    "WARNING: caught CUDA out of memory in autotuner, retrying with a smaller block",
    "INFO: retrying after error: timeout while reading batch",
    "Error: ",
    "ERROR: something went wrong",
    "    raise RuntimeError('boom')",
    "During handling of the above exception, another exception occurred:",
    "Exception raised from query at ../aten/src/ATen/cuda/CUDAEvent.h:95",
    "UserWarning: TypedStorage is deprecated",
    "the errors module has 3 Exceptions: none raised",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
    "python train.py --log-dir /logs/segfault_repro --out /tmp/bus_errors",
    "[rank0]: RuntimeError: NCCL communicator was aborted on rank 0.",
    "[rank0]: torch.distributed.DistBackendError: [3] is setting up NCCL communicator",
    "[rank1]: ConnectionResetError: [Errno 104] Connection reset by peer",
    "[rank1]: TimeoutError: operation timed out",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_miss_is_not_a_root(text: str) -> None:
    for detection in DIAGNOSER.scan([job_line(text)]):
        assert detection.role is not Role.ROOT, (text, detection.signature_id)


def test_no_pattern_matches_across_a_newline() -> None:
    lines = [
        job_line("RuntimeError: CUDA error: unspecified\nlaunch failure"),
        job_line("NVRM: Xid (PCI:0000:3a:00):\n79, pid=1, name=python, x"),
        job_line("Watchdog caught collective\r\noperation timeout: WorkNCCL(SeqNum=1, OpType=X,"),
        job_line("uncorrectable ECC\u2028error encountered"),
    ]
    found = {d.signature_id for d in DIAGNOSER.scan(lines)}
    # The first half of the CUDA line is still a (generic) CUDA error line on its own; no half
    # of the others matches anything.
    assert found == {"cuda.error"}


def test_each_physical_line_of_a_multi_line_text_is_matched() -> None:
    text = "[rank1]: KeyError: 'a'\n[rank2]: RuntimeError: CUDA error: unspecified launch failure"
    detections = DIAGNOSER.scan([job_line(text)])
    assert [(d.signature_id, d.rank) for d in detections] == [
        ("python.exception", 1),
        ("cuda.launch_failure", 2),
    ]


def test_long_line_is_matched_on_its_head_and_kept_short() -> None:
    head = "RuntimeError: CUDA error: unspecified launch failure "
    [detection] = DIAGNOSER.scan([job_line(head + "x" * 2_000_000)])
    assert detection.signature_id == "cuda.launch_failure"
    assert len(detection.text) == MAX_TEXT_CHARS
    tail_only = "x" * (MAX_MATCH_CHARS + 10) + " uncorrectable ECC error encountered"
    assert DIAGNOSER.scan([job_line(tail_only)]) == []


def test_pathological_lines_stay_fast() -> None:
    keywords = " ".join(s.title for s in CATALOGUE[:50])
    nasty = [
        "NVRM: Xid (PCI:" * 2000,
        "iteration 1/" + "1 | " * 5000,
        "a." * 8000 + "Error",
        ("GPU 0000:3b:00.0 " * 1000) + "fallen off the bus",
        (keywords + " ") * 40,
        "\n" * 20000,
        "[rank1]:" * 3000,
    ]
    start = time.perf_counter()
    DIAGNOSER.scan([job_line(text) for text in nasty])
    assert time.perf_counter() - start < 5.0


def test_throughput_on_ordinary_lines() -> None:
    iteration = (
        "[rank0]:  [2026-01-01 00:10:00] iteration      120/  100000 | consumed samples: 1 |"
        " elapsed time per iteration (ms): 512.3 | tokens per second: 65536.4 | lm loss: 2.5 |"
    )
    lines = [job_line(iteration if i % 2 else "NCCL INFO chatter line", seq=i) for i in range(5000)]
    start = time.perf_counter()
    detections = DIAGNOSER.scan(lines)
    assert len(detections) == 2500
    assert time.perf_counter() - start < 5.0


def _signature(sid: str, pattern: str) -> Signature:
    return Signature(
        SignatureId(sid),
        "t",
        FaultDomain.NONE,
        Role.NOISE,
        Severity.INFO,
        False,
        JobAction.NONE,
        pattern,
        "https://example.org",
    )


@pytest.mark.parametrize(
    ("signatures", "message"),
    [
        ([_signature("a", "x"), _signature("a", "x")], "duplicate"),
        ([_signature("a", "(")], "invalid pattern"),
        ([_signature("a", "(?u)x")], "invalid pattern"),  # re.ASCII and (?u) conflict
    ],
)
def test_broken_catalogue_is_refused(signatures: list[Signature], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SignatureDiagnoser(signatures)


def test_a_given_catalogue_replaces_the_default() -> None:
    diagnoser = SignatureDiagnoser([_signature("any", r"^hello")])
    assert [d.signature_id for d in diagnoser.scan([job_line("hello world")])] == ["any"]
    assert [s.id for s in diagnoser.signatures] == ["any"]
    assert diagnoser.scan([job_line("RuntimeError: CUDA error: unspecified launch failure")]) == []
    assert SignatureDiagnoser([]).scan([job_line("hello")]) == []


def test_match_text_on_empty_text() -> None:
    assert DIAGNOSER.match_text("") is None


_FRAGMENTS = st.sampled_from(
    [e.line[:40] for s in CATALOGUE for e in s.examples[:1]]
    + ["[rank1]:", "NVRM: Xid (PCI:0000:3a:00): ", "79, ", "pid=", ": ", "Error", "\n", " ", "é"]
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_scan_never_raises_on_any_text(text: str) -> None:
    for detection in DIAGNOSER.scan([job_line(text)]):
        assert isinstance(detection.signature_id, str)
        assert all(isinstance(v, str) for v in detection.fields.values())


@settings(max_examples=300, deadline=None)
@given(st.binary())
def test_scan_never_raises_on_decoded_bytes(data: bytes) -> None:
    DIAGNOSER.scan([job_line(data.decode("utf-8", errors="replace"))])
    DIAGNOSER.scan([job_line(data.decode("utf-8", errors="surrogateescape"))])


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=40).map("".join))
def test_scan_never_raises_on_signature_fragments(text: str) -> None:
    for detection in DIAGNOSER.scan([job_line(text)]):
        assert "\n" not in detection.text
