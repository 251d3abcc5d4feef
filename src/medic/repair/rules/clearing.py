"""When a firing alert clears by itself, and which nodes medic takes out of the pool.

**Clear windows** (:func:`clear_window`, :func:`expired`). A log line is an event, not a state: an
Xid in a kernel log or a job's log is printed once and never "unprinted", so an alert raised from
one needs a condition that ends it, or a healed node stays degraded (and excluded from every later
requeue) forever. Each alert clears on the first of:

- its **signal absent for its clear window**: no new sighting (``last_seen``) for
  ``repair.alert_clear_seconds`` (``repair.critical_alert_clear_seconds`` for a critical one,
  longer: a GPU that fell off the bus prints its Xid once and stays broken);
- **its repair finished** (DONE, or a revalidation that passed: the lifecycle resolves the
  repair's alerts);
- **a person's resolve** (console, ``medic alerts resolve``, ``POST /api/v1/alerts/{id}/resolve``).

Which alerts have a window: catalogue signatures (kernel and job-log lines) and the agent's (its
one-off kernel findings are events too; its condition checks are re-sent every
``refire_seconds`` while they fail, well inside the window, and resolve themselves when they
pass). Not the scheduler's (``slurm:*``, a state, resolved when the state clears), not a failed
revalidation's (``validation:failed``: only a passing revalidation or a person clears it) and not
a bring-your-own detector's (it resolves its own alerts through the API). No alert clears by time
while an active repair answers it: that repair decides.

**Cordons** (:func:`cordon_nodes`). In act mode a node with direct evidence of a fault
(:func:`is_cordon_alert`: a critical alert, or an error a repair is mapped to) is drained
(with a ``medic:`` reason, no job killed: Slurm's DRAIN lets running jobs finish) as soon as the
alert fires, whatever the approval state of its repair, so new jobs stop landing on it while a
person decides. :func:`cordon_lifts` says when it comes back: once no such alert fires there
(cleared, resolved by its repair or by a person); a repair past approval replaces the cordon by
its own drain and lifts that when it is done.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from medic.domain.cluster import OUT_OF_SERVICE, Node
from medic.domain.diagnosis import Severity
from medic.domain.ids import NodeName
from medic.domain.repairs import Alert, AlertSource, AlertState, Repair

__all__ = [
    "CORDON_PREFIX",
    "ClearWindows",
    "clear_window",
    "cordon_alert_id",
    "cordon_lifts",
    "cordon_nodes",
    "cordon_reason",
    "expired",
    "is_cordon_alert",
]

VALIDATION_KEY = "validation:failed"
_TIMED_SOURCES = frozenset({AlertSource.SIGNATURE, AlertSource.AGENT})
CORDON_PREFIX = "medic: cordon alert "
_CORDON = re.compile(r"^medic: cordon alert (\d+)\b")


@dataclass(frozen=True, slots=True)
class ClearWindows:
    """Seconds without a sighting after which an alert clears (``repair.*_clear_seconds``)."""

    default: float
    critical: float


def clear_window(alert: Alert, windows: ClearWindows) -> float | None:
    """The alert's clear window in seconds; None when time alone never clears it."""
    if alert.source not in _TIMED_SOURCES or alert.key == VALIDATION_KEY:
        return None
    seconds = windows.critical if alert.severity is Severity.CRITICAL else windows.default
    return seconds if seconds > 0 else None


def expired(
    alerts: Iterable[Alert],
    windows: ClearWindows,
    repairs: Iterable[Repair],
    now: datetime,
) -> list[tuple[Alert, float]]:
    """The firing alerts whose signal has been absent for their clear window, with the window;
    never one an active repair answers (its repair decides)."""
    answered = {(r.node, key) for r in repairs if r.state.is_active for key in r.alert_keys}
    found: list[tuple[Alert, float]] = []
    for alert in alerts:
        window = clear_window(alert, windows)
        if (
            window is None
            or alert.state is not AlertState.FIRING
            or (alert.node, alert.key) in answered
            or alert.last_seen is None
        ):
            continue
        if (now - alert.last_seen).total_seconds() >= window:
            found.append((alert, window))
    return found


def is_cordon_alert(alert: Alert) -> bool:
    """A firing alert that is direct evidence of a fault on the node: critical, or an error a
    repair is mapped to (an HCA's link down, an NVLink down; an unmapped error is recorded, not
    acted on). Never the scheduler's own word: a node it reports down or drained is out of the
    pool already. A job-log line raises an alert only when it implicates its own node."""
    if alert.state is not AlertState.FIRING or alert.source is AlertSource.SCHEDULER:
        return False
    return alert.severity is Severity.CRITICAL or (
        alert.severity is Severity.ERROR and alert.mapped_action is not None
    )


def cordon_reason(alert: Alert) -> str:
    """The drain reason of a cordon (medic's: ``is_medic_reason``), naming the alert."""
    return f"{CORDON_PREFIX}{alert.id} {alert.key}: {alert.summary}"[:200]


def cordon_alert_id(reason: str | None) -> int | None:
    """The alert id of a cordon's drain reason (None: not a cordon)."""
    found = _CORDON.match(reason or "")
    return int(found[1]) if found else None


def cordon_nodes(
    nodes: Mapping[NodeName, Node],
    firing: Mapping[NodeName, list[Alert]],
    busy: Iterable[NodeName],
    acting: frozenset[NodeName],
) -> dict[NodeName, Alert]:
    """Nodes to cordon now, each with the alert that takes it out (its oldest such alert):
    in act mode (``acting``), in service, and not in a repair past approval (``busy``: that
    repair drains the node itself)."""
    skip = set(busy)
    found: dict[NodeName, Alert] = {}
    # Only a node with a firing alert can be cordoned: never walk the whole cluster.
    for name in sorted(n for n in firing if n in acting and n not in skip):
        node = nodes.get(name)
        if node is None or node.state in OUT_OF_SERVICE:
            continue
        critical = [a for a in firing.get(name, []) if is_cordon_alert(a)]
        if critical:
            found[name] = min(critical, key=lambda a: (a.first_seen or a.last_seen, a.id or 0))
    return found


def cordon_lifts(
    nodes: Mapping[NodeName, Node],
    firing: Mapping[NodeName, list[Alert]],
    busy: Iterable[NodeName],
) -> list[NodeName]:
    """Cordoned nodes to return to service: no alert with direct evidence of a fault firing on them
    any more (it cleared, its repair resolved it, or a person resolved it) and no repair past
    approval on them (that repair lifts its own drain when it is done)."""
    skip = set(busy)
    return sorted(
        name
        for name, node in nodes.items()
        if node.state in OUT_OF_SERVICE  # first: cheap, and false for most of a cluster
        and cordon_alert_id(node.reason) is not None
        and name not in skip
        and not any(is_cordon_alert(a) for a in firing.get(name, []))
    )
