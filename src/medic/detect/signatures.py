"""What a log line means: the :class:`Signature` type the catalogue is made of.

The catalogue itself is data, ``catalogue/*.yaml`` (schema in docs/signatures.md), loaded and
validated by :func:`medic.detect.catalogue.default_catalogue`. Each signature says which layer a
line implicates (``domain``), how it relates to a failure (``role``: root cause, cascade symptom,
confirmation, progress marker or noise), whether it is direct evidence against the node that
printed it (``implicates_node``) and what it calls for (``action``). The matcher
(:mod:`medic.detect.matcher`) ranks matches by ``priority`` (highest first), then catalogue order,
so specific signatures win over generic ones (a CUDA ECC error over the NCCL watchdog line that
wraps it, everything over the generic Python exception).

Patterns are stdlib ``re`` regexes with named groups for the fields they extract, restricted to
what Hyperscan also compiles, applied to one physical line at a time after its rank prefix
(``[rankN]:``, srun's ``N:`` label, ...: :func:`medic.detect.patterns.strip_rank_prefix`) is
stripped. This module is types only: no I/O, no compilation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from medic.domain.diagnosis import FaultDomain, JobAction, Role, Severity
from medic.domain.ids import SignatureId

__all__ = [
    "HANG_SIGNATURE_ID",
    "SLOW_JOB_SIGNATURE_ID",
    "SLOW_NODE_SIGNATURE_ID",
    "Example",
    "NodeAction",
    "Signature",
]

# Derived findings (no log line behind them), emitted by medic.detect.progress. medic.attribute and
# medic.policy repeat these strings because the layers contract forbids them to import
# medic.detect; a test checks that the copies agree.
HANG_SIGNATURE_ID = SignatureId("medic.hang.no_progress")
SLOW_JOB_SIGNATURE_ID = SignatureId("medic.straggler.slow_job")
SLOW_NODE_SIGNATURE_ID = SignatureId("medic.straggler.slow_node")


class NodeAction(enum.StrEnum):
    """What a signature suggests for the node that printed it, for node repair."""

    NONE = "none"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    DRAIN_RESET = "drain_reset"
    REBOOT = "reboot"
    REPROVISION = "reprovision"
    POWER_CYCLE = "power_cycle"
    UPDATE_FIRMWARE = "update_firmware"
    ESCALATE = "escalate"


@dataclass(frozen=True, slots=True)
class Example:
    """A real-format line a signature must match, with exactly the fields it must extract."""

    line: str
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Signature:
    """One known log line shape and what it means."""

    id: SignatureId
    title: str
    domain: FaultDomain
    role: Role
    severity: Severity
    implicates_node: bool
    """True when the line is direct evidence against the node that printed it (its kernel's Xid,
    its GPU's ECC error, its NIC's link). Cascades never implicate."""
    action: JobAction
    pattern: str
    reference: str
    node_action: NodeAction | None = None
    """What node repair should do about the emitting node; None: not said."""
    xid: int | None = None
    """The NVIDIA Xid code the signature is about, if any."""
    priority: int = 0
    """When several signatures match one line the highest priority wins, then catalogue order."""
    constants: tuple[tuple[str, str], ...] = ()
    """Fields with fixed values, added to every detection's ``fields``."""
    fields: tuple[str, ...] = ()
    """The fields the pattern extracts (its named groups), in pattern order."""
    examples: tuple[Example, ...] = ()
    counter_examples: tuple[str, ...] = ()
    """Near-miss lines the pattern must not match."""
