"""Lightest fix: which repair (if any) answers one health alert, and alerts from detections.

:func:`mapped_action` decides, first source that speaks wins:

1. **Xid 154's printed recovery action** (``evidence["recovery_action"]``, as the kernel line or
   NVML prints it): the driver's own recommendation beats every static table (catalog §5).
   ``None`` -> nothing to do; ``Drain P2P`` / ``Drain and Reset`` / ``GPU Reset Required`` /
   ``PF FLR`` -> :attr:`~RepairAction.RESET_GPU` (wait-for-idle is the drain); ``Node Reboot
   Required`` / ``OS Reboot`` -> :attr:`~RepairAction.REBOOT`. Unknown text falls through.
2. **Scheduler alerts** (``slurm:*``): someone else's node state is observed, never overridden ->
   no action, except a host medic itself took down (``medic:`` reason) that stopped responding ->
   :attr:`~RepairAction.POWER_CYCLE`.
3. **Agent alerts** (``agent:*``): :data:`AGENT_ACTIONS` (decisions and reasons there).
4. **The signature's or attribution's node action** (``evidence["node_action"]``, vocabulary of
   ``docs/signatures.md``): how ``sig:<id>`` and detector alerts map; for an Xid it is the more
   specific reading of the line (a Nonfatal NVLink5 line is ``none``, Xid 48 with 63/64 is
   ``drain_reset``).
5. **The Xid's catalog action class** (:mod:`.xid_classes`): ``reset_gpu`` and ``drain_reset`` ->
   RESET_GPU; ``reboot`` (bare metal or VM) -> REBOOT; ``restart_app`` / ``none`` -> nothing (the
   node is fine); ``update_firmware`` and ``escalate`` -> nothing: no repair on the ladder changes
   a driver/firmware stack or reseats a cable, and reprovisioning would burn two rounds before the
   ladder climbs; these alerts stay listed (unmapped) for a person, and a critical one keeps the
   node out of job placement (:func:`medic.repair.rules.waiting.job_placement_exclusions`).

Anything else is unmapped: None (the caller counts and lists it, never drops it). REMOVE is never
a mapped action: removal is human-only.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from medic.domain.cluster import is_medic_reason
from medic.domain.diagnosis import Detection
from medic.domain.ids import ClusterName
from medic.domain.repairs import Alert, AlertSource, RepairAction
from medic.errors import InputError
from medic.repair.rules.xid_classes import XID_CLASSES

__all__ = [
    "AGENT_ACTIONS",
    "AGENT_DISK_PRESSURE",
    "AGENT_ECC_DBE",
    "AGENT_FS_FULL",
    "AGENT_FS_READONLY",
    "AGENT_GPU_MISSING",
    "AGENT_IB_PORT_DOWN",
    "AGENT_PCIE_REPLAY",
    "AGENT_ROW_REMAP_FAILURE",
    "AGENT_ROW_REMAP_PENDING",
    "AGENT_THERMAL",
    "NODE_ACTIONS",
    "SLURM_DOWN",
    "SLURM_DRAIN",
    "SLURM_NOT_RESPONDING",
    "alert_from_detection",
    "alert_xid",
    "effective_action",
    "mapped_action",
    "printed_action",
    "xid_action",
]

AGENT_ECC_DBE = "agent:ecc_dbe"
AGENT_ROW_REMAP_FAILURE = "agent:row_remap_failure"
AGENT_ROW_REMAP_PENDING = "agent:row_remap_pending"
AGENT_GPU_MISSING = "agent:gpu_missing"
AGENT_PCIE_REPLAY = "agent:pcie_replay"
AGENT_THERMAL = "agent:thermal"
AGENT_FS_READONLY = "agent:fs_readonly"
AGENT_FS_FULL = "agent:fs_full"
AGENT_DISK_PRESSURE = "agent:disk_pressure"
AGENT_IB_PORT_DOWN = "agent:ib_port_down"
SLURM_DOWN = "slurm:down"
SLURM_NOT_RESPONDING = "slurm:not_responding"
SLURM_DRAIN = "slurm:drain"

AGENT_ACTIONS: Mapping[str, RepairAction | None] = {
    # Uncorrectable ECC: Xid 48's workflow (catalog §6.2): reset solo; the ladder reboots when it
    # returns after two resets. DCGM VOLATILE_DBE_DETECTED is COMPONENT_RESET in NVSentinel too.
    AGENT_ECC_DBE: RepairAction.RESET_GPU,
    # No spare rows left: the memory fault is permanent, so neither a reset nor a reboot helps.
    # REPROVISION is the lightest rung that can move the node's work off that GPU (a fresh VM on a
    # healthy host); MIGRATE is gated on critical evidence and consumes capacity, so the ladder
    # reaches it if the fault returns. On bare metal a person should request REMOVE (RMA).
    AGENT_ROW_REMAP_FAILURE: RepairAction.REPROVISION,
    # A remap is waiting for the GPU to be reset before it takes effect (the row stays bad
    # until then): the reset is the fix itself.
    AGENT_ROW_REMAP_PENDING: RepairAction.RESET_GPU,
    # Fewer GPUs than expected, or one NVML reports lost (Xid 79's symptom from the host side):
    # a reboot brings a GPU that fell off the bus back; if it does not, the ladder climbs.
    AGENT_GPU_MISSING: RepairAction.REBOOT,
    # A reboot retrains the PCIe link; repeats climb the ladder.
    AGENT_PCIE_REPLAY: RepairAction.REBOOT,
    # Cooling, not the node's software state: a reboot does not fix it (listed for a person).
    AGENT_THERMAL: None,
    # A read-only remount needs fsck and a clean mount: reboot.
    AGENT_FS_READONLY: RepairAction.REBOOT,
    # Full disks and disk pressure are data problems: a reboot would not free a byte.
    AGENT_FS_FULL: None,
    AGENT_DISK_PRESSURE: None,
    # A reboot reinitialises the HCA and retrains the link; a bad cable climbs the ladder.
    AGENT_IB_PORT_DOWN: RepairAction.REBOOT,
}
"""Node-agent alert keys -> action; a key listed with None is deliberately not repaired."""

NODE_ACTIONS: Mapping[str, RepairAction | None] = {
    "none": None,
    "restart_app": None,
    "reset_gpu": RepairAction.RESET_GPU,
    "drain_reset": RepairAction.RESET_GPU,
    "reboot": RepairAction.REBOOT,
    "power_cycle": RepairAction.POWER_CYCLE,
    "reprovision": RepairAction.REPROVISION,
    "migrate": RepairAction.MIGRATE,
    "update_firmware": None,
    "escalate": None,
    "remove": None,
}
"""Node-action vocabulary (signature catalogue, attribution, detectors) -> repair. ``remove`` is
accepted but never mapped: removal is human-only."""

_CLASS_ACTIONS: Mapping[str, RepairAction | None] = {
    "none": None,
    "restart_app": None,
    "reset_gpu": RepairAction.RESET_GPU,
    "drain_reset": RepairAction.RESET_GPU,
    "reboot": RepairAction.REBOOT,
    "update_firmware": None,
    "escalate": None,
}


def printed_action(text: str) -> tuple[bool, RepairAction | None]:
    """Xid 154's printed recovery action (or NVML's ``GPU_RECOVERY_ACTION`` name) as
    (recognised, repair): ``("None")`` -> (True, None); unknown text -> (False, None)."""
    lowered = " ".join(text.replace("_", " ").lower().split())
    if lowered == "none":
        return True, None
    if "drain" in lowered or "reset" in lowered or "flr" in lowered:
        return True, RepairAction.RESET_GPU
    if "reboot" in lowered:
        return True, RepairAction.REBOOT
    return False, None


def xid_action(code: int) -> RepairAction | None:
    """The repair for an Xid code by its catalog action class (None: no node action)."""
    row = XID_CLASSES.get(code)
    return _CLASS_ACTIONS.get(row.action_class) if row is not None else None


def alert_xid(alert: Alert) -> int | None:
    """The alert's Xid: its ``xid`` field, else an ``xid:<code>`` key, else ``evidence["xid"]``."""
    if alert.xid is not None:
        return alert.xid
    family, _, rest = alert.key.partition(":")
    for value in (rest if family == "xid" else None, alert.evidence.get("xid")):
        if value is None:
            continue
        try:
            return int(value)
        except (TypeError, ValueError):
            continue
    return None


