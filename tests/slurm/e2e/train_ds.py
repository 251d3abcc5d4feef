"""A second stand-in training program for the real-Slurm end-to-end tests: DeepSpeed under srun.

``train.py`` prints Megatron-LM's lines behind a ``[rankN]:`` prefix; this one prints what a plain
DeepSpeed ZeRO-1 (bf16) data-parallel job prints when it is started as
``srun --label python3 train_ds.py --dir SHARED/JOB`` (one process per GPU, no torchrun, no
DeepSpeed launcher), so that medic meets a trainer its authors did not tune it to. The program
itself writes no rank prefix: srun's ``--label`` puts ``N: `` (the global task id) before every
line. Standard library only; the emulated stack is DeepSpeed 0.15.1, PyTorch 2.4.1 (pip wheel,
Python 3.10 in ``/usr/local/lib/python3.10/dist-packages``) and NCCL 2.20.5.

Contract with ``harness.TrainingJob`` (the same as ``train.py``'s)
-------------------------------------------------------------------
* CLI: ``--dir``, ``--iters``, ``--step-seconds``, ``--checkpoint-every``,
  ``--collective-timeout`` (and ``--steps-per-print``, DeepSpeed's ``steps_per_print``, default 1).
* Environment: attempt ``SLURM_RESTART_COUNT`` (unset: 0), rank ``SLURM_PROCID``, local rank
  ``SLURM_LOCALID``, world ``SLURM_NTASKS``, node ``SLURMD_NODENAME``.
* Files under ``--dir``: ``run<attempt>/rank<r>`` holds ``step node pid`` (the last step the rank
  reached, written at start-up and when it enters each step's all-reduce);
  ``run<attempt>/step`` holds the last step every rank completed (rank 0 writes it after the
  step's all-reduce and after that step's checkpoint); ``checkpoint/latest`` holds the step of the
  last complete checkpoint (a number, where DeepSpeed would write the tag ``global_stepN``: the
  harness reads it as an int); ``faults/raise_at`` holds a step N: every rank raises at the first
  step >= N, in this and every later attempt (a deterministic application bug).
* Checkpoints: ``checkpoint/global_stepN/mp_rank_00_model_states.pt`` (rank 0) and
  ``bf16_zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` (every rank), small JSON files under
  DeepSpeed's names; the three newest tags are kept. An attempt > 0 resumes from ``latest``.

The collective: a real all-reduce through files, blocking like NCCL
---------------------------------------------------------------------
Every collective (the start-up broadcast of the parameters, each step's gradient all-reduce, the
two barriers of a checkpoint save) is one :meth:`FileGroup.all_reduce`: the rank writes its
vector (8 floats) with the collective's sequence number to its slot file
``run<attempt>/coll/r<rank>.<seq % 2>`` (write + rename), then polls until every rank's slot holds
that sequence number, and sums the vectors in rank order, so every rank ends with bit-identical
parameters. Two slots per rank suffice: a rank can only post ``seq + 2`` after it has read
everyone's ``seq + 1``, which nobody posts before finishing ``seq``. Nothing is printed while
waiting. So one frozen rank (SIGSTOP) stops every rank at the next collective without a word, and
one killed rank leaves the others waiting until ``--collective-timeout``; then each waiting rank
prints the NCCL watchdog's lines and dies of SIGABRT, as torch's watchdog thread does through
``std::terminate`` (core dumps are switched off first).

Lines printed, and where their shapes come from
-----------------------------------------------
DeepSpeed's logger (stdout), formatted by ``deepspeed/utils/logging.py``
``LoggerFactory.create_logger``:
``[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s``;
``log_dist`` (logging.py:96 in 0.15.1) adds ``[Rank 0] ``. File:line:function below are those of
DeepSpeed v0.15.1 (github.com/microsoft/DeepSpeed, commit 10ba3dde):

* every rank at start-up: ``accelerator/real_accelerator.py:203 get_accelerator`` "Setting
  ds_accelerator to cuda (auto detect)"; ``comm/comm.py:652 init_distributed`` "cdb=None";
  ``runtime/config.py:733 DeepSpeedConfig.__init__`` "Config mesh_device None world_size = W";
* rank 0 at start-up: ``deepspeed/__init__.py:132 initialize`` (log_dist) "DeepSpeed info:
  version=..., git-hash=..., git-branch=..."; ``comm/comm.py:683`` "Initializing TorchBackend in
  DeepSpeed with backend nccl"; ``runtime/engine.py`` ``__init__`` / ``_configure_optimizer`` /
  ``_configure_zero_optimizer`` / ``_configure_lr_scheduler`` (log_dist) "DeepSpeed Flops Profiler
  Enabled", "DeepSpeed Basic Optimizer = FusedAdam", "Creating torch.bfloat16 ZeRO stage 1
  optimizer", "DeepSpeed Final Optimizer = DeepSpeedZeroOptimizer", "DeepSpeed using configured
  LR scheduler = WarmupDecayLR", "DeepSpeed LR Scheduler = <...WarmupDecayLR object at 0x...>";
  ``runtime/zero/stage_1_and_2.py:148-151,543 __init__`` (bucket sizes, "optimizer state
  initialized"); ``engine.py:2380 _report_progress`` "step=0, skipped=0, lr=[0.0003, 0.0003], ..."
  (the engine reports step 0 when it is built, with the optimizer's configured lr since the
  scheduler has not stepped, and before any checkpoint is loaded: a resumed run prints it too);
* rank 0 every ``steps_per_print`` steps: ``engine.py:2380 _report_progress`` "step=N,
  skipped=0, lr=[...], mom=[(0.9, 0.95), (0.9, 0.95)]" (lr from ``runtime/lr_schedules.py``
  ``WarmupDecayLR``, log warm-up then linear decay, two parameter groups); then
  ``utils/timer.py:259 ThroughputTimer.stop`` "epoch=0/micro_step=M/global_step=M,
  RunningAvgSamplesPerSec=..., CurrSamplesPerSec=..., MemAllocated=...GB, MaxMemAllocated=...GB"
  where M counts the steps of this process only (it restarts at 1 after a resume, as the real
  timer does) and nothing is printed before the timer's third step (``start_step=2``);
* checkpoint save (``engine.py save_checkpoint``): rank 0 ``checkpoint_engine/
  torch_checkpoint_engine.py:18 create`` (log_dist) "[Torch] Checkpoint global_stepN is about to
  be saved!", ``engine.py:3384 _save_checkpoint`` (log_dist) "Saving model checkpoint:
  .../global_stepN/mp_rank_00_model_states.pt", ``torch_checkpoint_engine.py:21,23 save``
  "[Torch] Saving ...pt..." / "[Torch] Saved ...pt."; every rank the same two for its
  ``bf16_zero_pp_rank_<r>_mp_rank_00_optim_states.pt``, ``engine.py:3536 _save_zero_checkpoint``
  "zero checkpoint saved ..." and ``torch_checkpoint_engine.py:33 commit`` "[Torch] Checkpoint
  global_stepN is ready now!";
* checkpoint load (``engine.py load_checkpoint``), every rank: ``torch_checkpoint_engine.py:27,29
  load`` "[Torch] Loading checkpoint from .../global_stepN/mp_rank_00_model_states.pt..." /
  "[Torch] Loaded checkpoint from ....", the same for its own ZeRO shard, ``engine.py:3076
  _get_all_zero_checkpoint_state_dicts`` "successfully read W ZeRO state_dicts for rank r",
  ``engine.py:3026 _load_zero_checkpoint`` "loading W zero partition checkpoints for rank r". The
  step appears only through the tag in the paths, as with DeepSpeed. Without ``latest``:
  ``engine.py:2805 load_checkpoint`` WARNING "Unable to find latest file at ...".

Other noise:

* NCCL with ``NCCL_DEBUG=INFO`` (stdout), every rank at its first collective,
  ``host:pid:tid [cudaDev] NCCL INFO ...`` (Bootstrap, NET/Plugin, cudaDriverVersion, NET/Socket,
  comm ... Init START / Init COMPLETE) and rank 0's bare "NCCL version 2.20.5+cuda12.4", as in the
  logs quoted in NVIDIA/nccl issues #1267 and #1504;
* every rank, once, at its first backward (stderr): torch 2.4's ``torch/utils/checkpoint.py:295:
  FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated...`` with its source line, in
  the format of ``warnings.formatwarning`` (seen in many HF/DeepSpeed logs of that era);
* every rank at exit (stderr): torch 2.4's ``[rankN]:[W... ProcessGroupNCCL.cpp:1168] Warning:
  WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. ...``
  (hpcaitech/ColossalAI#6202, pytorch/pytorch#126275).

The collective timeout (stderr), PyTorch 2.4.1's ``ProcessGroupNCCL`` watchdog, exactly the
sequence of a real log (a torch 2.4.1 build, ``pytorch_1724789560443``, quoted in a Lightning
user's report found on GitHub; the same line numbers in hiyouga/LlamaFactory#6269 and
sgl-project/sglang#1693; later torch releases moved them, e.g. 616/1785 in XPixelGroup/BasicSR#737).
torch itself prefixes its C++ log lines with ``[rankN]:`` (its c10 logger, since 2.2), the
glog-like ``[E<month><day> HH:MM:SS.nanoseconds ProcessGroupNCCL.cpp:LINE]`` follows::

    [rank1]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective
    operation timeout: WorkNCCL(SeqNum=..., OpType=ALLREDUCE, NumelIn=..., NumelOut=...,
    Timeout(ms)=...) ran for ... milliseconds before timing out.
    ... :1664 [PG 1 Rank 1] Exception (either an error or timeout) detected by watchdog at work ...
    ... :1709 [PG 1 Rank 1] Timeout at NCCL work: ...
    ... :621 [Rank 1] Some NCCL operations have failed or timed out. ...
    ... :627 [Rank 1] To avoid data inconsistency, we are taking the entire process down.
    ... :1515 [PG 1 Rank 1] Process group watchdog thread terminated with exception: ...
    Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609
    frame #0 ... (C++ frames), "terminate called after throwing an instance of
    'c10::DistBackendError'", "  what():  ...", "Exception raised from ncclCommWatchdog at
    ...ProcessGroupNCCL.cpp:1521", frames; then SIGABRT.

The gradient all-reduce runs on DeepSpeed's data-parallel group (``new_group``: "PG 1"), the
broadcast and the checkpoint barriers on the default group ("PG 0 (default_pg)"); each group has
its own SeqNum.

The fault: the collate function stops producing ``labels`` and the loss function's
``batch["labels"]`` raises ``KeyError: 'labels'``; the exception leaves ``main`` uncaught, so
Python itself prints the traceback (``Traceback (most recent call last):`` ... ``KeyError:
'labels'``) on every rank's stderr and the process exits with status 1 (after torch's exit-time
warning above).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import resource
import shutil
import sys
import time
import warnings
import zlib
from pathlib import Path
from types import TracebackType

# ---------------------------------------------------------------------------- the emulated stack
SITE = "/usr/local/lib/python3.10/dist-packages"
DS_VERSION = "0.15.1"
NCCL_VERSION = "2.20.5+cuda12.4"
CUDA_DRIVER = 12040
POLL_S = 0.02
DIM = 8  # the "model": a parameter vector of DIM floats
MICRO_BATCH = 4
REDUCE_BUCKET = 500_000_000
ALLGATHER_BUCKET = 200_000_000
BROADCAST_NUMEL = 262_144_000
WARMUP_STEPS = 50
MAX_LR = 3e-4
BETAS = (0.9, 0.95)
KEEP_TAGS = 3
BUS_IDS = ("18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000")

# DeepSpeed v0.15.1 call sites: (path under deepspeed/, line, function)
LOG_DIST = ("utils/logging.py", 96, "log_dist")
ACCEL = ("accelerator/real_accelerator.py", 203, "get_accelerator")
COMM_CDB = ("comm/comm.py", 652, "init_distributed")
COMM_INIT = ("comm/comm.py", 683, "init_distributed")
CONFIG = ("runtime/config.py", 733, "__init__")
ZERO_INIT = "runtime/zero/stage_1_and_2.py"
TIMER = ("utils/timer.py", 259, "stop")
CKPT_ENGINE = "runtime/checkpoint_engine/torch_checkpoint_engine.py"
ENGINE = "runtime/engine.py"

# PyTorch 2.4.1 (pip wheel) native frames of the watchdog's exception
_TORCH_LIB = f"{SITE}/torch/lib"
_LIBSTDCXX = "/lib/x86_64-linux-gnu/libstdc++.so.6"
_CHECK_TIMEOUT_FRAMES = (
    f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 "
    f"(0x7f3b6d41df86 in {_TORCH_LIB}/libc10.so)",
    "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
    "duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 "
    f"(0x7f3b6e71a8d2 in {_TORCH_LIB}/libtorch_cuda.so)",
    "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 "
    f"(0x7f3b6e721313 in {_TORCH_LIB}/libtorch_cuda.so)",
    "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c "
    f"(0x7f3b6e7236fc in {_TORCH_LIB}/libtorch_cuda.so)",
    f"frame #4: <unknown function> + 0xdc253 (0x7f3bca9d5253 in {_LIBSTDCXX})",
    "frame #5: <unknown function> + 0x94ac3 (0x7f3c74f76ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
    "frame #6: <unknown function> + 0x126850 (0x7f3c75008850 in /lib/x86_64-linux-gnu/libc.so.6)",
)
_WATCHDOG_FRAMES = (
    f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 "
    f"(0x7f3b6d41df86 in {_TORCH_LIB}/libc10.so)",
    f"frame #1: <unknown function> + 0xe5aa84 (0x7f3b6e3aca84 in {_TORCH_LIB}/libtorch_cuda.so)",
    f"frame #2: <unknown function> + 0xdc253 (0x7f3bca9d5253 in {_LIBSTDCXX})",
    "frame #3: <unknown function> + 0x94ac3 (0x7f3c74f76ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
    "frame #4: <unknown function> + 0x126850 (0x7f3c75008850 in /lib/x86_64-linux-gnu/libc.so.6)",
)


# ---------------------------------------------------------------------------- small helpers
def put(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in one step (temporary file + rename)."""
    tmp = path.parent / f".{path.name}.{os.getpid()}"
    tmp.write_text(text)
    os.replace(tmp, path)


