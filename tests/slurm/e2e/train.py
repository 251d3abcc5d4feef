"""A stand-in distributed training program for the end-to-end tests on real Slurm.

Plain Python (standard library only), one process per rank, launched as
``srun python3 train.py --dir SHARED/JOB`` inside an ``sbatch --requeue --open-mode=append`` job.
It behaves, as far as medic can tell from its logs and its scheduler state, like Megatron-LM:

* every rank "computes" (sleeps ``--step-seconds``), then joins a barrier through files in the
  job's directory: it writes its step to ``run<restart>/rank<r>`` (with its node and pid), rank 0
  waits until every rank has reached the step, prints the Megatron iteration line and publishes
  the step in ``run<restart>/step``; the other ranks wait for that before the next step. So one
  frozen rank stops the whole job, as a collective would, and nothing is printed about it;
* every ``--checkpoint-every`` iterations rank 0 saves a checkpoint (a small file holding the step,
  written to a temporary file and renamed) and prints Megatron's "successfully saved" line;
* when ``SLURM_RESTART_COUNT`` > 0 (Slurm leaves it unset on the first run) every rank resumes from
  the last checkpoint, and rank 0 prints Megatron's "successfully loaded" line;
* a barrier that waits longer than ``--collective-timeout`` seconds ends the rank with the NCCL
  watchdog's message (the 600 s default of PyTorch);
* fault hook: the file ``faults/raise_at`` holds a step; every rank raises ``KeyError('labels')``
  at the first step at or past it, and prints its traceback with the ``[rankN]:`` prefix (as
  torchrun's log prefixing does), then exits 1. The file stays, so every attempt fails the same
  way: a deterministic application bug.

Every line a rank prints starts with ``[rank{r}]:``. Layout of ``--dir``: ``checkpoint/latest``,
``faults/``, ``run<restart>/`` (per attempt, so a previous attempt's files never satisfy a
barrier).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from datetime import datetime
from pathlib import Path

POLL_S = 0.02
GLOBAL_BATCH = 128
SEQ_LEN = 4096


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Rank:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ.get("SLURM_PROCID", "0"))
        self.local_rank = int(os.environ.get("SLURM_LOCALID", "0"))
        self.world = int(os.environ.get("SLURM_NTASKS", "1"))
        self.node = os.environ.get("SLURMD_NODENAME", os.uname().nodename)
        self.restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        self.root = Path(args.dir)
        self.ckpt = self.root / "checkpoint"
        self.faults = self.root / "faults"
        self.run = self.root / f"run{self.restart}"
        for path in (self.ckpt, self.faults, self.run):
            path.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(self.rank)

    def say(self, text: str, *, err: bool = False) -> None:
        print(f"[rank{self.rank}]: {text}", file=sys.stderr if err else sys.stdout, flush=True)

    # ------------------------------------------------------------------ checkpoints
    def load(self) -> int:
        """The step to resume after (0: start from scratch)."""
        if self.restart == 0:
            return 0
        step = read_int(self.ckpt / "latest")
        if step is None:
            if self.rank == 0:
                self.say(" WARNING: could not find a checkpoint; starting from random")
            return 0
        if self.rank == 0:
            self.say(f" loading checkpoint from {self.ckpt} at iteration {step}")
            self.say(
                f" successfully loaded checkpoint from {self.ckpt} [ t 1/1, p 1/1 ] "
                f"at iteration {step}"
            )
        return step

    def save(self, step: int) -> None:
        self.say(f" saving checkpoint at iteration {step:>8} to {self.ckpt}")
        atomic_write(self.ckpt / "latest", f"{step}\n")
        self.say(
            f" successfully saved checkpoint from iteration {step:>8} to {self.ckpt} "
            "[ t 1/1, p 1/1 ]"
        )

    # ------------------------------------------------------------------ the collective
    def barrier(self, step: int) -> None:
        atomic_write(self.run / f"rank{self.rank}", f"{step} {self.node} {os.getpid()}\n")
        deadline = time.monotonic() + self.args.collective_timeout
        if self.rank == 0:
            ranks = [self.run / f"rank{r}" for r in range(self.world)]
            while not all((read_int(p) or -1) >= step for p in ranks):
                self.check_timeout(deadline, step)
                time.sleep(POLL_S)
            return
        while (read_int(self.run / "step") or -1) < step:
            self.check_timeout(deadline, step)
            time.sleep(POLL_S)

    def check_timeout(self, deadline: float, step: int) -> None:
        if time.monotonic() < deadline:
            return
        now = datetime.now()
        ms = int(self.args.collective_timeout * 1000)
        self.say(
            f"[E{now:%m%d %H:%M:%S}.{now.microsecond:06d} ProcessGroupNCCL.cpp:607] "
            f"[Rank {self.rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={step}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            f"Timeout(ms)={ms}) ran for {ms + 60} milliseconds before timing out.",
            err=True,
        )
        raise SystemExit(134)

    # ------------------------------------------------------------------ training
    def raise_at(self) -> int | None:
        return read_int(self.faults / "raise_at")

    def iteration_line(self, step: int, ms: float) -> str:
        loss = 2.0 + 9.0 * 2.718281828 ** (-step / 400.0) + 0.02 * self.rng.uniform(-1, 1)
        tokens = GLOBAL_BATCH * SEQ_LEN / max(ms / 1000.0, 1e-3)
        return (
            f" [{datetime.now():%Y-%m-%d %H:%M:%S}] iteration {step:>8}/{self.args.iters:>8} | "
            f"consumed samples: {step * GLOBAL_BATCH:>12} | "
            f"elapsed time per iteration (ms): {ms:.1f} | "
            f"throughput per GPU (TFLOP/s/GPU): {400.0 * 300.0 / max(ms, 1.0):.1f} | "
            f"tokens per second: {tokens:.1f} | "
            f"learning rate: {3.0e-4:.6E} | "
            f"global batch size: {GLOBAL_BATCH:>5} | lm loss: {loss:.6E} | loss scale: 1.0 | "
            f"grad norm: {1.0 + 0.1 * self.rng.random():.3f} | "
            "number of skipped iterations: 0 | number of nan iterations: 0 |"
        )

    def compute_loss(self, batch: dict[str, int], step: int) -> None:
        bug = self.raise_at()
        if bug is not None and step >= bug:
            batch.pop("labels")
        _ = batch["labels"]

    def train(self) -> int:
        if self.local_rank == 0:  # every node's first rank, as Megatron's launcher logs it
            self.say(f"> initializing torch distributed with {self.world} workers")
        step = self.load()
        last = time.monotonic()
        while step < self.args.iters:
            step += 1
            time.sleep(self.args.step_seconds)
            self.compute_loss({"labels": step}, step)
            self.barrier(step)
            if self.rank == 0:
                now = time.monotonic()
                self.say(self.iteration_line(step, (now - last) * 1000.0))
                last = now
                if step % self.args.checkpoint_every == 0:
                    self.save(step)
                atomic_write(self.run / "step", f"{step}\n")
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the job's directory on shared storage")
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--step-seconds", type=float, default=0.25)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--collective-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    rank = Rank(args)
    try:
        return rank.train()
    except SystemExit:
        raise
    except BaseException:  # a crash: print it the way torchrun's prefixed logs show it
        for line in traceback.format_exc().splitlines():
            rank.say(line, err=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
