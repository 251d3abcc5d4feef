"""When an approved repair may take its node (wait-for-idle), and what state a node is in.

**Wait-for-idle** (:func:`wait_decision`), by ``policy.wait_mode``:

- ``idle``: proceed when no job runs on the node, or once the wait deadline passed
  (``approved_at + min(max_wait_seconds, 24 h)``, boundary included): then with
  ``timed_out=True`` and the interrupted jobs listed (recorded, never silent).
- ``never_interrupt``: proceed only when no job runs there, however long that takes.
- ``checkpoint``: proceed when idle, or right after the managed job saved a checkpoint (its jobs
  are listed as interrupted: they lose nothing). The ``idle`` deadline still applies, so a job
  that hangs and never checkpoints cannot hold a broken node forever.

A job runs on the node while it is not finished and not pending (RUNNING, COMPLETING, and
UNKNOWN, which is treated as running); the caller passes the node's jobs.

**Node health** (:func:`node_health`): OUT_OF_SERVICE (failed revalidation, or its last DONE repair
removed it) > UNDER_REPAIR (an approved, unfinished repair) > DEGRADED (an alert firing) >
HEALTHY. :func:`job_placement_exclusions` lists the nodes job recovery must never use.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Severity
from medic.domain.ids import NodeName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import (
    Alert,
    AlertState,
    NodeHealth,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairState,
    WaitMode,
)

__all__ = [
    "MAX_WAIT_CAP_SECONDS",
    "WaitDecision",
    "critical_alert_nodes",
    "deadline",
    "job_placement_exclusions",
    "node_health",
    "running_jobs",
    "wait_decision",
]

MAX_WAIT_CAP_SECONDS = 86_400.0
"""The longest hold for an idle node, whatever ``max_wait_seconds`` says."""


class WaitDecision(NamedTuple):
    proceed: bool
    timed_out: bool
    interrupted_jobs: tuple[str, ...]
    """Jobs the repair interrupts when it proceeds now (record them with the reason)."""
    reason: str
    rule: RepairRule


def deadline(approved_at: datetime | None, policy: RepairPolicy) -> datetime | None:
    """When the wait for an idle node ends: ``approved_at + min(max_wait, 24 h)``; None for
    ``never_interrupt`` or without an approval time."""
    if approved_at is None or policy.wait_mode is WaitMode.NEVER_INTERRUPT:
        return None
    wait = min(max(0.0, policy.max_wait_seconds), MAX_WAIT_CAP_SECONDS)
    return approved_at + timedelta(seconds=wait)


def running_jobs(jobs: Iterable[Job]) -> tuple[Job, ...]:
    """Jobs that hold the node: not finished and not pending."""
    return tuple(j for j in jobs if not j.state.is_terminal and j.state is not JobState.PENDING)


def wait_decision(
    repair: Repair,
    node_jobs: Sequence[Job],
    policy: RepairPolicy,
    now: datetime,
    managed_job_checkpointed: bool = False,
) -> WaitDecision:
    """Whether ``repair`` may take its node now (see the module docstring). The deadline is the
    repair's ``wait_deadline`` when set, else :func:`deadline` of its ``approved_at``."""
    running = running_jobs(node_jobs)
    ids = tuple(str(j.id) for j in running)
    if not running:
        return WaitDecision(True, False, (), f"no job runs on {repair.node}", RepairRule.IDLE)
    listed = ", ".join(ids)
    if policy.wait_mode is WaitMode.CHECKPOINT and managed_job_checkpointed:
        reason = f"the managed job saved a checkpoint: interrupting {listed}"
        return WaitDecision(True, False, ids, reason, RepairRule.CHECKPOINT)
    if policy.wait_mode is WaitMode.NEVER_INTERRUPT:
        reason = f"waiting for {listed} to finish on {repair.node} (never interrupt)"
        return WaitDecision(False, False, (), reason, RepairRule.WAIT)
    until = repair.wait_deadline or deadline(repair.approved_at, policy)
    if until is not None and now >= until:
        reason = f"wait deadline {until.isoformat()} passed: interrupting {listed}"
        return WaitDecision(True, True, ids, reason, RepairRule.WAIT_TIMEOUT)
    bound = f"until {until.isoformat()}" if until is not None else "(no deadline known)"
    return WaitDecision(False, False, (), f"waiting for {listed} {bound}", RepairRule.WAIT)


def node_health(
    alerts_on_node: Iterable[Alert],
    repairs_on_node: Iterable[Repair],
    last_validation_failed: bool,
) -> NodeHealth:
    """The node's health from its alerts, its repairs and its last validation result."""
    repairs = list(repairs_on_node)
    if last_validation_failed:
        return NodeHealth.OUT_OF_SERVICE
    done = [r for r in repairs if r.state is RepairState.DONE]
    if done and max(done, key=lambda r: (r.updated_at, r.id)).action is RepairAction.REMOVE:
        return NodeHealth.OUT_OF_SERVICE
    if any(r.state.is_active for r in repairs):
        return NodeHealth.UNDER_REPAIR
    if any(a.state is AlertState.FIRING for a in alerts_on_node):
        return NodeHealth.DEGRADED
    return NodeHealth.HEALTHY


def critical_alert_nodes(alerts: Iterable[Alert]) -> frozenset[NodeName]:
    """Nodes with a critical alert firing."""
    return frozenset(
        a.node for a in alerts if a.state is AlertState.FIRING and a.severity is Severity.CRITICAL
    )


def job_placement_exclusions(
    node_health: Mapping[NodeName, NodeHealth], critical_alert_nodes: Iterable[NodeName]
) -> frozenset[NodeName]:
    """Nodes job recovery must never use: under repair, out of service, or degraded by a
    critical alert (every node in ``critical_alert_nodes``)."""
    out = {NodeHealth.UNDER_REPAIR, NodeHealth.OUT_OF_SERVICE}
    return frozenset(n for n, h in node_health.items() if h in out) | frozenset(
        critical_alert_nodes
    )
