"""Lightest fix: every mapping source, its precedence, and alerts built from detections."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.domain.repairs import Alert, AlertSource, RepairAction
from medic.errors import InputError
from medic.repair.rules.lightest import (
    AGENT_ACTIONS,
    NODE_ACTIONS,
    alert_from_detection,
    alert_xid,
    effective_action,
    mapped_action,
    printed_action,
    xid_action,
)
from medic.repair.rules.xid_classes import XID_CLASSES

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTER = ClusterName("c1")
NODE = NodeName("n1")
R, B, P, M = (
    RepairAction.RESET_GPU,
    RepairAction.REBOOT,
    RepairAction.REPROVISION,
    RepairAction.MIGRATE,
)


def _alert(
    key: str,
    *,
    evidence: dict[str, Any] | None = None,
    source: AlertSource = AlertSource.SIGNATURE,
    xid: int | None = None,
) -> Alert:
    return Alert(
        cluster=CLUSTER,
        node=NODE,
        key=key,
        source=source,
        summary=key,
        description=key,
        severity=Severity.CRITICAL,
        evidence=evidence or {},
        xid=xid,
        first_seen=T0,
    )


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (79, B),  # RESTART_BM
        (151, B),  # RESTART_VM
        (167, B),  # no bucket: catalog suggests reboot
        (48, R),  # WORKFLOW_XID_48 solo
        (64, R),
        (74, R),  # NVLink workflow: reset clears it
        (95, R),
        (119, R),
        (145, R),  # NVLink5 workflow, mostly reset
        (171, R),  # supplements Xid 48
        (147, None),  # NVLink5 decode: ignore
        (13, None),  # restart app: the node is fine
        (31, None),
        (43, None),
        (45, None),  # collateral
        (63, None),  # remap event: ignore
        (78, None),  # update firmware: not a node repair
        (54, None),  # check mechanicals: a person
        (142, None),  # contact support
        (164, None),
        (154, None),  # its printed action decides
        (9999, None),  # unknown code
    ],
)
def test_xid_codes_map_by_action_class(code: int, expected: RepairAction | None) -> None:
    assert xid_action(code) is expected
    assert mapped_action(_alert(f"xid:{code}", xid=code)) is expected


def test_every_table_row_has_a_known_class() -> None:
    classes = {row.action_class for row in XID_CLASSES.values()}
    assert classes <= {
        "none",
        "restart_app",
        "reset_gpu",
        "drain_reset",
        "reboot",
        "update_firmware",
        "escalate",
    }
    assert all(code == row.code for code, row in XID_CLASSES.items())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GPU Reset Required", R),
        ("Node Reboot Required", B),
        ("OS Reboot", B),
        ("Drain P2P", R),
        ("Drain and Reset", R),
        ("PF FLR", R),
        ("GPU_RESET", R),  # NVML's GPU_RECOVERY_ACTION names
        ("NODE_REBOOT", B),
        ("DRAIN_AND_RESET", R),
        ("None", None),
        ("NONE", None),
    ],
)
def test_xid_154_printed_action(text: str, expected: RepairAction | None) -> None:
    assert printed_action(text) == (True, expected)
    assert mapped_action(_alert("xid:154", evidence={"recovery_action": text})) is expected


def test_printed_action_beats_the_static_table() -> None:
    alert = _alert("xid:48", evidence={"recovery_action": "Node Reboot Required"})
    assert mapped_action(alert) is B
    cleared = _alert("xid:79", evidence={"recovery_action": "None"})
    assert mapped_action(cleared) is None


def test_unknown_printed_text_falls_through() -> None:
    assert printed_action("Frobnicate") == (False, None)
    assert mapped_action(_alert("xid:79", evidence={"recovery_action": "Frobnicate"})) is B


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("agent:ecc_dbe", R),
        ("agent:row_remap_failure", P),
        ("agent:row_remap_pending", R),  # the reset applies the remap
        ("agent:gpu_missing", B),
        ("agent:pcie_replay", B),
        ("agent:thermal", None),
        ("agent:fs_readonly", B),
        ("agent:fs_full", None),
        ("agent:disk_pressure", None),
        ("agent:ib_port_down", B),
        ("agent:something_new", None),
    ],
)
def test_agent_keys(key: str, expected: RepairAction | None) -> None:
    assert mapped_action(_alert(key, source=AlertSource.AGENT)) is expected


def test_agent_table_is_authoritative_over_evidence() -> None:
    alert = _alert("agent:thermal", source=AlertSource.AGENT, evidence={"node_action": "reboot"})
    assert mapped_action(alert) is None
    assert "agent:thermal" in AGENT_ACTIONS


@pytest.mark.parametrize(
    ("key", "evidence", "expected"),
    [
        ("slurm:down", {"reason": "admin: bad dimm"}, None),  # someone else's: observed
        ("slurm:down", {}, None),
        ("slurm:not_responding", {"reason": "Not responding"}, None),
        ("slurm:not_responding", {"reason": "medic:repair 7"}, RepairAction.POWER_CYCLE),
        ("slurm:down", {"reason": "medic:repair 7"}, None),  # reachable: no power-cycle
        ("slurm:down", {"reason": "medic:repair 7", "reachable": False}, RepairAction.POWER_CYCLE),
        ("slurm:drain", {"reason": "medic:repair 7", "reachable": False}, None),
    ],
)
def test_scheduler_alerts_are_observed_unless_medic_owned(
    key: str, evidence: dict[str, Any], expected: RepairAction | None
) -> None:
    alert = _alert(key, source=AlertSource.SCHEDULER, evidence=evidence)
    assert mapped_action(alert) is expected


@pytest.mark.parametrize(
    ("node_action", "expected"),
    [
        ("reset_gpu", R),
        ("drain_reset", R),
        ("reboot", B),
        ("power_cycle", RepairAction.POWER_CYCLE),
        ("reprovision", P),
        ("migrate", M),
        ("restart_app", None),
        ("none", None),
        ("update_firmware", None),
        ("escalate", None),
        ("remove", None),  # human-only, never mapped
        ("frobnicate", None),
        (None, None),
    ],
)
def test_signature_alerts_use_the_node_action(
    node_action: str | None, expected: RepairAction | None
) -> None:
    evidence = {} if node_action is None else {"node_action": node_action}
    assert mapped_action(_alert("sig:gpu.fallen_off_bus", evidence=evidence)) is expected
    assert mapped_action(_alert("detector:dcgm:diag", evidence=evidence)) is expected


def test_node_action_vocabulary_never_maps_to_remove() -> None:
    assert RepairAction.REMOVE not in set(NODE_ACTIONS.values())
    assert RepairAction.REMOVE not in set(AGENT_ACTIONS.values())


def test_a_more_specific_node_action_beats_the_xid_table() -> None:
    nonfatal = _alert("xid:144", xid=144, evidence={"node_action": "none"})
    assert mapped_action(nonfatal) is None
    row_remap = _alert("xid:48", xid=48, evidence={"node_action": "drain_reset"})
    assert mapped_action(row_remap) is R


def test_alert_xid_sources() -> None:
    assert alert_xid(_alert("xid:79")) == 79
    assert alert_xid(_alert("sig:x", xid=48)) == 48
    assert alert_xid(_alert("sig:gpu.dcgm_xid", evidence={"xid": "31"})) == 31
    assert alert_xid(_alert("xid:abc")) is None
    assert alert_xid(_alert("agent:ecc_dbe")) is None


def test_effective_action_prefers_the_stored_mapping_and_never_removes() -> None:
    stored = replace(_alert("agent:thermal"), mapped_action=B)
    assert effective_action(stored) is B
    removal = replace(_alert("xid:79"), mapped_action=RepairAction.REMOVE)
    assert effective_action(removal) is None
    assert effective_action(_alert("xid:79")) is B


def _detection(**kw: Any) -> Detection:
    base: dict[str, Any] = {
        "job_id": JobId("42"),
        "attempt": 1,
        "signature_id": SignatureId("xid.fallen_off_bus"),
        "domain": FaultDomain.HARDWARE,
        "role": Role.ROOT,
        "severity": Severity.CRITICAL,
        "action": JobAction.RESTART,
        "time": T0,
        "node": NODE,
        "implicates_node": True,
        "text": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "fields": {"xid": "79", "pci": "0000:3b:00", "pid": "1234"},
    }
    base.update(kw)
    return Detection(**base)


def test_alert_from_an_xid_detection() -> None:
    now = T0 + timedelta(minutes=5)
    alert = alert_from_detection(_detection(), "reboot", now, cluster=CLUSTER)

    assert alert.key == "xid:79"
    assert alert.xid == 79
    assert alert.cluster == CLUSTER and alert.node == NODE
    assert alert.source is AlertSource.SIGNATURE
    assert alert.severity is Severity.CRITICAL
    assert alert.mapped_action is B
    assert alert.summary == "Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert "GPU has fallen off the bus" in alert.description
    assert "0000:3b:00" in alert.description
    assert alert.evidence["xid"] == 79
    assert alert.evidence["mnemonic"] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert alert.evidence["node_action"] == "reboot"
    assert alert.evidence["signature"] == "xid.fallen_off_bus"
    assert alert.evidence["job_id"] == "42"
    assert alert.first_seen == T0 and alert.last_seen == now


def test_alert_from_a_signature_detection() -> None:
    detection = _detection(
        signature_id=SignatureId("gpu.fallen_off_bus"),
        fields={"pci": "0000:3b:00"},
        text="NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
    )
    alert = alert_from_detection(detection, None, T0, cluster=CLUSTER)
    assert alert.key == "sig:gpu.fallen_off_bus"
    assert alert.xid is None
    assert alert.mapped_action is None  # no node action given: listed, not repaired
    with_action = alert_from_detection(detection, "reboot", T0, cluster=CLUSTER)
    assert with_action.mapped_action is B


def test_alert_from_detection_reads_the_attribution_node_action_and_154_text() -> None:
    detection = _detection(
        signature_id=SignatureId("xid.154_gpu_reset"),
        fields={"xid": "154", "recovery_action": "GPU Reset Required", "node_action": "escalate"},
    )
    alert = alert_from_detection(detection, None, T0, cluster=CLUSTER)
    assert alert.key == "xid:154"
    assert alert.mapped_action is R  # the printed action wins over the node action
    assert alert.evidence["node_action"] == "escalate"
    assert "recovery action: GPU Reset Required" in alert.description


def test_alert_from_detection_caps_first_seen_and_needs_a_node() -> None:
    late = _detection(time=T0 + timedelta(hours=1))
    assert alert_from_detection(late, None, T0, cluster=CLUSTER).first_seen == T0
    with pytest.raises(InputError):
        alert_from_detection(_detection(node=None), None, T0, cluster=CLUSTER)


def test_unknown_xid_detection_is_unmapped_but_described() -> None:
    detection = _detection(fields={"xid": "999"}, signature_id=SignatureId("xid.gpu_error"))
    alert = alert_from_detection(detection, "escalate", T0, cluster=CLUSTER)
    assert alert.key == "xid:999"
    assert alert.mapped_action is None
    assert alert.evidence["mnemonic"] == "UNKNOWN_XID"
