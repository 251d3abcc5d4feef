"""Peers' completion errors pointing at a node with its own hardware fault are its victims
(issue 12, rule 7): the domain stays the node's, the peers are not implicated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from medic.attribute import attribute
from medic.attribute.network import apply_network_rules
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId

T0 = datetime(2026, 3, 14, 10, 0, tzinfo=UTC)
NODES = tuple(NodeName(f"node00{i}") for i in range(1, 5))
JOB = Job(JobId("1"), ClusterName("c"), "j", JobState.FAILED, "p", NODES, num_nodes=4)


def det(sid: str, node: str, role: Role, domain: FaultDomain, at: float, **kw: object) -> Detection:
    return Detection(
        job_id=JOB.id,
        attempt=0,
        signature_id=SignatureId(sid),
        domain=domain,
        role=role,
        severity=Severity.ERROR,
        action=JobAction.RESTART if role is not Role.NOISE else JobAction.NONE,
        time=T0 + timedelta(seconds=at),
        node=NodeName(node),
        seq=int(at * 10) + 1,
        **kw,  # type: ignore[arg-type]
    )


def boots() -> list[Detection]:
    return [
        det("nccl.bootstrap_address", n, Role.NOISE, FaultDomain.NONE, 0,
            fields={"address": f"10.0.{i}.10", "device": "ib0"})
        for i, n in enumerate(NODES)
    ]  # fmt: skip


def completions(at: float) -> list[Detection]:
    return [
        det("nccl.ib_completion_error", n, Role.ROOT, FaultDomain.NETWORK, at,
            fields={"peer": "10.0.3.10<54862>", "status": "12"})
        for n in NODES[:3]
    ]  # fmt: skip


def xid(at: float) -> Detection:
    return det("xid.74", "node004", Role.ROOT, FaultDomain.HARDWARE, at, implicates_node=True)


def test_peers_errors_before_the_nodes_own_line_are_still_its_victims() -> None:
    # NCCL's WARN lines carry no time: they often read as earlier than the kernel's Xid line.
    v = attribute(JOB, 0, [*boots(), *completions(at=0.1), xid(at=840)], now=T0)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.HARDWARE,
        JobAction.RESTART,
        frozenset({NodeName("node004")}),
    )


def test_the_rewritten_errors_are_cascades_naming_the_node() -> None:
    result = apply_network_rules([*boots(), *completions(at=1), xid(at=0)], NODES)
    peers = [d for d in result if d.signature_id == "nccl.ib_completion_error"]
    assert {(d.role, d.fields["victim_of"]) for d in peers} == {(Role.CASCADE, "node004")}


def test_without_an_own_fault_the_peers_still_point_at_the_node() -> None:
    v = attribute(JOB, 0, [*boots(), *completions(at=1)], now=T0)
    assert (v.domain, v.implicated_nodes) == (FaultDomain.NETWORK, frozenset({NodeName("node004")}))