def first_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def emit(stream: str, text: str) -> None:
    """Print ``text`` (one or more lines) on ``stdout`` or ``stderr`` and flush."""
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


class DeepSpeedLogger:
    """DeepSpeed's ``logger`` (``deepspeed/utils/logging.py``): same format, same stream, with the
    records carrying DeepSpeed's file, line and function instead of this file's."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.logger = logging.getLogger("DeepSpeed")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        handler = logging.StreamHandler(stream=sys.stdout)
        handler.setFormatter(
            logging.Formatter(
                "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"
            )
        )
        self.logger.handlers[:] = [handler]

    def at(self, site: tuple[str, int, str], message: str, level: int = logging.INFO) -> None:
        where, line, func = site
        path = f"{SITE}/deepspeed/{where}"
        record = self.logger.makeRecord("DeepSpeed", level, path, line, message, None, None, func)
        self.logger.handle(record)

    def dist(self, message: str) -> None:
        """``log_dist(message, ranks=[0])``: rank 0 only, with its ``[Rank 0]`` prefix."""
        if self.rank == 0:
            self.at(LOG_DIST, f"[Rank {self.rank}] {message}")


def c10_prefix(rank: int, level: str, line: int) -> str:
    """torch's C++ log prefix: ``[rank1]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607]``."""
    now = time.time_ns()
    t = time.localtime(now // 1_000_000_000)
    stamp = f"{t.tm_mon}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    return f"[rank{rank}]:[{level}{stamp}.{now % 1_000_000_000:09d} ProcessGroupNCCL.cpp:{line}]"


class WatchdogTimeout:
    """What torch 2.4.1's NCCL watchdog prints when a collective outlives its timeout, then the
    process's death by SIGABRT (``std::terminate`` -> ``abort``)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def fire(self, *, pg: str, seq: int, op: str, numel: int, timeout_ms: int, ran_ms: int) -> None:
        r = self.rank
        work = (
            f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
            f"Timeout(ms)={timeout_ms})"
        )
        caught = (
            f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} "
        )
        caught += "milliseconds before timing out."
        works = f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}."
        terminated = f"[{pg} Rank {r}] Process group watchdog thread terminated with exception: "
        terminated += caught
        raised = (
            "Exception raised from checkTimeout at "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 (most recent call first):"
        )
        lines = [
            f"{c10_prefix(r, 'E', 607)} {caught}",
            f"{c10_prefix(r, 'E', 1664)} [{pg} Rank {r}] Exception (either an error or timeout) "
            f"detected by watchdog at work: {works}",
            f"{c10_prefix(r, 'E', 1709)} [{pg} Rank {r}] Timeout at NCCL work: {works}",
            f"{c10_prefix(r, 'E', 621)} [Rank {r}] Some NCCL operations have failed or timed out. "
            "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run "
            "on corrupted/incomplete data.",
            f"{c10_prefix(r, 'E', 627)} [Rank {r}] To avoid data inconsistency, we are taking the "
            "entire process down.",
            f"{c10_prefix(r, 'E', 1515)} {terminated}",
            raised,
            *_CHECK_TIMEOUT_FRAMES,
            "",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  {terminated}",
            raised,
            *_CHECK_TIMEOUT_FRAMES,
            "",
            "Exception raised from ncclCommWatchdog at "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 (most recent call first):",
            *_WATCHDOG_FRAMES,
            "",
        ]
        emit("stderr", "\n".join(lines))
        sys.stdout.flush()
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        os.abort()


# ---------------------------------------------------------------------------- the collective
class FileGroup:
    """Every rank of the attempt, joined by collectives through files (see the module docstring).

    ``all_reduce`` returns the element-wise sum of every rank's vector, in rank order."""

    def __init__(self, root: Path, rank: int, world: int, timeout_s: float) -> None:
        self.dir = root / "coll"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self.world = world
        self.timeout_s = timeout_s
        self.seq = 0  # collectives issued by this process (the files' sequence)
        self.pg_seq: dict[str, int] = {}  # torch's SeqNum, per process group
        self.watchdog = WatchdogTimeout(rank)

    def _slot(self, rank: int, seq: int) -> Path:
        return self.dir / f"r{rank}.{seq % 2}"

    def _read(self, rank: int, seq: int) -> list[float] | None:
        try:
            words = self._slot(rank, seq).read_text().split()
            if not words or int(words[0]) != seq:
                return None
            return [float(w) for w in words[1:]]
        except (OSError, ValueError):
            return None

    def all_reduce(
        self, values: list[float], *, op: str = "ALLREDUCE", pg: str = "PG 1", numel: int = 0
    ) -> list[float]:
        self.seq += 1
        seq = self.seq
        self.pg_seq[pg] = self.pg_seq.get(pg, 0) + 1
        put(self._slot(self.rank, seq), " ".join([str(seq), *map(repr, values)]) + "\n")
        started = time.monotonic()
        got: dict[int, list[float]] = {}
        while len(got) < self.world:
            for peer in range(self.world):
                if peer not in got and (found := self._read(peer, seq)) is not None:
                    got[peer] = found
            if len(got) == self.world:
                break
            waited = time.monotonic() - started
            if waited > self.timeout_s:
                self.watchdog.fire(
                    pg=pg,
                    seq=self.pg_seq[pg],
                    op=op,
                    numel=numel or len(values),
                    timeout_ms=int(self.timeout_s * 1000),
                    ran_ms=int(waited * 1000),
                )
            time.sleep(POLL_S)
        return [math.fsum(got[peer][i] for peer in range(self.world)) for i in range(len(values))]

    def barrier(self) -> None:
        self.all_reduce([0.0], op="BARRIER", pg="PG 0 (default_pg)", numel=1)

    def broadcast(self, values: list[float]) -> list[float]:
        """Rank 0's ``values`` on every rank (an all-reduce where the others contribute zeros)."""
        mine = values if self.rank == 0 else [0.0] * len(values)
        return self.all_reduce(mine, op="BROADCAST", pg="PG 0 (default_pg)", numel=BROADCAST_NUMEL)


# ---------------------------------------------------------------------------- the trainer
class Trainer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ.get("SLURM_PROCID", "0"))
        self.local_rank = int(os.environ.get("SLURM_LOCALID", "0"))
        self.world = int(os.environ.get("SLURM_NTASKS", "1"))
        self.node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
        self.attempt = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        self.root = Path(args.dir)
        self.ckpt = self.root / "checkpoint"
        self.faults = self.root / "faults"
        self.run = self.root / f"run{self.attempt}"
        for path in (self.ckpt, self.faults, self.run):
            path.mkdir(parents=True, exist_ok=True)
        self.log = DeepSpeedLogger(self.rank)
        self.group = FileGroup(self.run, self.rank, self.world, args.collective_timeout)
        self.batch_size = MICRO_BATCH * self.world  # train_batch_size: micro x GAS(1) x DP
        init = random.Random(1234)  # rank 0's initial weights are broadcast to the others
        self.params = [init.uniform(-1.0, 1.0) for _ in range(DIM)]
        self.target = [0.1 * (i + 1) for i in range(DIM)]
        self.warned = False
        # ThroughputTimer's state (deepspeed/utils/timer.py), per process
        self.tput_steps = 0
        self.tput_elapsed = 0.0

    # ------------------------------------------------------------------ files the harness reads
    def mark(self, step: int) -> None:
        put(self.run / f"rank{self.rank}", f"{step} {self.node} {os.getpid()}\n")

    def tag_dir(self, step: int) -> Path:
        return self.ckpt / f"global_step{step}"

    # ------------------------------------------------------------------ start-up
    def nccl_init(self) -> None:
        """What ``NCCL_DEBUG=INFO`` prints when torch creates the communicator (its first
        collective)."""
        pid, tid = os.getpid(), os.getpid() + 64 + self.local_rank
        host = self.node
        ip = f"10.0.0.{zlib.crc32(host.encode()) % 250 + 2}"
        head, later = (
            f"{host}:{pid}:{pid} [{self.local_rank}]",
            f"{host}:{pid}:{tid} [{self.local_rank}]",
        )
        comm = f"0x55{zlib.crc32(f'{pid}'.encode()):08x}a0"
        comm_id = f"0x{zlib.crc32(self.root.as_posix().encode()):08x}{self.attempt:08x}"
        bus = BUS_IDS[self.local_rank % len(BUS_IDS)]
        desc = (
            f"comm {comm} rank {self.rank} nranks {self.world} cudaDev {self.local_rank} "
            f"nvmlDev {self.local_rank} busId {bus} commId {comm_id}"
        )
        lines = [
            f"{head} NCCL INFO Bootstrap : Using eth0:{ip}<0>",
            f"{head} NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object "
            "file: No such file or directory No plugin found (libnccl-net.so), using internal "
            "implementation",
            f"{head} NCCL INFO cudaDriverVersion {CUDA_DRIVER}",
        ]
        if self.rank == 0:
            lines.append(f"NCCL version {NCCL_VERSION}")
        lines += [
            f"{later} NCCL INFO Failed to open libibverbs.so[.1]",
            f"{later} NCCL INFO NET/Socket : Using [0]eth0:{ip}<0>",
            f"{later} NCCL INFO Using non-device net plugin version 0",
            f"{later} NCCL INFO Using network Socket",
            f"{later} NCCL INFO {desc} - Init START",
            f"{later} NCCL INFO {desc} - Init COMPLETE",
        ]
        emit("stdout", "\n".join(lines))

    def start(self) -> None:
        """``import deepspeed`` ... ``deepspeed.initialize(...)``: init lines, the first
        collective (the engine's broadcast of the parameters), the engine's configuration."""
        self.log.at(ACCEL, "Setting ds_accelerator to cuda (auto detect)")
        self.log.dist(f"DeepSpeed info: version={DS_VERSION}, git-hash=unknown, git-branch=unknown")
        self.log.at(COMM_CDB, "cdb=None")
        if self.rank == 0:
            self.log.at(COMM_INIT, "Initializing TorchBackend in DeepSpeed with backend nccl")
        self.log.at(CONFIG, f"Config mesh_device None world_size = {self.world}")
        self.nccl_init()
        self.params = self.group.broadcast(self.params)
        self.log.dist("DeepSpeed Flops Profiler Enabled: False")
        self.log.dist("DeepSpeed Basic Optimizer = FusedAdam")
        self.log.dist("Creating torch.bfloat16 ZeRO stage 1 optimizer")
        if self.rank == 0:
            self.log.at((ZERO_INIT, 148, "__init__"), f"Reduce bucket size {REDUCE_BUCKET}")
            self.log.at((ZERO_INIT, 149, "__init__"), f"Allgather bucket size {ALLGATHER_BUCKET}")
            self.log.at((ZERO_INIT, 150, "__init__"), "CPU Offload: False")
            self.log.at((ZERO_INIT, 151, "__init__"), "Round robin gradient partitioning: False")
            self.log.at((ZERO_INIT, 543, "__init__"), "optimizer state initialized")
        self.log.dist("DeepSpeed Final Optimizer = DeepSpeedZeroOptimizer")
        self.log.dist("DeepSpeed using configured LR scheduler = WarmupDecayLR")
        address = 0x7F0000000000 + (zlib.crc32(f"{os.getpid()}".encode()) << 4)
        self.log.dist(
            f"DeepSpeed LR Scheduler = <deepspeed.runtime.lr_schedules.WarmupDecayLR object at "
            f"{address:#x}>"
        )
        # the scheduler has not stepped yet: the optimizer's configured lr
        self.log.dist(f"step=0, skipped=0, lr={[MAX_LR, MAX_LR]}, mom={[BETAS, BETAS]}")

    # ------------------------------------------------------------------ checkpoints
    def load(self) -> int:
        """``engine.load_checkpoint(ckpt)`` on an attempt > 0: the step to resume after."""
        if self.attempt == 0:
            return 0
        step = first_int(self.ckpt / "latest")
        if step is None:
            self.log.at(
                (ENGINE, 2805, "load_checkpoint"),
                f"Unable to find latest file at {self.ckpt / 'latest'}, if trying to load latest "
                "checkpoint please ensure this file exists or pass an explicit checkpoint tag "
                "when loading a checkpoint.",
                logging.WARNING,
            )
            return 0
        model = self.tag_dir(step) / "mp_rank_00_model_states.pt"
        self.log.at((CKPT_ENGINE, 27, "load"), f"[Torch] Loading checkpoint from {model}...")
        try:
            state = json.loads(model.read_text())
            self.params = [float(v) for v in state["module"]][:DIM] or self.params
        except (OSError, ValueError, KeyError, TypeError):
            pass  # the harness may have written ``latest`` by hand: keep the fresh parameters
        self.log.at((CKPT_ENGINE, 29, "load"), f"[Torch] Loaded checkpoint from {model}.")
        shard = self.tag_dir(step) / f"bf16_zero_pp_rank_{self.rank}_mp_rank_00_optim_states.pt"
        self.log.at((CKPT_ENGINE, 27, "load"), f"[Torch] Loading checkpoint from {shard}...")
        self.log.at((CKPT_ENGINE, 29, "load"), f"[Torch] Loaded checkpoint from {shard}.")
        self.log.at(
            (ENGINE, 3076, "_get_all_zero_checkpoint_state_dicts"),
            f"successfully read {self.world} ZeRO state_dicts for rank {self.rank}",
        )
        self.log.at(
            (ENGINE, 3026, "_load_zero_checkpoint"),
            f"loading {self.world} zero partition checkpoints for rank {self.rank}",
        )
        return step

    def save(self, step: int) -> None:
        """``engine.save_checkpoint(ckpt)``: every rank saves its ZeRO shard, rank 0 the model
        states and then ``latest``; a barrier before and after, as DeepSpeed does."""
        tag = f"global_step{step}"
        folder = self.tag_dir(step)
        if self.rank == 0:
            folder.mkdir(parents=True, exist_ok=True)
        self.group.barrier()
        folder.mkdir(parents=True, exist_ok=True)
        self.log.dist(f"[Torch] Checkpoint {tag} is about to be saved!")
        if self.rank == 0:
            model = folder / "mp_rank_00_model_states.pt"
            self.log.dist(f"Saving model checkpoint: {model}")
            self.write_state(model, {"module": self.params, "global_steps": step})
        shard = folder / f"bf16_zero_pp_rank_{self.rank}_mp_rank_00_optim_states.pt"
        self.write_state(shard, {"dp_rank": self.rank, "global_steps": step})
        self.log.at((ENGINE, 3536, "_save_zero_checkpoint"), f"zero checkpoint saved {shard}")
        self.log.at((CKPT_ENGINE, 33, "commit"), f"[Torch] Checkpoint {tag} is ready now!")
        if self.rank == 0:
            put(self.ckpt / "latest", f"{step}\n")
            self.prune(step)
        self.group.barrier()

    def write_state(self, path: Path, state: dict[str, object]) -> None:
        """``TorchCheckpointEngine.save``: its two lines around the write."""
        self.log.at((CKPT_ENGINE, 21, "save"), f"[Torch] Saving {path}...")
        state |= {"ds_version": DS_VERSION, "dp_world_size": self.world}
        put(path, json.dumps(state) + "\n")
        self.log.at((CKPT_ENGINE, 23, "save"), f"[Torch] Saved {path}.")

    def prune(self, step: int) -> None:
        """Keep the newest ``KEEP_TAGS`` checkpoints (the training script's retention, silent)."""
        tags = []
        for path in self.ckpt.glob("global_step*"):
            if path.name[len("global_step") :].isdigit():
                tags.append((int(path.name[len("global_step") :]), path))
        for number, path in sorted(tags)[:-KEEP_TAGS]:
            if number < step:
                shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------ one training step
    def raise_at(self) -> int | None:
        return first_int(self.faults / "raise_at")

    def collate(self, samples: list[dict[str, list[int]]]) -> dict[str, list[list[int]]]:
        """The data collator: stacks the samples' fields (the fault: ``labels`` go missing)."""
        keys = samples[0].keys()
        return {key: [sample[key] for sample in samples] for key in keys}

    def next_samples(self, step: int) -> list[dict[str, list[int]]]:
        rng = random.Random(step * 7919 + self.rank)
        bug = self.raise_at()
        samples = []
        for _ in range(MICRO_BATCH):
            ids = [rng.randrange(50_000) for _ in range(4)]
            sample = {"input_ids": ids, "attention_mask": [1] * len(ids)}
            if bug is None or step < bug:
                sample["labels"] = [*ids[1:], -100]
            samples.append(sample)
        return samples

    def compute_loss(self, batch: dict[str, list[list[int]]], step: int) -> list[float]:
        """Forward + backward: the local gradient of ``|params - target|^2`` plus the batch's
        noise."""
        labels = batch["labels"]
        rng = random.Random(sum(map(sum, labels)) + step)
        return [
            2.0 * (p - t) + rng.gauss(0.0, 0.05)
            for p, t in zip(self.params, self.target, strict=True)
        ]

    def backward_warning(self) -> None:
        if self.warned:
            return
        self.warned = True
        text = warnings.formatwarning(
            "`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
            "`torch.amp.autocast('cpu', args...)` instead.",
            FutureWarning,
            f"{SITE}/torch/utils/checkpoint.py",
            295,
            "with torch.enable_grad(), device_autocast_ctx, "
            "torch.cpu.amp.autocast(**ctx.cpu_autocast_kwargs):  # type: ignore[attr-defined]",
        )
        emit("stderr", text)

    def lr(self, step: int) -> float:
        """``WarmupDecayLR`` (log warm-up to MAX_LR, then linear decay) after ``step`` steps."""
        it = step - 1  # the scheduler's last_batch_iteration when the engine reports ``step``
        if it < WARMUP_STEPS:
            return MAX_LR * (math.log(it + 1) / math.log(WARMUP_STEPS))
        total = max(self.args.iters, WARMUP_STEPS + 1)
        return MAX_LR * max(0.0, (total - it) / max(1.0, total - WARMUP_STEPS))

    def report(self, step: int, elapsed: float) -> None:
        """``_report_progress`` then ``ThroughputTimer.stop``, rank 0, every steps_per_print."""
        self.tput_steps += 1
        if self.tput_steps > 2:  # the timer starts timing at its start_step (2)
            self.tput_elapsed += elapsed
        if self.rank != 0 or step % self.args.steps_per_print:
            return
        lr = self.lr(step)
        self.log.dist(f"step={step}, skipped=0, lr={[lr, lr]}, mom={[BETAS, BETAS]}")
        if self.tput_steps <= 2 or self.tput_steps % self.args.steps_per_print:
            return
        running = self.batch_size / (self.tput_elapsed / (self.tput_steps - 2))
        current = self.batch_size / (elapsed + 1e-6)
        allocated = round(17.2 + 0.01 * (self.tput_steps % 7), 2)
        self.log.at(
            TIMER,
            f"epoch=0/micro_step={self.tput_steps}/global_step={self.tput_steps}, "
            f"RunningAvgSamplesPerSec={running}, CurrSamplesPerSec={current}, "
            f"MemAllocated={allocated}GB, MaxMemAllocated=41.87GB",
        )

    def train(self) -> int:
        # the harness finds the ranks' pids from the start (a fault may come during start-up)
        self.mark((first_int(self.ckpt / "latest") or 0) if self.attempt else 0)
        self.start()
        step = self.load()
        self.mark(step)
        while step < self.args.iters:
            step += 1
            began = time.monotonic()
            batch = self.collate(self.next_samples(step))
            time.sleep(self.args.step_seconds)  # forward + backward on the GPU
            grad = self.compute_loss(batch, step)
            self.backward_warning()
            self.mark(step)
            total = self.group.all_reduce(grad, numel=REDUCE_BUCKET)
            self.params = [
                p - 0.1 * g / self.world for p, g in zip(self.params, total, strict=True)
            ]
            self.report(step, time.monotonic() - began)
            if step % self.args.checkpoint_every == 0:
                self.save(step)
            if self.rank == 0:
                put(self.run / "step", f"{step}\n")
        return 0


def pg_not_destroyed(rank: int) -> None:
    """torch 2.4's warning when the interpreter exits with the process group alive."""
    emit(
        "stderr",
        f"{c10_prefix(rank, 'W', 1168)} Warning: WARNING: process group has NOT been destroyed "
        "before we destruct ProcessGroupNCCL. On normal program exit, the application should "
        "call destroy_process_group to ensure that any pending NCCL operations have finished in "
        "this process. In rare cases this process can exit before this point and block the "
        "progress of another member of the process group. This constraint has always been "
        "present,  but this warning has only been added since PyTorch 2.4 (function operator())",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", required=True, help="the job's directory on shared storage")
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--step-seconds", type=float, default=0.25)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--collective-timeout", type=float, default=600.0)
    parser.add_argument("--steps-per-print", type=int, default=1)
    args = parser.parse_args(argv)
    trainer = Trainer(args)
    rank = trainer.rank

    def crashed(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        sys.__excepthook__(kind, exc, tb)  # Python's own traceback, on stderr
        sys.stderr.flush()
        pg_not_destroyed(rank)

    sys.excepthook = crashed
    code = trainer.train()
    pg_not_destroyed(rank)
    return code


if __name__ == "__main__":
    sys.exit(main())
