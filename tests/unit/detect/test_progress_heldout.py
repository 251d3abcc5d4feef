"""Held-out progress lines: written down from their sources before the progress patterns were.

Each line is the shape a real trainer or launcher prints, taken from a public log or from the
format string in the framework's source, and asserts only what medic must read from it (the
progress fields the tracker uses, and the line's rank), never which signature id wins, so that
the patterns are judged on lines they were not tuned to. Sources:

1. DeepSpeed engine step line, github.com/deepspeedai/DeepSpeed/issues/1825 (log_dist output).
2. HF Trainer's tqdm bar with a DeepSpeed step line glued to it (tqdm writes no newline),
   github.com/huggingface/transformers/issues/14531; the bar itself gives no step.
3. DeepSpeed save, github.com/huggingface/transformers/pull/27820 (log of a Trainer + ZeRO run).
4. DeepSpeed load, github.com/EleutherAI/gpt-neox/pull/836 (torch_checkpoint_engine log).
5. fairseq save, github.com/facebookresearch/fairseq/issues/2493.
6. fairseq load: fairseq/trainer.py's ``"Loaded checkpoint {} (epoch {} @ {} updates)"`` with
   fairseq's default ``asctime | levelname | name |`` header.
7. fairseq simple-format training line, github.com/facebookresearch/fairseq/issues/940.
8. nanoGPT's iteration line: train.py's ``f"iter {iter_num}: loss {lossf:.4f}, time
   {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%"`` (github.com/karpathy/nanoGPT).
9. nanoGPT's evaluation line at the same counter: ``f"step {iter_num}: train loss ..., val loss
   ..."``.
10. llm.c's train_gpt2.py: ``f"step {step+1:4d}/{args.num_iterations} | train loss {lossf:.6f} |
    norm {norm:.4f} | lr {lr:.2e} | ({(t1-t0)*1000:.2f} ms | {tokens_per_second:.0f} tok/s)"``
    (github.com/karpathy/llm.c).
11. A plain ``print`` save, the shape of ``f"  Saved checkpoint at iteration {i} to {path}"``
    (several public training scripts found by code search for "Saved checkpoint at iteration").
12. A plain ``print`` resume, the shape of ``f"Loaded checkpoint from iteration {i}"`` (code
    search for "Loaded checkpoint from iteration").
13. torchrun ``--tee 3`` output (``[default<local rank>]:``), github.com/rwth-i6/i6_core/pull/658:
    RETURNN's ``step`` there counts within the epoch, so it is not progress; the prefix names a
    local rank, so no rank.
14. srun ``--label`` (slurm.schedmd.com/srun.html: the task number, then ``: ``) before PyTorch's
    ``[rankN]:`` prefix, on Megatron's save line.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from medic.detect.matcher import SignatureDiagnoser
from medic.domain.diagnosis import Role
from medic.domain.ids import JobId
from medic.domain.logs import LogLine, LogStream
from medic.schedulers.slurm.logs import parse_rank

DIAGNOSER = SignatureDiagnoser()
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# (line, the progress fields medic must read (None: not a progress line), the rank)
HELD_OUT: list[tuple[str, dict[str, str] | None, int | None]] = [
    (
        "[2022-03-11 02:06:58,985] [INFO] [logging.py:69:log_dist] [Rank 0] step=40, skipped=2,"
        " lr=[5e-05], mom=[[0.9, 0.999]]",
        {"step": "40"},
        None,
    ),
    (
        "  8%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588"
        "                                                      | 1999/24128 [1:52:09<20:27:23, "
        " 3.33s/it][2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0]"
        " step=2000, skipped=1995, lr=[0.001, 0.001], mom=[0.0, 0.0]",
        {"step": "2000"},
        None,
    ),
    (
        "[2023-12-12 06:20:12,266] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model"
        " checkpoint: /scratch/sanitycheck-20231211/tmp-checkpoint-10/global_step10/"
        "zero_pp_rank_0_mp_rank_00_model_states.pt",
        {"step": "10", "checkpoint": "saved"},
        None,
    ),
    (
        "[2023-04-13 17:50:00,378] [INFO] [torch_checkpoint_engine.py:25:load] [Torch] Loaded"
        " checkpoint from /mnt/329710/resources/gpt_neox_2.0_ckpt/"
        "checkpoints-neox2.0-1.3b-4096-32GPUs/global_step25000/"
        "zero_pp_rank_5_mp_rank_00_optim_states.pt.",
        {"step": "25000", "checkpoint": "loaded"},
        None,
    ),
    (
        "2021-01-05 23:31:24 | INFO | fairseq.checkpoint_utils | Saved checkpoint"
        " checkpoints/checkpoint70.pt (epoch 70 @ 2162 updates, score 100.0) (writing took"
        " 61.31149206700138 seconds)",
        {"step": "2162", "checkpoint": "saved"},
        None,
    ),
    (
        "2021-01-06 08:12:40 | INFO | fairseq.trainer | Loaded checkpoint"
        " checkpoints/checkpoint_last.pt (epoch 71 @ 2193 updates)",
        {"step": "2193", "checkpoint": "loaded"},
        None,
    ),
    (
        "| epoch 001:    450 / 1891 loss=11.521, nll_loss=10.881, ppl=1886.05, wps=52922,"
        " ups=0.5, wpb=104928, bsz=5325, num_updates=445, lr=8.90889e-05, gnorm=1.543, clip=0%,"
        " oom=0, loss_scale=2.000, wall=882, train_wall=756",
        {"step": "445"},
        None,
    ),
    (
        "iter 1200: loss 1.2345, time 153.27ms, mfu 30.45%",
        {"step": "1200", "iter_ms": "153.27"},
        None,
    ),
    ("step 2000: train loss 1.7612, val loss 1.9071", {"step": "2000"}, None),
    (
        "step   42/5000 | train loss 5.123456 | norm 1.2345 | lr 6.00e-04 | (105.32 ms |"
        " 4978032 tok/s)",
        {"step": "42", "iter_ms": "105.32", "tokens_per_s": "4978032"},
        None,
    ),
    (
        "  Saved checkpoint at iteration 5000 to /models/ckpt_5000.pt",
        {"step": "5000", "checkpoint": "saved"},
        None,
    ),
    ("Loaded checkpoint from iteration 300", {"step": "300", "checkpoint": "loaded"}, None),
    (
        "[default3]:ep 55 train, step 1347, ce 0.355, ctc_4 1.038, ctc_10 0.790, ctc_16 0.729,"
        " grad_norm:p2 3.388, num_seqs 26, mem_usage:cuda:3 66.8GB, 0.838 sec/step, elapsed"
        " 0:16:59, exp. remaining 0:04:53, complete 77.63%",
        None,
        None,
    ),
    (
        "12: [rank12]:  successfully saved checkpoint from iteration    2000 to /ckpt/gpt"
        " [ t 1/1, p 1/1 ]",
        {"step": "2000", "checkpoint": "saved"},
        12,
    ),
]


def _progress(line: str) -> tuple[dict[str, str] | None, int | None]:
    found = DIAGNOSER.scan([LogLine(LogStream.JOB, line, T0, None, JobId("1"), None, 1)])
    progress = [d for d in found if d.role is Role.PROGRESS]
    if not progress:
        return None, None
    (detection,) = progress
    used = {k: v for k, v in detection.fields.items() if k in _USED}
    return used, detection.rank


_USED = {"step", "iter_ms", "tokens_per_s", "compute_ms", "checkpoint"}


@pytest.mark.parametrize(("line", "fields", "rank"), HELD_OUT)
def test_held_out_line(line: str, fields: dict[str, str] | None, rank: int | None) -> None:
    used, found_rank = _progress(line)
    assert used == fields, line
    if fields is not None:
        assert found_rank == rank
    assert parse_rank(line) == rank


def test_no_held_out_line_is_a_failure() -> None:
    lines = [LogLine(LogStream.JOB, text, T0, None, JobId("1"), None, n) for n, (text, *_) in
             enumerate(HELD_OUT)]  # fmt: skip
    assert [d.text for d in DIAGNOSER.scan(lines) if d.role is not Role.PROGRESS] == []