def _scheduler_action(alert: Alert) -> RepairAction | None:
    """Observed, never overridden: only a host medic took down and that stopped answering."""
    if alert.key not in (SLURM_DOWN, SLURM_NOT_RESPONDING):
        return None
    reason = alert.evidence.get("reason")
    unreachable = alert.key == SLURM_NOT_RESPONDING or alert.evidence.get("reachable") is False
    medic_owned = isinstance(reason, str) and is_medic_reason(reason)
    return RepairAction.POWER_CYCLE if medic_owned and unreachable else None


def mapped_action(alert: Alert) -> RepairAction | None:
    """The lightest repair that fixes the alert's fault, or None (see the module docstring)."""
    printed = alert.evidence.get("recovery_action")
    if isinstance(printed, str) and printed.strip():
        recognised, action = printed_action(printed)
        if recognised:
            return action
    family = alert.key.partition(":")[0]
    if family == "slurm" or alert.source is AlertSource.SCHEDULER:
        return _scheduler_action(alert)
    if alert.key in AGENT_ACTIONS:
        return AGENT_ACTIONS[alert.key]
    node_action = alert.evidence.get("node_action")
    if isinstance(node_action, str) and node_action in NODE_ACTIONS:
        return NODE_ACTIONS[node_action]
    code = alert_xid(alert)
    return xid_action(code) if code is not None else None


