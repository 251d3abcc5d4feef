"""Issue 11, defect 2, over a real SQLite store: a detector's repair request waits for a person
unless the repair policy trusts the detector, and a detector name written into a Slurm drain
reason or node comment (which anyone who may drain a node writes) is not taken as that detector
unless the policy explicitly trusts the scheduler channel."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from medic.domain.audit import AuditKind
from medic.domain.cluster import Node, NodeState
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequestChannel,
    RequesterKind,
)
from medic.repair.decisions import approve_repair
from medic.repair.intake import submit_repair
from medic.repair.intake_common import node_pools
from medic.schedulers.slurm.requests import parse_request
from medic.store import SqlStore, create_store
from medic.testing import FakeClock

C = ClusterName("c1")
NODES = [Node(NodeName(f"n{i:02d}"), NodeState.IDLE, gpus=8) for i in range(1, 41)]
S = RepairState
TRUSTED = RepairPolicy(trusted_detectors=frozenset({"nvsentinel"}))
SPOOFED = "medic-request: reboot id=t-1 detector=nvsentinel written by anyone who may drain"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = create_store(f"sqlite:///{tmp_path / 'medic.db'}")
    yield opened
    opened.close()


def _submit(store: SqlStore, request: RepairRequest) -> Repair:
    repair, created, _ = submit_repair(
        store, request, FakeClock().now(), cluster_nodes=len(NODES), node_pools=node_pools(NODES)
    )
    assert created
    return repair


def _api_request(name: str = "nvsentinel", node: str = "n01") -> RepairRequest:
    return RepairRequest(
        C,
        NodeName(node),
        RepairAction.REBOOT,
        name,
        RequesterKind.DETECTOR,
        "GPU memory test failed",
        request_id="r-1",
        evidence={"check": "gpu_mem"},
        channel=RequestChannel.API,
    )


def _from_slurm(where: str) -> RepairRequest:
    drained = where == "reason"
    node = Node(
        NodeName("n07"),
        NodeState.DRAINED if drained else NodeState.IDLE,
        gpus=8,
        reason=SPOOFED if drained else None,
        comment=None if drained else SPOOFED,
    )
    request = parse_request(node, C)
    assert request is not None and request.channel is RequestChannel.SCHEDULER
    return request


def _requested(store: SqlStore) -> dict[str, object]:
    [event] = store.query_audit(cluster=C, kind=AuditKind.REPAIR_REQUESTED, limit=10)
    return event.payload


def test_by_default_a_detector_request_waits_for_a_person(store: SqlStore) -> None:
    repair = _submit(store, _api_request())

    assert (repair.state, repair.approved_by, repair.rule) == (
        S.PENDING_APPROVAL,
        None,
        "detector-untrusted",
    )
    payload = _requested(store)
    assert (payload["rule"], payload["channel"], payload["approved_by"]) == (
        "detector-untrusted",
        "api",
        None,
    )
    approved = approve_repair(store, repair.id, "bob", FakeClock().now())
    assert (approved.state, approved.approved_by) == (S.APPROVED, "bob")


def test_a_trusted_detector_through_the_api_is_approved_automatically(store: SqlStore) -> None:
    store.put_repair_policy(C, TRUSTED)

    trusted = _submit(store, _api_request())
    other = _submit(store, _api_request("dcgm", "n02"))

    assert (trusted.state, trusted.approved_by, trusted.rule) == (
        S.APPROVED,
        "auto",
        "auto:detector:nvsentinel",
    )
    assert (other.state, other.rule) == (S.PENDING_APPROVAL, "detector-untrusted")


@pytest.mark.parametrize("where", ["reason", "comment"])
def test_a_trusted_name_written_into_slurm_waits_for_a_person(store: SqlStore, where: str) -> None:
    store.put_repair_policy(C, TRUSTED)

    repair = _submit(store, _from_slurm(where))

    assert (repair.requested_by, repair.requester_kind) == ("nvsentinel", RequesterKind.DETECTOR)
    assert (repair.state, repair.approved_by, repair.rule) == (
        S.PENDING_APPROVAL,
        None,
        "detector-unauthenticated",
    )
    assert _requested(store)["channel"] == "scheduler"


def test_the_policy_may_trust_the_scheduler_channel_explicitly(store: SqlStore) -> None:
    store.put_repair_policy(
        C, RepairPolicy(trusted_detectors=frozenset({"nvsentinel"}), trust_scheduler_requests=True)
    )

    repair = _submit(store, _from_slurm("reason"))

    assert (repair.state, repair.approved_by, repair.rule) == (
        S.APPROVED,
        "auto",
        "auto:detector:nvsentinel",
    )
