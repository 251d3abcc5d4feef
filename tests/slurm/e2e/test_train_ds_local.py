"""``train_ds.py`` without Slurm: 4 ranks (2 "nodes" x 2) started here as subprocesses with the
``SLURM_*`` variables srun would set, each rank's stdout and stderr in its own file.

Checks the contract the end-to-end harness relies on (rank/step/checkpoint files, resume from
``checkpoint/latest``, ``faults/raise_at``) and the blocking all-reduce: one frozen rank stops
every rank silently, the others die of the NCCL watchdog after ``--collective-timeout``. Uses no
Slurm fixture; a few seconds in all.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

TRAIN_DS = Path(__file__).resolve().with_name("train_ds.py")
WORLD = 4
PER_NODE = 2
FAST = ["--step-seconds", "0.05"]
STEP_LINE = re.compile(r"\[logging\.py:\d+:log_dist\] \[Rank 0\] step=(\d+), skipped=0, lr=\[")

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def wait(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout=timeout)


class Launcher:
    """Starts the ranks of one attempt as ``srun --ntasks=4 --ntasks-per-node=2`` would."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.started: list[Rank] = []

    def launch(self, job: Path, *args: str, restart: int | None = None) -> list[Rank]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SLURMD"))}
        ranks = []
        for r in range(WORLD):
            env = base | {
                "SLURM_PROCID": str(r),
                "SLURM_LOCALID": str(r % PER_NODE),
                "SLURM_NTASKS": str(WORLD),
                "SLURMD_NODENAME": f"node{r // PER_NODE + 1}",
            }
            if restart is not None:
                env["SLURM_RESTART_COUNT"] = str(restart)
            tag = f"{job.name}.{restart or 0}.{r}"
            out, err = self.tmp / f"{tag}.out", self.tmp / f"{tag}.err"
            argv = [sys.executable, str(TRAIN_DS), "--dir", str(job), *args]
            with out.open("wb") as o, err.open("wb") as e:
                proc = subprocess.Popen(argv, env=env, stdout=o, stderr=e)
            ranks.append(Rank(r, proc, out, err))
        self.started += ranks
        return ranks

    def cleanup(self) -> None:
        for rank in self.started:
            if rank.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    rank.proc.kill()
                rank.proc.wait(timeout=10)


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    started = Launcher(tmp_path)
    yield started
    started.cleanup()


def steps_printed(text: str) -> list[int]:
    return [int(m) for m in STEP_LINE.findall(text)]


