"""Removal for RMA, a person's decision: the node leaves service and stays out, also on a
provider that has nothing to run for it (Slurm without ``repair.remove_command``)."""

from __future__ import annotations

from medic.domain.cluster import NodeState
from medic.domain.diagnosis import Severity
from medic.domain.ids import NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequesterKind,
)
from medic.repair import decisions as repair_decisions
from medic.repair import intake
from medic.schedulers.sim import SimNodeProvider

from .conftest import CLUSTER, MakeHarness
from .test_repairs_rig import rig


class _NothingToRun(SimNodeProvider):
    """As Slurm: a removal runs nothing, the node keeps medic's drain."""

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        if action is not RepairAction.REMOVE:
            super().execute(node, action, repair_id)


def test_a_removed_node_stays_drained_after_its_repair_is_done(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness, provider=_NothingToRun, policy=RepairPolicy(cooldown_seconds=0))
    h = r.h
    node = NodeName("node006")
    failed_check = Alert(
        cluster=CLUSTER,
        node=node,
        key="agent:row_remap_failure",
        source=AlertSource.AGENT,
        summary="GPU 2 has no spare rows left",
        description="row remapping failed",
        severity=Severity.CRITICAL,
        detector="agent:node006",
    )
    h.store.upsert_alert(failed_check, h.clock.now())
    request = RepairRequest(
        cluster=CLUSTER,
        node=node,
        action=RepairAction.REMOVE,
        requested_by="alice",
        requester_kind=RequesterKind.USER,
        reason="RMA: GPU 2 memory",
        alert_keys=("agent:row_remap_failure",),
    )
    asked, _, _ = intake.submit_repair(
        h.store, request, h.clock.now(), cluster_nodes=12, node_pools={}
    )
    h.run(1.0)  # medic's own recommendation for the alert may not preempt the person's
    repair_decisions.approve_repair(h.store, asked.id, "bob", h.clock.now())
    done = r.run_until_state(str(node), RepairState.DONE, within=30)
    assert done.id == asked.id

    h.run(90.0, step=1.0)  # well past the sweep's grace
    state, reason = r.node(str(node))
    assert state is NodeState.DRAINED and reason == f"medic: repair {done.id} remove"
