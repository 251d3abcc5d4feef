"""The signature catalogue: integrity, one example per signature, and every simulator line.

The simulator lines are built here from the templates in docs/simulator.md (not from the
simulator's code), so the two implementations are checked against the document, not each other.
"""

from __future__ import annotations

import re

import pytest

from medic.attribute.blame import NODE_FAIL_SIGNATURE_ID
from medic.detect import matcher as matcher_module
from medic.detect.catalogue import default_catalogue
from medic.detect.catalogue_entry import CANONICAL_FIELDS
from medic.detect.matcher import SignatureDiagnoser
from medic.detect.signatures import (
    HANG_SIGNATURE_ID,
    SLOW_JOB_SIGNATURE_ID,
    SLOW_NODE_SIGNATURE_ID,
)
from medic.domain.diagnosis import FaultDomain, JobAction, Role
from medic.policy import recovery

DIAGNOSER = SignatureDiagnoser()
CATALOGUE = default_catalogue()

# One or more lines per signature: (line, expected fields subset).
EXAMPLES: dict[str, list[tuple[str, dict[str, str]]]] = {
    "megatron.iteration": [
        (
            " [2026-01-01 00:00:05] iteration       10/  100000 | consumed samples:  1280 |"
            " elapsed time per iteration (ms): 500.0 | tokens per second: 65536.0 |",
            {"step": "10", "iter_ms": "500.0", "tokens_per_s": "65536.0"},
        ),
        (
            " iteration      100/  500000 | consumed samples: 3200 | elapsed time per iteration"
            " (ms): 1234.5 | learning rate: 1.0E-04 |",
            {"step": "100", "iter_ms": "1234.5"},
        ),
    ],
    "medic.sim.timing": [
        ("[timing] step 12 forward-backward: 480.5 ms", {"step": "12", "compute_ms": "480.5"})
    ],
    "megatron.checkpoint_saved": [
        (
            "successfully saved checkpoint from iteration       20 to /ckpt [ t 1/1, p 1/1 ]",
            {"checkpoint": "saved", "step": "20"},
        )
    ],
    "megatron.checkpoint_loaded": [
        (
            "successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 20",
            {"checkpoint": "loaded", "step": "20"},
        )
    ],
    # The start of an attempt: a marker only (the world size is no canonical field).
    "megatron.init_distributed": [("> initializing torch distributed with 16 workers", {})],
    "xid.fallen_off_bus": [
        (
            "[  123.456] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen"
            " off the bus.",
            {"xid": "79", "pci": "0000:3b:00", "pid": "4242"},
        )
    ],
    "xid.ecc_dbe": [
        (
            "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, An uncorrectable double bit"
            " error (DBE) has been detected on GPU in the framebuffer at partition 0",
            {"xid": "48"},
        )
    ],
    "xid.memory_remap": [
        (
            "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for"
            " remapping, reset gpu to activate.",
            {"xid": "63", "pci": "0000:10:1c", "pid": "1896"},
        ),
    ],
    "xid.92": [
        (
            "NVRM: Xid (PCI:0000:10:00): 92, pid='<unknown>', name=<unknown>, High SBE",
            {"xid": "92", "pci": "0000:10:00"},
        )
    ],
    "xid.application_fault": [
        ("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics Exception", {"xid": "13"}),
    ],
    "xid.31": [
        (
            "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000008, intr 10000000."
            " MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_00000000.",
            {"xid": "31", "pid": "1234"},
        )
    ],
    "xid.43": [("NVRM: Xid (PCI:0000:3b:00): 43, pid=1, name=python, Ch 00000010", {"xid": "43"})],
    "xid.preemptive_cleanup": [
        ("NVRM: Xid (PCI:0000:3b:00): 45, pid=1234, name=python, Ch 00000010", {"xid": "45"})
    ],
    "xid.94": [
        ("NVRM: Xid (PCI:0000:3b:00): 94, pid=1234, name=python, Contained: SM", {"xid": "94"})
    ],
    "xid.64": [
        ("NVRM: Xid (PCI:0000:3b:00): 64, pid=1, name=python, Remapping failure", {"xid": "64"})
    ],
    "xid.74": [
        ("NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=python, NVLink: fatal", {"xid": "74"})
    ],
    "xid.95": [("NVRM: Xid (PCI:0000:3b:00): 95, pid=1, Uncontained: FBHUB.", {"xid": "95"})],
    "xid.131": [("NVRM: Xid (PCI:0000:3b:00): 131, pid=1, unknown code", {"xid": "131"})],
    # A code without its own signature still falls to the generic one.
    "xid.gpu_error": [
        (
            "NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=python, unknown code",
            {"xid": "999", "pci": "0000:3b:00", "pid": "1"},
        )
    ],
    "gpu.fallen_off_bus": [
        (
            "NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has"
            " fallen off the bus and is not responding to commands.",
            {"pci": "0000:3b:00.0"},
        )
    ],
    "mlx5.link_down": [
        (
            "mlx5_core 0000:0c:00.0: mlx5_port_change_event:1159:(pid 0): Link down on port 1",
            {"pci": "0000:0c:00.0", "port": "1"},
        )
    ],
    "kernel.fs_read_only": [("EXT4-fs (nvme0n1p1): Remounting filesystem read-only", {})],
    "kernel.oom_kill": [
        ("Out of memory: Killed process 1322 (python) total-vm:1234kB", {"pid": "1322"}),
        ("slurmstepd: error: Detected 1 oom_kill event in StepId=12.0.", {}),
    ],
    "cuda.ecc_uncorrectable": [
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", {})
    ],
    "cuda.nvlink_uncorrectable": [
        ("RuntimeError: CUDA error: uncorrectable NVLink error was detected during execution", {})
    ],
    "cuda.device_unavailable": [
        ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", {})
    ],
    "cuda.oom": [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 3 has",
            {"exception": "torch.OutOfMemoryError", "gpu": "3"},
        ),
        ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", {}),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory.", {}),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate", {}),
    ],
    "cuda.illegal_access": [
        ("RuntimeError: CUDA error: an illegal memory access was encountered", {})
    ],
    "cuda.launch_failure": [("RuntimeError: CUDA error: unspecified launch failure", {})],
    "cuda.unknown_error": [("  what():  CUDA error: unknown error", {})],
    "nccl.ib_completion_error": [
        (
            "node002:3468:3905 [4] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion"
            " from peer 10.0.0.3<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
            {"peer": "10.0.0.3<54862>", "status": "12", "vendor_err": "129"},
        )
    ],
    "nccl.ofi_completion_error": [
        (
            "NET/OFI Request 0x7f14 completed with error. RC: 113. Error: 2 (UNDELIVERABLE).",
            {"errno": "113", "vendor_err": "2", "message": "UNDELIVERABLE"},
        )
    ],
    "python.dataloader_shm": [
        ("RuntimeError: DataLoader worker (pid 46794) is killed by signal: Bus error.", {})
    ],
    "python.read_only_filesystem": [
        ("OSError: [Errno 30] Read-only file system: '/ckpt/iter_20'", {"path": "/ckpt/iter_20"})
    ],
    "process.crash_signal": [
        ("traceback : Signal 11 (SIGSEGV) received by PID 3304209", {"signal": "11"}),
        ("traceback : Signal 7 (SIGBUS) received by PID 42", {"signal": "7"}),
        ("Segmentation fault (core dumped)", {}),
        ("Fatal Python error: Segmentation fault", {}),
    ],
    "process.sigabrt": [("traceback : Signal 6 (SIGABRT) received by PID 2385923", {})],
    "nccl.watchdog_timeout": [
        (
            "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout:"
            " WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212"
            " milliseconds before timing out.",
            {"opcode": "ALLREDUCE", "seconds": "1800"},
        )
    ],
    "nccl.watchdog_abort": [
        ("[PG 0 Rank 144] Heartbeat monitor timed out! Process will be terminated.", {}),
        ("To avoid data inconsistency, we are taking the entire process down.", {}),
    ],
    "nccl.remote_error": [("ncclRemoteError: A call failed possibly due to a network error", {})],
    "nccl.peer_connection_lost": [
        ("Net : Connection closed by remote peer user<50260>", {}),
        ("NCCL WARN Net : Call to recv from 10.0.0.1<5835> failed : Broken pipe", {}),
    ],
    "nccl.error": [("ncclInternalError: Internal check failed.", {})],
    "torchelastic.rendezvous_error": [
        ("torch.distributed.DistStoreError: Timed out after 901 seconds", {}),
    ],
    "torchelastic.child_failed": [
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", {}),
        ("exitcode  : -6 (pid: 2385923)", {"exit_code": "-6", "pid": "2385923"}),
    ],
    "process.broken_pipe": [("BrokenPipeError: [Errno 32] Broken pipe", {})],
    "python.exception": [
        ("KeyError: 'labels'", {"exception": "KeyError", "message": "'labels'"}),
        ("AssertionError", {"exception": "AssertionError"}),
        ("torch._dynamo.exc.TorchRuntimeError: Failed running call_function", {}),
        ("ValueError: shape mismatch: [4, 8] vs [4, 16]", {"exception": "ValueError"}),
    ],
}


