"""Injected faults: what a simulator or a test harness did to a cluster, to measure medic against.

Fault records are ground truth for tests and benchmarks (fault time -> detection -> action); the
decision core never reads them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from medic.domain.ids import JobId, NodeName

__all__ = ["FaultKind", "FaultRecord"]


class FaultKind(enum.StrEnum):
    GPU_FELL_OFF_BUS = "xid79"
    """Kernel Xid 79 on the node; its ranks die with a CUDA error; peers hit NCCL timeouts."""
    ECC_DBE = "ecc_dbe"
    """Uncorrectable (double-bit) ECC error: Xid 48 and a CUDA ECC error on the node's ranks."""
    IB_LINK_DOWN = "ib_link_down"
    """The node's InfiniBand port goes down; NCCL reports IB completion errors."""
    NODE_FAIL = "node_fail"
    """The node stops responding to the scheduler (slurmd dead); the job fails with NODE_FAIL."""
    HANG = "hang"
    """A node's ranks stop making progress without printing anything."""
    STRAGGLER = "straggler"
    """One node runs 40% slower and drags the whole job."""
    APP_BUG = "app_bug"
    """The same Python traceback on every rank at the same step, again after every restart."""
    CUDA_OOM = "cuda_oom"
    """CUDA out of memory at the same step, again after every restart."""

    @property
    def is_node_fault(self) -> bool:
        """True when the fault lives in a node, so excluding that node is the right fix."""
        return self in (
            FaultKind.GPU_FELL_OFF_BUS,
            FaultKind.ECC_DBE,
            FaultKind.IB_LINK_DOWN,
            FaultKind.NODE_FAIL,
            FaultKind.STRAGGLER,
        )


@dataclass(frozen=True, slots=True)
class FaultRecord:
    id: int
    kind: FaultKind
    job_id: JobId
    node: NodeName | None
    time: datetime
    step: int | None = None
