"""``medic agent``: the per-node health agent, a process of its own on every GPU node.

It runs passive checks (:mod:`medic.agent.nvml` reads the GPUs through NVML and decides as
:mod:`medic.agent.gpu` describes; :mod:`medic.agent.host` checks filesystems and InfiniBand),
follows the kernel log (:mod:`medic.agent.kernel`, classified with the signature catalogue) and
posts what changed to the control plane's ``POST /api/v1/alerts`` (:mod:`medic.agent.sender`),
spooling while the control plane is unreachable. :class:`Agent` (:mod:`medic.agent.runner`) ties
them together; :mod:`medic.agent.main` builds it from options (``medic agent`` and
``python -m medic.agent``).

The agent only reports. Mapping an alert to a repair, and doing it, is the control plane's job.
"""

from medic.agent.checks import Check, CheckResult, CheckStatus, run_check
from medic.agent.gpu import GPU_KEYS, GpuThresholds
from medic.agent.host import FilesystemCheck, InfinibandCheck
from medic.agent.kernel import (
    FileFollower,
    JournalFollower,
    KernelClassifier,
    KmsgFollower,
    make_follower,
)
from medic.agent.nvml import GpuChecks
from medic.agent.runner import Agent
from medic.agent.sender import AlertSender, Delivery, default_detector

__all__ = [
    "GPU_KEYS",
    "Agent",
    "AlertSender",
    "Check",
    "CheckResult",
    "CheckStatus",
    "Delivery",
    "FileFollower",
    "FilesystemCheck",
    "GpuChecks",
    "GpuThresholds",
    "InfinibandCheck",
    "JournalFollower",
    "KernelClassifier",
    "KmsgFollower",
    "default_detector",
    "make_follower",
    "run_check",
]