def _doc_iteration(step: int) -> str:
    """The iteration line with the exact widths of docs/simulator.md."""
    return (
        f"[rank0]:  [2026-01-01 00:10:00] iteration {step:>8}/{100000:>8} | consumed samples:"
        f" {step * 128:>12} | elapsed time per iteration (ms): {512.3:.1f} | throughput per GPU"
        f" (TFLOP/s/GPU): {401.2:.1f} | tokens per second: {65536.4:.1f} | learning rate:"
        f" {3e-4:.6E} | global batch size: {128:>5} | lm loss: {2.5:.6E} | loss scale: 1.0 |"
        f" grad norm: {1.234:.3f} | number of skipped iterations: 0 | number of nan iterations:"
        " 0 |"
    )


# (line, signature id, expected fields subset, expected rank from the prefix)
SIM_LINES: list[tuple[str, str, dict[str, str], int | None]] = [
    (
        "[rank8]: > initializing torch distributed with 16 workers",
        "megatron.init_distributed",
        {},
        8,
    ),
    (
        "[rank0]:  successfully loaded checkpoint from /checkpoints/7 [ t 1/1, p 1/1 ] at"
        " iteration 30",
        "megatron.checkpoint_loaded",
        {"checkpoint": "loaded", "step": "30"},
        0,
    ),
    (
        _doc_iteration(1234),
        "megatron.iteration",
        {"step": "1234", "iter_ms": "512.3", "tokens_per_s": "65536.4"},
        0,
    ),
    (
        "[rank8]: [timing] step 1234 forward-backward: 480.5 ms",
        "medic.sim.timing",
        {"step": "1234", "compute_ms": "480.5"},
        8,
    ),
    (
        f"[rank0]:  successfully saved checkpoint from iteration {40:>8} to /checkpoints/7"
        " [ t 1/1, p 1/1 ]",
        "megatron.checkpoint_saved",
        {"checkpoint": "saved", "step": "40"},
        0,
    ),
    (
        f"NVRM: Xid (PCI:0000:{0x3A:02x}:00): 79, pid=31337, name=python, GPU has fallen off the"
        " bus.",
        "xid.fallen_off_bus",
        {"xid": "79", "pci": "0000:3a:00", "pid": "31337"},
        None,
    ),
    (
        "[rank9]: RuntimeError: CUDA error: unspecified launch failure",
        "cuda.launch_failure",
        {},
        9,
    ),
    (
        f"NVRM: Xid (PCI:0000:{0x18:02x}:00): 48, pid=31337, name=python, An uncorrectable double"
        " bit error (DBE) has been detected on GPU in the framebuffer at partition 0,"
        " subpartition 0.",
        "xid.ecc_dbe",
        {"xid": "48", "pci": "0000:18:00"},
        None,
    ),
    (
        "[rank10]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "cuda.ecc_uncorrectable",
        {},
        10,
    ),
    (
        f"mlx5_core 0000:{0x0C:02x}:00.0: mlx5_port_change_event:1159:(pid 0): Link down on port 1",
        "mlx5.link_down",
        {"pci": "0000:0c:00.0", "port": "1"},
        None,
    ),
    (
        "node002:4242:4250 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from"
        " peer 10.0.0.1<43512> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        "nccl.ib_completion_error",
        {"peer": "10.0.0.1<43512>", "status": "12", "vendor_err": "129"},
        None,
    ),
    (
        "[rank0]:[E0101 00:10:00.123456 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught"
        " collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=4096,"
        " NumelOut=4096, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        "nccl.watchdog_timeout",
        {"opcode": "ALLREDUCE", "seconds": "600"},
        0,
    ),
    (
        "[rank3]: KeyError: 'labels'",
        "python.exception",
        {"exception": "KeyError", "message": "'labels'"},
        3,
    ),
    (
        "[rank8]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0"
        " has a total capacity of 79.10 GiB of which 1.21 GiB is free. Including non-PyTorch"
        " memory, this process has 77.88 GiB memory in use.",
        "cuda.oom",
        {"exception": "torch.OutOfMemoryError", "gpu": "0"},
        8,
    ),
]

