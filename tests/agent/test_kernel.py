"""Kernel log: following a real file (append, partial lines, rotation, truncation), /dev/kmsg
records, a journalctl-like subprocess, and classifying real Xid and kernel lines."""

from __future__ import annotations

import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from medic.agent.checks import CheckStatus
from medic.agent.kernel import (
    FileFollower,
    JournalFollower,
    KernelClassifier,
    KmsgFollower,
    kernel_signatures,
    make_follower,
    parse_kmsg_record,
)
from medic.detect import default_catalogue
from medic.detect.signatures import Signature
from medic.domain.diagnosis import FaultDomain, JobAction, Role, Severity
from medic.domain.ids import ClusterName, NodeName, SignatureId
from medic.domain.repairs import Alert, AlertSource, RepairAction
from medic.repair.rules.lightest import mapped_action

CATALOGUE = default_catalogue()

XID_79 = (
    "[ 8021.441201] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, "
    "GPU has fallen off the bus."
)
XID_48 = (
    "Jun 11 09:44:44 gpu-node-017 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', "
    "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU"
)
XID_13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics Exception"
EXT4_RO = "EXT4-fs (nvme0n1p1): Remounting filesystem read-only"
NOISE = "usb 1-1: new high-speed USB device number 2 using xhci_hcd"


def _append(path: Path, *lines: str, end: str = "\n") -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + end)


# --- file follower -------------------------------------------------------------------------------
def test_file_follower_starts_at_the_end_and_returns_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "old line before the agent started")
    follower = FileFollower(str(log))

    assert follower.read_new() == []
    _append(log, XID_79, NOISE)
    assert follower.read_new() == [XID_79, NOISE]
    assert follower.read_new() == []
    follower.close()


