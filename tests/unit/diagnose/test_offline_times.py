"""Times of a post-mortem's lines that carry none (medic.diagnose._timed, through
diagnose_directory)."""

from __future__ import annotations

from pathlib import Path

from medic.diagnose import diagnose_directory
from medic.domain.diagnosis import FaultDomain


def test_a_file_without_stamps_is_placed_where_the_failure_began(tmp_path: Path) -> None:
    # job.out has no stamp at all; the nodes' logs start two hours before node002's machine
    # check. srun's node failure must not look two hours older than the kernel line that
    # explains it.
    (tmp_path / "job.out").write_text(
        "srun: error: Node failure on node002\n"
        "srun: error: node001: task 0: Exited with exit code 1\n"
    )
    (tmp_path / "node001.log").write_text(
        "[2026-11-19 21:05:00,311] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS\n"
        "[2026-11-19 23:41:04,000] node001:41:52 [0] NCCL WARN Net : Connection closed by"
        " remote peer node002<40922>\n"
    )
    (tmp_path / "node002.log").write_text(
        "Nov 19 21:05:00 node002 kernel: nvidia-peermem: module loaded\n"
        "Nov 19 23:41:02 node002 kernel: EDAC MC3: 1 UE memory read error on"
        " CPU_SrcID#1_MC#1_Chan#2_DIMM#0 (channel:2 slot:0 page:0xb757589)\n"
        "Nov 19 23:41:02 node002 kernel: Kernel panic - not syncing: Fatal machine check\n"
    )
    verdict = diagnose_directory(tmp_path).verdict
    assert (verdict.domain, verdict.implicated_nodes) == (FaultDomain.HARDWARE, {"node002"})
    assert verdict.root_signature == "edac.uncorrected"