def test_trains_saves_checkpoints_and_resumes_from_latest(
    launcher: Launcher, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    ckpt = job / "checkpoint"
    ranks = launcher.launch(job, "--iters", "6", "--checkpoint-every", "3", *FAST)
    assert [rank.wait() for rank in ranks] == [0] * WORLD

    first = ranks[0].stdout()
    assert steps_printed(first) == [0, 1, 2, 3, 4, 5, 6]  # step=0: the engine, when it is built
    assert (
        "[comm.py:683:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl"
        in first
    )
    assert "NCCL version 2.20.5+cuda12.4" in first
    model = ckpt / "global_step6" / "mp_rank_00_model_states.pt"
    assert (
        f"[Rank 0] Saving model checkpoint: {ckpt / 'global_step3'}/mp_rank_00_model_states.pt"
        in first
    )
    assert f"[Rank 0] Saving model checkpoint: {model}\n" in first
    assert "[Rank 0] [Torch] Checkpoint global_step6 is about to be saved!" in first
    assert "] [Torch] Checkpoint global_step6 is ready now!" in first
    assert "] epoch=0/micro_step=6/global_step=6, RunningAvgSamplesPerSec=" in first
    for rank in ranks:
        out = rank.stdout()
        node = f"node{rank.rank // PER_NODE + 1}"
        assert "Setting ds_accelerator to cuda (auto detect)" in out
        assert f"{node}:{rank.proc.pid}:{rank.proc.pid} [{rank.rank % PER_NODE}] NCCL INFO" in out
        shard = ckpt / "global_step3" / f"bf16_zero_pp_rank_{rank.rank}_mp_rank_00_optim_states.pt"
        assert f"zero checkpoint saved {shard}\n" in out
        assert not any(line.startswith("[rank") for line in out.splitlines())  # srun labels
        if rank.rank:
            assert "[Rank " not in out and not steps_printed(out)
        assert "FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated" in rank.stderr()
        step, where, pid = (job / "run0" / f"rank{rank.rank}").read_text().split()
        assert (int(step), where, int(pid)) == (6, node, rank.proc.pid)
    assert read_int(job / "run0" / "step") == 6
    assert read_int(ckpt / "latest") == 6
    assert model.is_file()

    # the requeued attempt: resumes after global_step6
    ranks = launcher.launch(job, "--iters", "9", "--checkpoint-every", "3", *FAST, restart=1)
    assert [rank.wait() for rank in ranks] == [0] * WORLD
    for rank in ranks:
        out = rank.stdout()
        assert f"] [Torch] Loading checkpoint from {model}...\n" in out
        assert f"] [Torch] Loaded checkpoint from {model}.\n" in out
        shard = ckpt / "global_step6" / f"bf16_zero_pp_rank_{rank.rank}_mp_rank_00_optim_states.pt"
        assert f"] [Torch] Loading checkpoint from {shard}...\n" in out
        assert (
            f"[engine.py:3026:_load_zero_checkpoint] loading {WORLD} zero partition checkpoints "
            f"for rank {rank.rank}\n"
        ) in out
    resumed = ranks[0].stdout()
    loaded = resumed.index("[Torch] Loaded checkpoint from")
    assert steps_printed(resumed[:loaded]) == [0]
    assert steps_printed(resumed[loaded:]) == [7, 8, 9]
    assert read_int(job / "run1" / "step") == 9
    assert read_int(ckpt / "latest") == 9


def test_raise_at_makes_every_rank_print_its_traceback_and_exit_1(
    launcher: Launcher, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    (job / "faults").mkdir(parents=True)
    (job / "faults" / "raise_at").write_text("3\n")
    ranks = launcher.launch(job, "--iters", "20", *FAST)
    assert [rank.wait() for rank in ranks] == [1] * WORLD
    for rank in ranks:
        err = rank.stderr().splitlines()
        start = err.index("Traceback (most recent call last):")
        end = err.index("KeyError: 'labels'")
        assert start < end
        assert any('labels = batch["labels"]' in line for line in err[start:end])
        assert "ProcessGroupNCCL.cpp" in err[end + 1]  # torch's exit-time warning follows
    assert steps_printed(ranks[0].stdout()) == [0, 1, 2]
    assert read_int(job / "run0" / "step") == 2


def _block_one_rank(
    launcher: Launcher, tmp_path: Path, sig: signal.Signals
) -> tuple[list[Rank], Path]:
    """Start a long run with a 1 s collective timeout; send ``sig`` to rank 3 at step 3; check
    that no rank gets past the collectives already under way and that the others print nothing
    more (to stdout: the watchdog writes to stderr, after the timeout)."""
    job = tmp_path / "job"
    ranks = launcher.launch(job, "--collective-timeout", "1", "--checkpoint-every", "1000", *FAST)
    step_file = job / "run0" / "step"
    wait_for("step 3", lambda: read_int(step_file) >= 3)
    os.kill(ranks[3].proc.pid, sig)
    at = read_int(step_file)
    time.sleep(0.3)
    settled = read_int(step_file)
    outputs = [rank.out.stat().st_size for rank in ranks[:3]]
    time.sleep(0.5)
    assert read_int(step_file) == settled <= at + 2  # a collective already posted may end
    assert [rank.out.stat().st_size for rank in ranks[:3]] == outputs
    return ranks, job


def _assert_watchdog(rank: Rank) -> None:
    assert rank.wait() == -signal.SIGABRT
    err = rank.stderr()
    first = re.search(
        rf"^\[rank{rank.rank}\]:\[E\d{{3,4}} [\d:.]+ ProcessGroupNCCL\.cpp:607\] \[Rank "
        rf"{rank.rank}\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+, "
        r"OpType=ALLREDUCE, NumelIn=\d+, NumelOut=\d+, Timeout\(ms\)=1000\) ran for \d+ "
        r"milliseconds before timing out\.$",
        err,
        re.MULTILINE,
    )
    assert first, err
    assert "terminate called after throwing an instance of 'c10::DistBackendError'" in err


def test_frozen_rank_stops_every_rank_until_the_collective_timeout(
    launcher: Launcher, tmp_path: Path
) -> None:
    ranks, _job = _block_one_rank(launcher, tmp_path, signal.SIGSTOP)
    for rank in ranks[:3]:
        _assert_watchdog(rank)
    assert ranks[3].proc.poll() is None  # still frozen: it never prints anything
    assert "Watchdog" not in ranks[3].stderr()


def test_killed_rank_leaves_the_others_blocked_until_the_collective_timeout(
    launcher: Launcher, tmp_path: Path
) -> None:
    ranks, _job = _block_one_rank(launcher, tmp_path, signal.SIGKILL)
    assert ranks[3].wait() == -signal.SIGKILL
    for rank in ranks[:3]:
        _assert_watchdog(rank)
