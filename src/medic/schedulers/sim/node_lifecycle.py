"""What happens to a simulated node's health: hardware faults, restarts and repair actions.

A hardware fault leaves a node broken until ``sim.node_repair_seconds`` pass (standing in for a
repair done by hand) or it restarts. A restart (a reboot, or a repair that restarts the node)
fails the job running there (NODE_FAIL), keeps the node DOWN for a while (``REPAIR_SECONDS``) and
brings it back healthy, with a new boot id. A GPU reset clears a GPU fault other than a GPU off the
bus at once; a removal drains the node for good. Each function acts on the :class:`SimCluster`
at the current virtual instant, under its lock (the caller's public operation holds it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from medic.domain.cluster import JobState
from medic.domain.faults import FaultKind
from medic.domain.ids import NodeName
from medic.domain.repairs import RepairAction
from medic.schedulers.sim.state import SimNode

if TYPE_CHECKING:
    from medic.schedulers.sim.cluster import SimCluster

__all__ = [
    "NOT_RESPONDING",
    "REBOOT_SECONDS",
    "REPAIR_SECONDS",
    "break_node",
    "execute",
    "rejoined",
    "restart",
]

REBOOT_SECONDS = 5.0
"""How long a reboot keeps a node DOWN."""
NOT_RESPONDING = "Not responding"
"""Down reason of a failed node, as Slurm reports it."""
REPAIR_SECONDS: dict[RepairAction, float] = {
    RepairAction.REBOOT: REBOOT_SECONDS,
    RepairAction.POWER_CYCLE: 2 * REBOOT_SECONDS,
    RepairAction.REPROVISION: 30.0,
    RepairAction.MIGRATE: 60.0,
}
"""How long each restarting repair keeps a node DOWN before it is back with a new boot id."""
_RESETTABLE = frozenset({FaultKind.ECC_DBE})
"""Faults a GPU reset clears (a GPU off the bus needs the node restarted)."""


def break_node(sim: SimCluster, node: SimNode, kind: FaultKind) -> None:
    """Leave ``node`` broken by a hardware fault until repaired or rebooted."""
    node.broken = kind
    node.repair_gen += 1
    if kind is FaultKind.NODE_FAIL:
        node.down_reason = NOT_RESPONDING
        sim.touch(node)
    sim.events.after(sim.settings.node_repair_seconds, _repaired, sim, node, node.repair_gen)


def restart(sim: SimCluster, sim_node: SimNode, reason: str, seconds: float) -> None:
    """Take the node DOWN for ``seconds`` (its job fails), then back healthy with a new boot
    id. Restarting a restarting node does nothing."""
    if sim_node.rebooting:
        return
    sim_node.rebooting = True
    sim_node.repair_gen += 1
    sim_node.down_reason = reason
    if sim_node.job is not None:
        sim.training.stop(sim_node.job, JobState.NODE_FAIL)
    sim.touch(sim_node)
    sim.events.after(seconds, _booted, sim, sim_node)


def execute(sim: SimCluster, node: NodeName, action: RepairAction, repair_id: int) -> None:
    """Carry out a repair (durations in ``REPAIR_SECONDS``): a GPU reset
    clears a GPU fault other than a GPU off the bus, at once, without a reboot; a reboot or a
    power cycle restarts the node; a reprovision or a migration restarts it on a clean (new)
    machine, which takes longer; a removal drains it for good. Every one is recorded in
    ``sim.repairs``. Asking again while the node restarts does nothing."""
    sim_node = sim.node(node)
    reason = f"medic: repair {repair_id} {action.value}"
    if action is RepairAction.RESET_GPU:
        if sim_node.job is not None:
            sim.training.stop(sim_node.job, JobState.FAILED)
        if sim_node.broken in _RESETTABLE:
            sim_node.broken = None
            sim_node.repair_gen += 1
        sim.touch(sim_node)
    elif action is RepairAction.REMOVE:
        sim_node.drain_reason = f"medic: removed for RMA (repair {repair_id})"
        sim.touch(sim_node)
    elif not sim_node.rebooting:
        restart(sim, sim_node, reason, REPAIR_SECONDS[action])
    else:
        return
    sim.repairs.append((node, action, repair_id, sim.events.when()))


def rejoined(sim_node: SimNode, action: RepairAction, boot_id_before: str | None) -> bool:
    """The node is back in service after ``action`` (with a new boot id, when it restarted)."""
    if sim_node.rebooting or sim_node.down_reason is not None:
        return False
    if action in (RepairAction.RESET_GPU, RepairAction.REMOVE) or boot_id_before is None:
        return True
    return sim_node.boot_id != boot_id_before


def _repaired(sim: SimCluster, node: SimNode, gen: int) -> None:
    if node.repair_gen != gen:
        return
    node.broken = None
    if node.down_reason == NOT_RESPONDING:
        node.down_reason = None
    sim.touch(node)


def _booted(sim: SimCluster, node: SimNode) -> None:
    node.rebooting = False
    node.repair_gen += 1
    node.broken = None
    node.slow = False
    node.down_reason = None
    node.boot_count += 1
    sim.touch(node)