def test_file_follower_holds_a_partial_line_until_it_ends(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = FileFollower(str(log))
    _append(log, XID_48[:30], end="")

    assert follower.read_new() == []
    _append(log, XID_48[30:])
    assert follower.read_new() == [XID_48]
    follower.close()


def test_file_follower_follows_rotation_without_losing_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = FileFollower(str(log))
    _append(log, "before rotation")
    assert follower.read_new() == ["before rotation"]

    _append(log, "last line of the old file")
    log.rename(tmp_path / "kern.log.1")
    _append(log, XID_79)

    assert follower.read_new() == ["last line of the old file", XID_79]
    _append(log, "after rotation")
    assert follower.read_new() == ["after rotation"]
    follower.close()


def test_file_follower_rereads_a_truncated_file(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "a fairly long line that makes the file bigger than what follows")
    follower = FileFollower(str(log))
    log.write_text("")  # copytruncate
    _append(log, "new")

    assert follower.read_new() == ["new"]
    follower.close()


def test_file_follower_waits_for_a_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    follower = FileFollower(str(log))

    assert follower.read_new() == []
    _append(log, XID_13)
    assert follower.read_new() == [XID_13]
    follower.close()


def test_make_follower() -> None:
    assert isinstance(make_follower("file:/var/log/kern.log"), FileFollower)
    assert isinstance(make_follower("kmsg"), KmsgFollower)
    assert isinstance(make_follower("journal"), JournalFollower)
    with pytest.raises(ValueError, match="kmsg, journal or file:PATH"):
        make_follower("syslog")


# --- /dev/kmsg -----------------------------------------------------------------------------------
def test_parse_kmsg_record() -> None:
    record = b"3,1234,8021441201,-;" + XID_79.split("] ", 1)[1].encode() + b"\n SUBSYSTEM=pci\n"
    assert parse_kmsg_record(record) == XID_79.split("] ", 1)[1]
    assert parse_kmsg_record(b"no header here") is None
    assert parse_kmsg_record(b"6,1,2,-;caf\xc3\xa9 \xff\n") == "café \ufffd"


def test_kmsg_follower_reads_records_written_after_it_opened() -> None:
    if not os.access("/dev/kmsg", os.R_OK | os.W_OK):
        pytest.skip("/dev/kmsg is not readable and writable here")
    follower = KmsgFollower()
    try:
        follower.read_new()  # opens at the end
        marker = f"medic-agent-test {uuid.uuid4()}"
        try:
            with open("/dev/kmsg", "w") as kmsg:
                kmsg.write(marker + "\n")
        except OSError as exc:
            pytest.skip(f"cannot write /dev/kmsg: {exc}")
        deadline, seen = time.monotonic() + 5, []
        while marker not in "\n".join(seen) and time.monotonic() < deadline:
            seen += follower.read_new()
            time.sleep(0.01)
        assert any(marker in line for line in seen)
    finally:
        follower.close()


# --- journalctl ----------------------------------------------------------------------------------
def test_journal_follower_reads_the_command_output_and_restarts_it() -> None:
    script = "import sys; print('-- No entries --'); print(sys.argv[1]); sys.stdout.flush()"
    follower = JournalFollower([sys.executable, "-c", script, XID_79])
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            seen += follower.read_new()  # the command exits: each read restarts it
            time.sleep(0.05)
        assert seen[:2] == [XID_79, XID_79]
    finally:
        follower.close()


# --- classification ------------------------------------------------------------------------------
def test_xid_lines_become_xid_findings_with_code_and_pci() -> None:
    classifier = KernelClassifier("gpu-node-017", CATALOGUE)
    findings = {f.key: f for f in classifier.classify([NOISE, XID_79, XID_48, XID_79])}

    assert set(findings) == {"xid:79", "xid:48"}
    bus = findings["xid:79"]
    assert bus.status is CheckStatus.FAILING and bus.event and bus.xid == 79
    assert bus.severity is Severity.CRITICAL
    assert bus.evidence["xid"] == 79 and bus.evidence["pci"] == "0000:18:00"
    assert bus.evidence["occurrences"] == 2 and bus.evidence["line"] == XID_79
    assert (
        bus.summary
        == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: GPU has fallen off the bus (Xid 79)"
    )
    assert bus.evidence["mnemonic"] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert "gpu-node-017" in bus.description
    assert findings["xid:48"].evidence["fields"] == {
        "pci": "0000:3b:00",
        "xid": "48",
        "pid": "'<unknown>'",
    }


def test_an_xid_154_finding_carries_the_printed_recovery_action_where_mapping_reads_it() -> None:
    line = (
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x2 (Node Reboot Required)"
    )
    (finding,) = KernelClassifier("n1", CATALOGUE).classify([line])
    assert finding.key == "xid:154"
    assert finding.evidence["recovery_action"] == "Node Reboot Required"
    alert = Alert(
        cluster=ClusterName("c"),
        node=NodeName("n1"),
        key=finding.key,
        source=AlertSource.AGENT,
        summary=finding.summary,
        description=finding.description,
        severity=finding.severity,
        evidence=finding.evidence,
    )
    assert mapped_action(alert) is RepairAction.REBOOT


def test_application_and_noise_lines_are_not_node_findings() -> None:
    classifier = KernelClassifier("n1", CATALOGUE)
    assert classifier.classify([XID_13, NOISE, "Out of memory: Killed process 42 (python)"]) == []


def test_system_lines_become_sig_findings() -> None:
    findings = KernelClassifier("n1", CATALOGUE).classify(
        [EXT4_RO, "mlx5_core 0000:3b:00.0: mlx5_port_module_event:1168: Link down on port 1"]
    )
    keys = [f.key for f in findings]

    assert keys == ["sig:kernel.fs_read_only", "sig:mlx5.link_down"]
    assert findings[0].xid is None and findings[0].evidence["signature"] == "kernel.fs_read_only"


def test_a_catalogue_title_with_a_mnemonic_gives_the_mnemonic() -> None:
    signature = Signature(
        SignatureId("xid.79"),
        "GPU_HAS_FALLEN_OFF_THE_BUS: GPU has fallen off the bus (Xid 79)",
        FaultDomain.HARDWARE,
        Role.ROOT,
        Severity.CRITICAL,
        True,
        JobAction.RESTART,
        r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]{1,20})\): (?P<xid>79),",
        "https://docs.nvidia.com/deploy/xid-errors/",
    )
    finding = KernelClassifier("n1", [signature]).classify([XID_79])[0]

    assert finding.key == "xid:79"
    assert finding.evidence["mnemonic"] == "GPU_HAS_FALLEN_OFF_THE_BUS"
    assert finding.summary == signature.title


def test_the_default_catalogue_classifies_xid_lines() -> None:
    signatures = kernel_signatures()
    assert len({s.id for s in signatures}) == len(signatures)
    finding = KernelClassifier("n1").classify([XID_48], datetime.now(UTC))[0]

    assert finding.key == "xid:48" and finding.evidence["xid"] == 48