# Simulator lines that carry no signal on their own: they must not produce a fatal detection.
SIM_QUIET_LINES = [
    "[rank0]:  loading checkpoint from /checkpoints/7 at iteration 30",
    f"[rank0]:  saving checkpoint at iteration {40:>8} to /checkpoints/7",
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/workspace/train.py", line 214, in <module>',
    '[rank3]:     loss = compute_loss(batch["labels"], logits)',
]


def test_catalogue_ids_are_unique_and_patterns_compile() -> None:
    ids = [s.id for s in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 150
    for signature in CATALOGUE:
        assert signature.reference.startswith(("https://", "docs/")), signature.id
        re.compile(signature.pattern)


def test_catalogue_roles_are_consistent() -> None:
    for signature in CATALOGUE:
        if signature.role is Role.CASCADE:
            assert not signature.implicates_node, f"{signature.id}: a cascade never implicates"
        if signature.role in (Role.PROGRESS, Role.NOISE):
            assert signature.action is JobAction.NONE, signature.id
            assert signature.domain is FaultDomain.NONE, signature.id
        if signature.action is JobAction.STOP:
            assert signature.domain is FaultDomain.APPLICATION, signature.id


def test_every_signature_has_an_example() -> None:
    # The hand-written examples here cover the first catalogue's signatures; every YAML signature
    # carries its own examples, checked by the loader.
    assert set(EXAMPLES) <= {s.id for s in CATALOGUE}
    assert all(s.examples for s in CATALOGUE)


@pytest.mark.parametrize(
    ("signature_id", "line", "fields"),
    [(sid, line, fields) for sid, cases in EXAMPLES.items() for line, fields in cases],
)
def test_example_matches_its_signature(
    signature_id: str, line: str, fields: dict[str, str]
) -> None:
    found = DIAGNOSER.match_text(line)
    assert found is not None, line
    signature, extracted = found
    assert signature.id == signature_id
    assert fields.items() <= extracted.items()
    assert set(extracted) <= CANONICAL_FIELDS, signature.id


# Xid codes that now have their own signature, and how the generic signature that used to win them
# classified the line (domain, role, implicates the node, job action): unchanged.
_HW_ROOT = (FaultDomain.HARDWARE, Role.ROOT, True, JobAction.RESTART)
_HW_WARN = (FaultDomain.HARDWARE, Role.ROOT, True, JobAction.NONE)
_APP_CONF = (FaultDomain.APPLICATION, Role.CONFIRMATION, False, JobAction.NONE)
PER_CODE_XIDS = [
    ("xid.94", _HW_ROOT),
    ("xid.64", _HW_ROOT),
    ("xid.74", _HW_ROOT),
    ("xid.95", _HW_ROOT),
    ("xid.131", _HW_ROOT),
    ("xid.92", _HW_WARN),
    ("xid.31", _APP_CONF),
    ("xid.43", _APP_CONF),
]


@pytest.mark.parametrize(("signature_id", "kind"), PER_CODE_XIDS)
def test_per_code_xid_keeps_the_generic_classification(
    signature_id: str, kind: tuple[FaultDomain, Role, bool, JobAction]
) -> None:
    [(line, _)] = EXAMPLES[signature_id]
    found = DIAGNOSER.match_text(line)
    assert found is not None and found[0].id == signature_id
    signature = found[0]
    assert (signature.domain, signature.role, signature.implicates_node, signature.action) == kind
    assert signature.xid == int(signature_id.removeprefix("xid."))


def test_srun_node_failure_implicates_the_node_it_names() -> None:
    # Attribution places a scheduler root that implicates on its ``node`` field
    # (medic.attribute.grouping.place): without ``implicates`` the failed node goes unblamed.
    found = DIAGNOSER.match_text("srun: error: Node failure on node003")
    assert found is not None
    signature, fields = found
    assert (signature.id, signature.domain, signature.role) == (
        "slurm.node_failure",
        FaultDomain.SCHEDULER,
        Role.ROOT,
    )
    assert signature.implicates_node and fields == {"node": "node003"}


@pytest.mark.parametrize(("line", "signature_id", "fields", "rank"), SIM_LINES)
def test_simulator_line(
    line: str, signature_id: str, fields: dict[str, str], rank: int | None
) -> None:
    found = DIAGNOSER.match_text(line)
    assert found is not None, line
    signature, extracted = found
    assert signature.id == signature_id
    assert fields.items() <= extracted.items()
    assert set(extracted) <= CANONICAL_FIELDS, signature.id
    assert matcher_module.strip_rank_prefix(line)[1] == rank


@pytest.mark.parametrize("line", SIM_QUIET_LINES)
def test_simulator_quiet_lines_are_not_fatal(line: str) -> None:
    found = DIAGNOSER.match_text(line)
    assert found is None or found[0].role in (Role.PROGRESS, Role.NOISE)


def test_derived_signature_ids_agree_across_layers() -> None:
    assert recovery.SLOW_NODE_SIGNATURE_ID == SLOW_NODE_SIGNATURE_ID
    derived = {HANG_SIGNATURE_ID, SLOW_JOB_SIGNATURE_ID, SLOW_NODE_SIGNATURE_ID}
    derived.add(NODE_FAIL_SIGNATURE_ID)
    assert len(derived) == 4
    assert not derived & {s.id for s in CATALOGUE}


def test_iteration_with_error_in_a_path_is_progress() -> None:
    line = _doc_iteration(5).replace("learning rate", "data /data/error_logs rate")
    found = DIAGNOSER.match_text(line)
    assert found is not None and found[0].id == "megatron.iteration"