def effective_action(alert: Alert) -> RepairAction | None:
    """The alert's stored ``mapped_action`` when set, else :func:`mapped_action`; never REMOVE."""
    action = alert.mapped_action if alert.mapped_action is not None else mapped_action(alert)
    return None if action is RepairAction.REMOVE else action


def _detection_xid(detection: Detection) -> int | None:
    value = detection.fields.get("xid")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def alert_from_detection(
    detection: Detection, node_action: str | None, now: datetime, *, cluster: ClusterName
) -> Alert:
    """A catalogue detection on a node as a firing alert (``InputError`` without a node).

    Key ``xid:<code>`` for an Xid, else ``sig:<signature id>``; ``node_action`` is the
    signature's (or attribution's) node action, else the detection's ``node_action`` field. The
    mapped action is filled in with :func:`mapped_action`. ``first_seen`` is the line's time (never
    after ``now``), ``last_seen`` is ``now``.
    """
    if detection.node is None:
        raise InputError(str(detection.signature_id), "the detection names no node")
    code = _detection_xid(detection)
    action = node_action if node_action is not None else detection.fields.get("node_action")
    evidence: dict[str, Any] = {
        key: value for key, value in detection.fields.items() if key != "node_action"
    }
    evidence["signature"] = str(detection.signature_id)
    if detection.job_id is not None:
        evidence["job_id"] = str(detection.job_id)
        evidence["attempt"] = detection.attempt
    if detection.text:
        evidence["line"] = detection.text[:500]
    if action is not None:
        evidence["node_action"] = action
    printed = evidence.get("recovery_action")
    suffix = f"; recovery action: {printed}" if printed else ""
    if code is not None:
        row = XID_CLASSES.get(code)
        mnemonic = detection.fields.get("mnemonic") or (row.mnemonic if row else "UNKNOWN_XID")
        meaning = row.meaning if row else "Xid code not in the catalog"
        evidence.update(xid=code, mnemonic=mnemonic)
        key = f"xid:{code}"
        summary = f"Xid {code} {mnemonic}"
        where = f" on GPU {evidence['pci']}" if evidence.get("pci") else ""
        description = f"{meaning} (Xid {code}, {mnemonic}){where} on {detection.node}{suffix}"
    else:
        key = f"sig:{detection.signature_id}"
        summary = str(detection.signature_id)
        line = f": {detection.text[:200]}" if detection.text else ""
        description = f"{detection.signature_id} on {detection.node}{line}{suffix}"
    alert = Alert(
        cluster=cluster,
        node=detection.node,
        key=key,
        source=AlertSource.SIGNATURE,
        summary=summary,
        description=description,
        severity=detection.severity,
        evidence=evidence,
        xid=code,
        first_seen=min(detection.time, now),
        last_seen=now,
    )
    return replace(alert, mapped_action=mapped_action(alert))
