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


def test_a_ray_workers_line_is_read_behind_the_drivers_prefix(tmp_path: Path) -> None:
    # The driver's log: each worker's output behind "(Actor pid=N, ip=IP) ". The stamp and the
    # rank prefix the worker printed are read behind it, and the line is placed on the worker's
    # node (its NCCL bootstrap line names it).
    (tmp_path / "job.out").write_text(
        "2026-07-14 11:20:01,004\tINFO worker.py:1832 -- Connecting to existing Ray cluster\n"
        "(Actor pid=5512, ip=10.7.0.12) ray-n2:5512:5602 [0] NCCL INFO Bootstrap : Using"
        " ib0:10.7.0.12<0>\n"
        "(Actor pid=5512, ip=10.7.0.12) [rank10]:[E714 11:42:10.220113 5512"
        " ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 10] Process group"
        " watchdog thread terminated with exception: NCCL error: remote process exited\n"
        "(raylet, ip=10.7.0.12) A worker died or was killed while executing a task by an"
        " unexpected system error.\n"
    )
    (tmp_path / "ray-n1.log").write_text("Jul 14 11:19:30 ray-n1 kernel: nvidia-peermem: loaded\n")
    (tmp_path / "ray-n2.log").write_text("Jul 14 11:19:30 ray-n2 kernel: nvidia-peermem: loaded\n")
    diagnosis = diagnose_directory(tmp_path)
    watchdog = [e for e in diagnosis.evidence if "watchdog" in e.text]
    assert watchdog and watchdog[0].node == "ray-n2"
    assert watchdog[0].text.startswith("[rank10]:[E714 11:42:10")
    assert diagnosis.verdict.time.hour == 11 and diagnosis.verdict.time.minute == 42
