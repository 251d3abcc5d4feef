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
    "kernel_noise_line",
    "learning_rate",
    "lm_loss",
    "nccl_init_lines",
    "noise_line",
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


def nccl_init_lines(node: str, pid: int, local: int, rank: int, world: int, addr: str) -> list[str]:
    """What NCCL prints per rank at communicator set-up with ``NCCL_DEBUG=INFO`` (the
    ``production`` log profile): bootstrap and transport choice, then init start and complete."""
    head = f"{node}:{pid}:{pid} [{local}] NCCL INFO"
    bus = GPU_BUS_IDS[local % len(GPU_BUS_IDS)]
    return [
        f"{head} Bootstrap : Using ib0:{addr}<0>",
        f"{head} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:{addr}<0>",
        f"{head} Using network IB",
        f"{head} comm 0x55d2c8a4f0 rank {rank} nranks {world} cudaDev {local} nvmlDev {local} "
        f"busId {bus:02x}000 commId 0x9a1f6e2b7c4d3a10 - Init START",
        f"{head} Channel 00/32 :    0   1   2   3   4   5   6   7",
        f"{head} comm 0x55d2c8a4f0 rank {rank} nranks {world} cudaDev {local} nvmlDev {local} "
        f"busId {bus:02x}000 commId 0x9a1f6e2b7c4d3a10 - Init COMPLETE",
    ]


_NOISE = (
    "UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed "
    "explicitly. In version 2.5 we will raise an exception if use_reentrant is not passed.",
    "FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use "
    "`torch.amp.autocast('cuda', args...)` instead.",
    "[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified in DDP "
    "constructor, but did not find any unused parameters in the forward pass.",
    " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1045472256",
    "WARNING: Logging before InitGoogleLogging() is written to STDERR",
)
_KERNEL_NOISE = (
    "systemd[1]: Started Session 4711 of User slurm.",
    "EXT4-fs (nvme0n1p2): re-mounted. Opts: errors=remount-ro. Quota mode: none.",
    "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate "
    "to 79750",
    "nvidia-nvswitch0: open (major=511, minor=0)",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready",
)


def noise_line(rank: int, pick: int) -> str:
    """A harmless warning or info line of the kind every real job prints (``production``)."""
    return f"[rank{rank}]: {_NOISE[pick % len(_NOISE)]}"


def kernel_noise_line(pick: int) -> str:
    """A harmless kernel log line (``production``: a few nodes a minute)."""
    return _KERNEL_NOISE[pick % len(_KERNEL_NOISE)]


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
    rank: int = 0,
) -> str:
    """Megatron's training log line; ``rank``: the rank that prints it (the last one in the
    ``production`` profile, as Megatron's ``print_rank_last``)."""
    return (
        f"[rank{rank}]:  [{when:%Y-%m-%d %H:%M:%S}] iteration {step:>8}/{train_iters:>8} | "
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
