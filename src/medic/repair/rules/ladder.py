"""Escalation ladder and migration evidence gate.

**Ladder** ``reset_gpu -> reboot -> reprovision -> migrate`` (lightest first). The same repair
does not loop: when the same fault (same cluster, node, alert key and Xid; an ``xid:<code>`` key
names its Xid itself) is back after the same action already ran twice (two DONE repairs answering
that alert, finished within the last 7 days, boundary included), the recommendation moves one
rung up; it keeps climbing while the next rung also ran twice. Cancelled, rejected, failed and
self-resolved recommendations never ran, so they do not count. A host power-cycle is off the
ladder: after two it climbs to reprovision. Migrate is the top: it stays migrate (removal is a
person's decision). Escalation never goes down.

**Migration gate**: migration is the only repair that consumes real capacity. It needs a critical
alert on that machine firing now or seen within the last 10 days (boundary included); without one
a migrate request runs a reprovision instead, with the reason recorded.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import Alert, AlertState, Repair, RepairAction, RepairState
from medic.repair.rules.guards import Check

__all__ = [
    "ESCALATION_REPEATS",
    "ESCALATION_WINDOW",
    "LADDER",
    "MIGRATION_EVIDENCE_WINDOW",
    "Escalation",
    "apply_migration_gate",
    "escalate",
    "gate_migration",
    "heavier",
    "weight",
]


LADDER: tuple[RepairAction, ...] = (
    RepairAction.RESET_GPU,
    RepairAction.REBOOT,
    RepairAction.REPROVISION,
    RepairAction.MIGRATE,
)
ESCALATION_REPEATS = 2
"""DONE runs of the same action for the same fault after which the next one climbs a rung."""
ESCALATION_WINDOW = timedelta(days=7)
MIGRATION_EVIDENCE_WINDOW = timedelta(days=10)

_WEIGHT = {
    RepairAction.RESET_GPU: 0,
    RepairAction.REBOOT: 1,
    RepairAction.POWER_CYCLE: 2,  # reboots the host the hard way
    RepairAction.REPROVISION: 3,
    RepairAction.MIGRATE: 4,
    RepairAction.REMOVE: 5,
}
_NEXT = {
    RepairAction.RESET_GPU: RepairAction.REBOOT,
    RepairAction.REBOOT: RepairAction.REPROVISION,
    RepairAction.POWER_CYCLE: RepairAction.REPROVISION,
    RepairAction.REPROVISION: RepairAction.MIGRATE,
}


class Escalation(NamedTuple):
    action: RepairAction
    """What to recommend."""
    escalated_from: RepairAction | None
    """The mapped action it climbed from; None when it did not climb."""
    reason: str


_TOP = frozenset({RepairAction.MIGRATE})


def weight(action: RepairAction) -> int:
    """How heavy a repair is: reset < reboot < power-cycle < reprovision < migrate < remove."""
    return _WEIGHT[action]


def heavier(a: RepairAction, b: RepairAction) -> RepairAction:
    """The heavier of two repairs (it also fixes what the lighter one would)."""
    return a if weight(a) >= weight(b) else b


def _runs(
    history: Iterable[Repair],
    *,
    cluster: ClusterName,
    node: NodeName,
    alert_key: str,
    xid: int | None,
    now: datetime,
) -> dict[RepairAction, int]:
    counts: dict[RepairAction, int] = {}
    for r in history:
        if (
            r.state is RepairState.DONE
            and r.cluster == cluster
            and r.node == node
            and alert_key in r.alert_keys
            and (r.xid == xid or (xid is not None and alert_key == f"xid:{xid}"))
            and timedelta(0) <= now - r.updated_at <= ESCALATION_WINDOW
        ):
            counts[r.action] = counts.get(r.action, 0) + 1
    return counts


def escalate(
    action: RepairAction,
    history: Iterable[Repair],
    *,
    cluster: ClusterName,
    node: NodeName,
    alert_key: str,
    xid: int | None,
    now: datetime,
) -> Escalation:
    """The action to recommend for a fault whose lightest fix is ``action``.

    ``history``: the node's repairs (any state, any age; the rule filters them).
    """
    counts = _runs(history, cluster=cluster, node=node, alert_key=alert_key, xid=xid, now=now)
    current = action
    steps: list[str] = []
    while current in _NEXT and counts.get(current, 0) >= ESCALATION_REPEATS:
        following = _NEXT[current]
        steps.append(f"{current} ran {counts[current]}x -> {following}")
        current = following
    fault = f"{alert_key}" + (f" (Xid {xid})" if xid is not None else "")
    if current is action:
        ran = counts.get(action, 0)
        top = ""
        if action in _TOP and ran >= ESCALATION_REPEATS:
            top = " (top of the ladder: removal is a person's call)"
        return Escalation(action, None, f"{action} for {fault}: ran {ran}x in 7 days{top}")
    return Escalation(current, action, f"{fault} came back within 7 days: {'; '.join(steps)}")


def _last_seen(alert: Alert) -> datetime | None:
    return alert.last_seen or alert.first_seen


def gate_migration(alerts_on_node: Sequence[Alert], now: datetime) -> Check:
    """True when a critical alert on the machine is firing now, or was seen (its ``last_seen``,
    else ``first_seen``) within the last 10 days. ``alerts_on_node``: the node's alerts in any
    state (the caller selects the node)."""
    critical = [a for a in alerts_on_node if a.severity is Severity.CRITICAL]
    for a in critical:
        if a.state is AlertState.FIRING:
            return Check(True, RepairRule.MIGRATION_GATE, f"critical alert {a.key} is firing")
    for a in critical:
        seen = _last_seen(a)
        if seen is not None and now - seen <= MIGRATION_EVIDENCE_WINDOW:
            return Check(
                True,
                RepairRule.MIGRATION_GATE,
                f"critical alert {a.key} last seen {seen.isoformat()} (within 10 days)",
            )
    return Check(
        False,
        RepairRule.MIGRATION_GATE,
        "migrate needs a critical alert firing now or in the last 10 days: reprovision instead",
    )


def apply_migration_gate(
    action: RepairAction, alerts: Sequence[Alert], now: datetime, trace: list[tuple[str, str]]
) -> tuple[RepairAction, str]:
    """The action after the migration evidence gate, and a note when it changed (a migrate's
    gate answer is appended to ``trace``)."""
    if action is not RepairAction.MIGRATE:
        return action, ""
    gate = gate_migration(alerts, now)
    trace.append((RepairRule.MIGRATION_GATE, gate.reason))
    return (action, "") if gate else (RepairAction.REPROVISION, f"; {gate.reason}")
