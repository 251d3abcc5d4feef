"""Text of every log line the simulator emits, exactly as docs/simulator.md specifies.

Pure functions, no state: the detectors are written against the table in the doc, so this module is
the single place where the simulator's wording lives. Callers pass every varying value (times,
pids, metrics) so that randomness stays in the caller's seeded generators.
"""

from __future__ import annotations

import math
from datetime import datetime

__all__ = [
    "GPU_BUS_IDS",
    "NIC_BUS_ID",
    "app_bug_lines",
    "checkpoint_lines",
    "ecc_kernel",
    "ecc_victim",
    "ib_kernel",
    "ib_victim",
    "init_line",
    "iteration_line",
    "learning_rate",
    "lm_loss",
    "oom_line",
    "resume_lines",
    "timing_line",
    "watchdog_line",
    "xid79_kernel",
    "xid79_victim",
]

GPU_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
"""PCI bus of GPU 0..7 on every simulated node (the layout of a typical 8-GPU server)."""
NIC_BUS_ID = 0x0C
"""PCI bus of the InfiniBand adapter."""


def init_line(rank: int, world: int) -> str:
    return f"[rank{rank}]: > initializing torch distributed with {world} workers"


def resume_lines(job: str, step: int) -> tuple[str, str]:
    return (
        f"[rank0]:  loading checkpoint from /checkpoints/{job} at iteration {step}",
        f"[rank0]:  successfully loaded checkpoint from /checkpoints/{job} [ t 1/1, p 1/1 ] "
        f"at iteration {step}",
    )


def learning_rate(step: int, train_iters: int) -> float:
    """Linear warm-up over 100 iterations, then cosine decay to a tenth (Megatron's default)."""
    peak, warmup = 3.0e-4, 100
    if step <= warmup:
        return peak * step / warmup
    frac = min(1.0, (step - warmup) / max(1, train_iters - warmup))
    return peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * frac)))


def lm_loss(step: int, noise: float) -> float:
    """A plausibly decreasing loss curve; ``noise`` in [-1, 1) adds a little jitter."""
    return 2.0 + 9.0 * math.exp(-step / 400.0) + 0.02 * noise


def iteration_line(
    when: datetime,
    step: int,
    train_iters: int,
    *,
    global_batch: int,
    iter_ms: float,
    tflops: float,
    tokens_per_s: float,
    loss: float,
    grad_norm: float,
) -> str:
    return (
        f"[rank0]:  [{when:%Y-%m-%d %H:%M:%S}] iteration {step:>8}/{train_iters:>8} | "
        f"consumed samples: {step * global_batch:>12} | "
        f"elapsed time per iteration (ms): {iter_ms:.1f} | "
        f"throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | "
        f"tokens per second: {tokens_per_s:.1f} | "
        f"learning rate: {learning_rate(step, train_iters):.6E} | "
        f"global batch size: {global_batch:>5} | lm loss: {loss:.6E} | loss scale: 1.0 | "
        f"grad norm: {grad_norm:.3f} | number of skipped iterations: 0 | "
        f"number of nan iterations: 0 |"
    )


def timing_line(rank: int, step: int, ms: float) -> str:
    return f"[rank{rank}]: [timing] step {step} forward-backward: {ms:.1f} ms"


def checkpoint_lines(job: str, step: int) -> tuple[str, str]:
    return (
        f"[rank0]:  saving checkpoint at iteration {step:>8} to /checkpoints/{job}",
        f"[rank0]:  successfully saved checkpoint from iteration {step:>8} to /checkpoints/{job} "
        "[ t 1/1, p 1/1 ]",
    )


def xid79_kernel(gpu: int, pid: int) -> str:
    return (
        f"NVRM: Xid (PCI:0000:{GPU_BUS_IDS[gpu]:02x}:00): 79, pid={pid}, name=python, "
        "GPU has fallen off the bus."
    )


def xid79_victim(rank: int) -> str:
    return f"[rank{rank}]: RuntimeError: CUDA error: unspecified launch failure"


def ecc_kernel(gpu: int, pid: int) -> str:
    return (
        f"NVRM: Xid (PCI:0000:{GPU_BUS_IDS[gpu]:02x}:00): 48, pid={pid}, name=python, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
        "partition 0, subpartition 0."
    )


def ecc_victim(rank: int) -> str:
    return f"[rank{rank}]: RuntimeError: CUDA error: uncorrectable ECC error encountered"


def ib_kernel() -> str:
    return (
        f"mlx5_core 0000:{NIC_BUS_ID:02x}:00.0: mlx5_port_change_event:1159:(pid 0): "
        "Link down on port 1"
    )


def ib_victim(node: str, pid: int, tid: int, gpu: int, peer_index: int, port: int) -> str:
    """NCCL's warning on the node whose link went down; ``peer_index`` is the peer's node index
    (0-based), which gives its address 10.0.a.b."""
    a, b = divmod(peer_index + 1, 256)
    return (
        f"{node}:{pid}:{tid} [{gpu}] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
        f"from peer 10.0.{a}.{b}<{port}> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
    )


def watchdog_line(rank: int, when: datetime, seq_num: int, numel: int) -> str:
    return (
        f"[rank{rank}]:[E{when:%m%d %H:%M:%S}.{when.microsecond:06d} ProcessGroupNCCL.cpp:607] "
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq_num}, "
        f"OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for "
        "600060 milliseconds before timing out."
    )


def app_bug_lines(rank: int) -> tuple[str, str, str, str]:
    return (
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "/workspace/train.py", line 214, in <module>',
        f'[rank{rank}]:     loss = compute_loss(batch["labels"], logits)',
        f"[rank{rank}]: KeyError: 'labels'",
    )


def oom_line(rank: int, gpu: int) -> str:
    return (
        f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. "
        f"GPU {gpu} has a total capacity of 79.10 GiB of which 1.21 GiB is free. Including "
        "non-PyTorch memory, this process has 77.88 GiB memory in use."
    )
