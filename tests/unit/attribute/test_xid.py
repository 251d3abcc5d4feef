"""Xid context rules: real kernel lines through the real matcher, then attribution."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from medic.attribute import XID_REPEATED_SIGNATURE_ID, attribute, recommended_node_action
from medic.attribute.xid import REPEAT_THRESHOLD, apply_xid_rules, recovery_action, xid_code
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.logs import LogLine, LogStream

T0 = datetime(2026, 3, 14, tzinfo=UTC)
NODES = tuple(NodeName(f"node00{i}") for i in range(1, 5))
JOB = Job(
    id=JobId("7"),
    cluster=ClusterName("c"),
    name="train",
    state=JobState.RUNNING,
    partition="p",
    nodes=NODES,
    num_nodes=4,
)
DIAGNOSER = SignatureDiagnoser()
BUS = {0: "18", 1: "2a", 2: "3a", 3: "5d"}


def xid(code: int, gpu: int = 0, detail: str = "detail", pid: int | None = 4101) -> str:
    who = f" pid={pid}, name=python," if pid is not None else " pid='<unknown>', name=<unknown>,"
    return f"NVRM: Xid (PCI:0000:{BUS[gpu]}:00): {code},{who} {detail}"


def recovery(action: str, gpu: int = 0) -> str:
    return (
        f"NVRM: Xid (PCI:0000:{BUS[gpu]}:00): 154, GPU recovery action changed from 0x0 (None)"
        f" to 0x2 ({action})"
    )


def kernel(*lines: tuple[float, NodeName, str]) -> list[Detection]:
    scanned = DIAGNOSER.scan(
        [
            LogLine(LogStream.KERNEL, text, T0 + timedelta(seconds=t), node, None, None, i)
            for i, (t, node, text) in enumerate(lines)
        ]
    )
    assert len(scanned) == len(lines), "every test line is a known Xid line"
    return scanned


def verdict(detections: list[Detection], **kwargs: object) -> Verdict:
    return attribute(JOB, 0, detections, now=T0 + timedelta(hours=1), **kwargs)  # type: ignore[arg-type]


LAUNCH = "[rank{r}]: RuntimeError: CUDA error: unspecified launch failure"


def job_line(rank: int, text: str, t: float = 0.0) -> Detection:
    line = LogLine(LogStream.JOB, text.format(r=rank), T0 + timedelta(seconds=t), None, None)
    (found,) = DIAGNOSER.scan([line])
    return found


# --- 13 / 31 ---------------------------------------------------------------------------------


def test_one_xid13_event_is_application_side_even_with_several_lines() -> None:
    lines = [(1.0, NODES[1], xid(13, 3, f"Graphics Exception part {i}")) for i in range(4)]
    rewritten = apply_xid_rules(kernel(*lines))
    assert all(d.domain is FaultDomain.APPLICATION and not d.implicates_node for d in rewritten)
    v = verdict([*kernel(*lines), job_line(11, LAUNCH)])
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.APPLICATION,
        JobAction.RESTART,
        frozenset(),
    )


@pytest.mark.parametrize("code", [13, 31])
def test_repeated_on_the_same_gpu_is_hardware_on_that_node(code: int) -> None:
    lines = [(60.0 * i, NODES[2], xid(code, 1, "fault", pid=5000 + i)) for i in range(3)]
    v = verdict(kernel(*lines))
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.HARDWARE,
        JobAction.RESTART,
        {NODES[2]},
    )
    assert v.root_signature == XID_REPEATED_SIGNATURE_ID
    assert f"Xid {code} repeated 3x" in v.summary
    assert recommended_node_action(v) == "escalate"


def test_below_the_threshold_or_spread_over_gpus_is_not_repeated() -> None:
    below = [(60.0 * i, NODES[2], xid(13, 1, pid=5000 + i)) for i in range(REPEAT_THRESHOLD - 1)]
    spread = [(60.0 * i, NODES[2], xid(13, i, pid=5000 + i)) for i in range(3)]
    other_nodes = [(60.0 * i, NODES[i], xid(13, 1, pid=5000 + i)) for i in range(3)]
    for lines in (below, spread, other_nodes):
        v = verdict([*kernel(*lines), job_line(3, LAUNCH)])
        assert v.domain is FaultDomain.APPLICATION and v.implicated_nodes == frozenset()


def test_pidless_lines_count_one_occurrence_per_second() -> None:
    same_second = [(5.0, NODES[0], xid(31, 0, pid=None)) for _ in range(5)]
    assert verdict(kernel(*same_second)).implicated_nodes == frozenset()
    apart = [(5.0 * i, NODES[0], xid(31, 0, pid=None)) for i in range(3)]
    assert verdict(kernel(*apart)).implicated_nodes == {NODES[0]}


# --- 45 --------------------------------------------------------------------------------------


def test_xid45_is_collateral_never_a_root_nor_a_repeat() -> None:
    many = [(float(i), NODES[0], xid(45, 0, "Ch 00000010", pid=6000 + i)) for i in range(6)]
    assert verdict(kernel(*many)).domain is FaultDomain.NONE
    with_79 = kernel((1.0, NODES[1], xid(79, 2, "GPU has fallen off the bus.")), *many)
    v = verdict(with_79)
    assert v.implicated_nodes == {NODES[1]} and v.root_signature == "xid.fallen_off_bus"
    assert all(d.signature_id != "xid.preemptive_cleanup" for d in v.evidence)


# --- 48 with or without 63/64 ------------------------------------------------------------------


def test_xid48_solo_implicates_and_asks_for_a_gpu_reset() -> None:
    v = verdict(kernel((1.0, NODES[3], xid(48, 2, "An uncorrectable double bit error (DBE)"))))
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.HARDWARE,
        JobAction.RESTART,
        {NODES[3]},
    )
    assert "row remap" not in v.summary
    assert recommended_node_action(v) == "reset_gpu"


@pytest.mark.parametrize("remap", [63, 64])
def test_xid48_with_remap_on_the_same_gpu_takes_the_row_remap_path(remap: int) -> None:
    detections = kernel(
        (1.0, NODES[0], xid(48, 1, "An uncorrectable double bit error (DBE)")),
        (1.0, NODES[0], xid(remap, 1, "Row Remapper: New row marked for remapping", pid=None)),
    )
    rewritten = apply_xid_rules(detections)
    assert rewritten[1].role is Role.CONFIRMATION and rewritten[1].implicates_node
    assert rewritten[0].fields["xid_rule"] == "row_remap"
    v = verdict(detections)
    assert v.implicated_nodes == {NODES[0]} and v.action is JobAction.RESTART
    assert "row remap pending on node001" in v.summary
    assert recommended_node_action(v) == "drain_reset"  # catalog §6.2: drain, then reset
    assert v.confidence == pytest.approx(0.95)  # corroborated by the remap line


def test_remap_on_another_gpu_is_not_the_row_remap_path() -> None:
    detections = kernel(
        (1.0, NODES[0], xid(48, 1, "DBE")),
        (1.0, NODES[0], xid(63, 2, "Row Remapper: New row marked for remapping", pid=None)),
    )
    rewritten = apply_xid_rules(detections)
    assert "xid_rule" not in rewritten[0].fields
    assert rewritten[1].role is Role.ROOT and rewritten[1].action is JobAction.NONE


# --- 154 -------------------------------------------------------------------------------------


def test_xid154_carries_its_printed_action_into_the_verdict() -> None:
    detections = kernel(
        (1.0, NODES[1], xid(79, 0, "GPU has fallen off the bus.")),
        (2.0, NODES[1], recovery("Node Reboot Required")),
    )
    v = verdict(detections)
    assert v.root_signature == "xid.fallen_off_bus"
    assert "driver recovery action on node002: Node Reboot Required (Xid 154)" in v.summary
    assert any(recovery_action(d) == "Node Reboot Required" for d in v.evidence)
    assert recommended_node_action(v) == "reboot"


def test_xid154_printed_action_overrides_the_static_table() -> None:
    detections = kernel(
        (1.0, NODES[1], xid(119, 0, "Timeout after 6s of waiting for RPC response")),
        (1.0, NODES[1], recovery("Drain and Reset")),
    )
    assert recommended_node_action(verdict(detections)) == "drain_reset"


def test_xid154_alone_reset_is_a_root_drain_a_finding_and_none_nothing() -> None:
    alone = verdict(kernel((1.0, NODES[2], recovery("GPU Reset Required"))))
    assert (alone.domain, alone.implicated_nodes) == (FaultDomain.HARDWARE, {NODES[2]})
    assert recommended_node_action(alone) == "reset_gpu"
    drain = verdict(kernel((1.0, NODES[2], recovery("Drain and Reset"))))
    assert (drain.action, drain.implicated_nodes) == (JobAction.NONE, {NODES[2]})
    assert recommended_node_action(drain) == "drain_reset"
    none = verdict(kernel((1.0, NODES[2], recovery("None"))))
    assert none.domain is FaultDomain.NONE and none.implicated_nodes == frozenset()


# --- helpers ---------------------------------------------------------------------------------


def test_xid_code_and_action_are_read_from_the_text_when_fields_are_missing() -> None:
    (d,) = kernel((1.0, NODES[0], recovery("Node Reboot Required")))
    bare = replace(d, fields={})
    assert xid_code(bare) == 154 and recovery_action(bare) == "Node Reboot Required"
    assert xid_code(replace(bare, text="no xid here")) is None
    assert xid_code(replace(bare, fields={"xid": "abc"})) is None


def test_non_xid_detections_pass_through_unchanged() -> None:
    line = job_line(3, LAUNCH)
    assert apply_xid_rules([line]) == [line]


def test_node_action_is_none_when_nobody_is_implicated() -> None:
    assert recommended_node_action(verdict([job_line(3, LAUNCH)])) is None
