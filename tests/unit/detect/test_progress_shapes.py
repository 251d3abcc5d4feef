"""The built-in progress vocabulary: which signature reads each trainer's line, the exact fields
and rank it gives, behind every rank prefix; what must not be read as progress; and which
signature wins when a progress line also looks like something else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from medic.detect.matcher import SignatureDiagnoser
from medic.detect.progress import ProgressTracker
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import JobId
from medic.domain.logs import LogLine, LogStream

DIAGNOSER = SignatureDiagnoser()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def scan(*texts: str) -> list[Detection]:
    return DIAGNOSER.scan(
        [
            LogLine(LogStream.JOB, text, T0 + timedelta(seconds=n), None, JobId("1"), None, n)
            for n, text in enumerate(texts)
        ]
    )


def one(text: str) -> tuple[str, dict[str, str], int | None]:
    [detection] = scan(text)
    return detection.signature_id, detection.fields, detection.rank


SHAPES = [
    (
        "[2024-05-01 10:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=250, skipped=3,"
        " lr=[2.5e-05, 2.5e-05], mom=[(0.9, 0.95), (0.9, 0.95)]",
        "deepspeed.step",
        {"step": "250"},
    ),
    (
        "[2024-05-01 09:58:41,007] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0,"
        " lr=[0.0003], mom=[(0.9, 0.95)]",
        "deepspeed.step",
        {},
    ),
    (
        "[2024-05-01 10:05:00,001] [INFO] [engine.py:3384:_save_checkpoint] [Rank 0] Saving model"
        " checkpoint: /ckpt/global_step250/mp_rank_00_model_states.pt",
        "deepspeed.checkpoint_saved",
        {"step": "250", "checkpoint": "saved"},
    ),
    (
        "[2024-05-01 10:05:01,100] [INFO] [torch_checkpoint_engine.py:23:save] [Torch] Saved"
        " /ckpt/global_step250/bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt.",
        "deepspeed.checkpoint_saved",
        {"step": "250", "checkpoint": "saved"},
    ),
    (
        "[2024-05-01 11:00:00,500] [INFO] [torch_checkpoint_engine.py:29:load] [Torch] Loaded"
        " checkpoint from /ckpt/global_step250/mp_rank_00_model_states.pt.",
        "deepspeed.checkpoint_loaded",
        {"step": "250", "checkpoint": "loaded"},
    ),
    (
        "2023-03-02 04:10:11 | INFO | train_inner | epoch 003:    120 / 2737 loss=5.912,"
        " nll_loss=4.7, ppl=26.0, wps=12811, ups=4.8, wpb=2571, bsz=108, num_updates=5594,"
        " lr=0.0004, gnorm=1.2, clip=0%, train_wall=20, wall=1300",
        "fairseq.train_inner",
        {"step": "5594"},
    ),
    (
        "iter 17: loss 3.1416, time 210.00ms, mfu 12.00%",
        "nanogpt.iteration",
        {"step": "17", "iter_ms": "210.00"},
    ),
    (
        "step    7/100 | train loss 6.000001 | norm 2.0000 | lr 1.00e-04 | (99.50 ms |"
        " 12345 tok/s)",
        "llmc.step",
        {"step": "7", "iter_ms": "99.50", "tokens_per_s": "12345"},
    ),
    (
        "Saved checkpoint at iteration 40",
        "plain.checkpoint_saved",
        {"step": "40", "checkpoint": "saved"},
    ),
    (
        "saved checkpoint to /shared/ckpt/run9/ckpt-00040.pt at step 40",
        "plain.checkpoint_saved",
        {"step": "40", "checkpoint": "saved"},
    ),
    (
        "Loaded checkpoint from iteration 40",
        "plain.checkpoint_loaded",
        {"step": "40", "checkpoint": "loaded"},
    ),
    (
        "2026-01-01 00:00:00,000 INFO loaded checkpoint from /ckpt/x.pt at step 40",
        "plain.checkpoint_loaded",
        {"step": "40", "checkpoint": "loaded"},
    ),
    ("step 41 | loss 2.2500 | lr 3e-4", "plain.step", {"step": "41"}),
    ("iteration 42: loss=2.24", "plain.step", {"step": "42"}),
    ("INFO:__main__:Step 43/1000, loss: 2.23", "plain.step", {"step": "43"}),
]


@pytest.mark.parametrize(
    ("prefix", "rank"),
    [
        ("", None),
        ("[rank5]: ", 5),
        ("[rank5]:", 5),
        ("[rank5] ", 5),
        ("rank5: ", 5),
        ("[5]:", 5),
        ("[default1]:", None),
        ("5: ", 5),
        ("  5: ", 5),
        ("13: [rank5]: ", 5),
        ("13: [default1]: ", None),
        ("1: [default1]:[rank5]: ", 5),
    ],
)
@pytest.mark.parametrize(("line", "signature_id", "fields"), SHAPES)
def test_shape_behind_every_rank_prefix(
    prefix: str, rank: int | None, line: str, signature_id: str, fields: dict[str, str]
) -> None:
    assert one(prefix + line) == (signature_id, fields, rank)


@pytest.mark.parametrize(
    "line",
    [
        "Step 1: Downloading the dataset to /data",
        "Epoch 3, step 120: loss 0.5123",
        "Train Epoch: 1 [640/60000 (1%)]\tLoss: 0.512345",
        "Epoch: [0][  10/5005]\tTime  0.512 ( 1.234)\tLoss 6.9123e+00 (6.9301e+00)",
        "ep 55 train, step 1347, ce 0.355, 0.838 sec/step, complete 77.63%",
        "  5%|▌         | 50/1000 [00:12<03:50,  4.10it/s]",
        "100%|██████████| 13/13 [00:00<00:00, 40.10it/s]",
        "Could not find saved checkpoint at step 500",
        "Saving checkpoint at iteration 40 to /ckpt",
        "Resuming from checkpoint at step 40",
        "[2024-05-01 10:00:00,124] [INFO] [timer.py:260:stop] epoch=0/micro_step=100/"
        "global_step=100, RunningAvgSamplesPerSec=83.5, CurrSamplesPerSec=84.1",
        "[2024-05-01 10:05:00,000] [INFO] [torch_checkpoint_engine.py:21:save] [Torch] Saving"
        " /ckpt/global_step250/mp_rank_00_model_states.pt...",
        "optimizer step 100 took 3.2 ms",
        "steps 100 loss 2.3",
    ],
)
def test_not_a_step(line: str) -> None:
    assert [d for d in scan(line) if "step" in d.fields] == []


@pytest.mark.parametrize(
    ("line", "signature_id"),
    [
        # A NaN loss is the application's failure, not progress (python.nan_loss, priority 10).
        ("step 100 | loss = nan | lr 1e-4", "python.nan_loss"),
        ("[rank0]: iteration 7, loss = inf", "python.nan_loss"),
        # Slurm's step banner is Slurm's, whatever it says about steps.
        (
            "slurmstepd: error: *** STEP 1234.0 ON node001 CANCELLED AT 2026-01-01T00:00:00 ***",
            "slurm.step_cancelled",
        ),
    ],
)
def test_a_more_specific_signature_wins(line: str, signature_id: str) -> None:
    assert [d.signature_id for d in scan(line)] == [signature_id]


@pytest.mark.parametrize(
    "line",
    [
        "step 10 | loss 2.3 | data /mnt/ERROR_logs/RuntimeError.txt",
        "Saved checkpoint at step 10 to /mnt/oom_Killed_ECC_error/ckpt.pt",
        "[Rank 0] step=10, skipped=0, lr=[1e-4] NCCL error",
    ],
)
def test_an_error_word_does_not_steal_a_progress_line(line: str) -> None:
    [detection] = scan(line)
    assert detection.role is Role.PROGRESS and detection.fields["step"] == "10"


def test_a_resumed_deepspeed_run_starts_at_its_checkpoint() -> None:
    header = "[2024-05-01 11:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] "
    tracker = ProgressTracker(JobId("1"), 1)
    for detection in scan(
        header + "step=0, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
        "[2024-05-01 11:00:01,000] [INFO] [torch_checkpoint_engine.py:29:load] [Torch] Loaded"
        " checkpoint from /ckpt/global_step500/mp_rank_00_model_states.pt.",
        header + "step=510, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
        header + "Saving model checkpoint: /ckpt/global_step520/mp_rank_00_model_states.pt",
    ):
        tracker.observe(detection)
    progress = tracker.progress()
    assert (progress.first_step, progress.last_step) == (510, 510)
    assert (progress.loaded_checkpoint_step, progress.last_checkpoint_step) == (500, 520)
