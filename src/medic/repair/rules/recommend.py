"""medic's own repair recommendation for a node: its alerts -> a recommendation (or a reasoned
skip), and the two answers every repair decision gives (:class:`Recommendation`, :class:`Skip`).

:func:`recommend` chains, first stop wins, each step with a stable rule id:

1. ``no-alert``: nothing firing on the node.
2. ``open-repair``: the node already has an unfinished repair (one repair per node at a time).
3. ``unmapped``: no firing alert has an action mapping (:func:`.lightest.effective_action`); the
   alerts stay listed, never dropped.
4. ``persistence``: no mapped alert has held long enough yet (``retry_at`` says when one will).
5. ``cooldown``: a repair on the node finished less than the cooldown ago.
6. ``escalation``: each persistent alert's action climbs the ladder when its fault is back after
   the same action ran twice; the heaviest wins (it fixes the lighter faults too) and every
   persistent mapped alert becomes evidence of the request.
7. ``migration-gate``: a migrate without critical evidence becomes a reprovision; ``executor``: a
   GPU reset the cluster cannot carry out (no hook) becomes a reboot.
8. approval (:func:`.approval.approve`): ``approval-required``, ``auto:action:<a>``,
   ``auto:xid:<code>`` or, when the breaker is tripped, ``breaker-tripped`` (pending: people
   still approve).
9. ``budget``: an automatically approved repair that does not fit the concurrency budget is not
   created now (Skip); it is reconsidered next pass. A pending one is created: the budget is
   checked again when an approved repair is about to start (:func:`.guards.within_budget`).

A detector's or a person's own request takes :func:`medic.repair.rules.admission.admit` instead,
which answers with the same two types and shares the open-repair check (:func:`open_repair`).

Pure: no I/O, no clock reads (``now`` is an argument).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from medic.domain.ids import ClusterName, NodeName
from medic.domain.repair_rules import Approval, RepairRule
from medic.domain.repairs import (
    Alert,
    AlertState,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequesterKind,
)
from medic.repair.rules.approval import approval_text, approve
from medic.repair.rules.guards import (
    in_cooldown,
    is_persistent,
    within_budget,
)
from medic.repair.rules.ladder import apply_migration_gate, escalate, weight
from medic.repair.rules.lightest import alert_xid, effective_action
from medic.repair.rules.waiting import deadline

__all__ = [
    "MEDIC_REQUESTER",
    "Recommendation",
    "Skip",
    "open_repair",
    "recommend",
]

MEDIC_REQUESTER = "medic"
"""Who requests medic's own recommendations (a name no person or detector may use)."""
"""The mapped action has no executor here: the lightest one that has (reset -> reboot)."""


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Create this repair: ``store.create_repair(request, state=state, approved_by=..., rule=...)``
    (``approved_at=now`` and ``wait_deadline`` when approved, ``escalated_from`` from here)."""

    request: RepairRequest
    approval: Approval
    """Who approves it (PENDING_APPROVAL: a person), under which rule."""
    reason: str
    escalated_from: RepairAction | None = None
    wait_deadline: datetime | None = None
    """When approved: when the wait for an idle node ends (None: never)."""
    trace: tuple[tuple[str, str], ...] = ()
    """(rule id, reason) of every step that decided something, in order, for the audit trail."""
    unmapped: tuple[str, ...] = ()
    """Firing alert keys on the node with no action mapping (listed, never dropped)."""

    @property
    def state(self) -> RepairState:
        return self.approval.state

    @property
    def approved_by(self) -> str | None:
        return self.approval.approved_by

    @property
    def rule(self) -> str:
        """The approval rule id the repair row and the trail record (``auto:xid:79`` ...)."""
        return self.approval.id


@dataclass(frozen=True, slots=True)
class Skip:
    """No repair now, and why."""

    rule: RepairRule
    reason: str
    retry_at: datetime | None = None
    """When the answer may change by time alone (persistence reached, cooldown over)."""
    alert_keys: tuple[str, ...] = ()
    unmapped: tuple[str, ...] = ()
    trace: tuple[tuple[str, str], ...] = field(default=())


def _executable(
    action: RepairAction,
    executable: frozenset[RepairAction] | None,
    trace: list[tuple[str, str]],
    note: str,
) -> tuple[RepairAction, str]:
    """A GPU reset this cluster cannot do becomes a reboot, which resets every GPU too."""
    if executable is None or action in executable:
        return action, note
    if action is RepairAction.RESET_GPU and RepairAction.REBOOT in executable:
        why = (
            "this cluster has no executor for reset_gpu (repair.reset_gpu_command): "
            "a reboot resets every GPU of the node"
        )
        trace.append((RepairRule.EXECUTOR, why))
        return RepairAction.REBOOT, f"{note}; {why}"
    return action, note


def open_repair(repairs: Iterable[Repair], cluster: ClusterName, node: NodeName) -> Skip | None:
    """An ``open-repair`` skip when ``node`` already has an unfinished repair among ``repairs``."""
    for r in repairs:
        if r.cluster == cluster and r.node == node and not r.state.is_terminal:
            reason = f"repair {r.id} ({r.action}, {r.state}) is open on {node}"
            return Skip(RepairRule.OPEN_REPAIR, reason)
    return None


@dataclass(frozen=True, slots=True)
class _Candidate:
    alert: Alert
    action: RepairAction
    escalated_from: RepairAction | None
    why: str


_SEVERITY_ORDER = {"critical": 0, "error": 1, "warning": 2, "info": 3}


def _pick(candidates: Sequence[_Candidate]) -> _Candidate:
    """The heaviest action; ties: the most severe alert, then the earliest seen, then the key."""

    def order(c: _Candidate) -> tuple[int, int, str, str]:
        seen = c.alert.first_seen.isoformat() if c.alert.first_seen else "~"
        return (-weight(c.action), _SEVERITY_ORDER.get(c.alert.severity, 9), seen, c.alert.key)

    return min(candidates, key=order)


def _persistent(
    firing: Sequence[Alert], policy: RepairPolicy, now: datetime
) -> tuple[list[tuple[Alert, RepairAction]], Skip | None, str]:
    """The firing alerts that map to an action and held long enough, or why there are none."""
    keys = tuple(a.key for a in firing)
    mapped = [(a, action) for a in firing if (action := effective_action(a)) is not None]
    unmapped = tuple(a.key for a in firing if effective_action(a) is None)
    if not mapped:
        reason = f"no action maps to {', '.join(unmapped)} (listed for a person)"
        return [], Skip(RepairRule.UNMAPPED, reason, alert_keys=keys, unmapped=unmapped), ""
    checks = [(a, action, is_persistent(a, policy, now)) for a, action in mapped]
    reason = "; ".join(c.reason for *_, c in checks)
    held = [(a, action) for a, action, check in checks if check]
    if not held:
        retry = min((c.retry_at for *_, c in checks if c.retry_at), default=None)
        return [], Skip(RepairRule.PERSISTENCE, reason, retry, keys, unmapped), reason
    return held, None, reason


def recommend(
    alerts_firing_on_node: Sequence[Alert],
    node: NodeName,
    history: Sequence[Repair],
    policy: RepairPolicy,
    breaker: Breaker,
    cluster_nodes: int,
    active_repairs: Sequence[Repair],
    node_pools: Mapping[NodeName, str],
    now: datetime,
    *,
    past_alerts: Sequence[Alert] = (),
    executable: frozenset[RepairAction] | None = None,
) -> Recommendation | Skip:
    """medic's recommendation for ``node`` of ``breaker.cluster`` (see the module docstring).

    ``alerts_firing_on_node``: the node's firing alerts (others are ignored); ``history``: the
    node's repairs, any state and age; ``active_repairs``: the cluster's unfinished repairs;
    ``past_alerts``: the node's resolved alerts, for the migration evidence gate (10 days);
    ``executable``: the actions this cluster can carry out (None: all), see ``executor``.
    """
    cluster = breaker.cluster
    firing = [
        a
        for a in alerts_firing_on_node
        if a.state is AlertState.FIRING and a.node == node and a.cluster == cluster
    ]
    if not firing:
        return Skip(RepairRule.NO_ALERT, f"no alert firing on {node}")
    keys = tuple(a.key for a in firing)
    unmapped = tuple(a.key for a in firing if effective_action(a) is None)
    blocked = open_repair([*history, *active_repairs], cluster, node)
    if blocked is not None:
        return replace(blocked, alert_keys=keys, unmapped=unmapped)
    held, skip, persistence = _persistent(firing, policy, now)
    if skip is not None:
        return skip
    cooling = in_cooldown(node, [r for r in history if r.cluster == cluster], policy, now)
    if cooling:
        return Skip(RepairRule.COOLDOWN, cooling.reason, cooling.retry_at, keys, unmapped)
    trace: list[tuple[str, str]] = [(RepairRule.PERSISTENCE, persistence)]
    candidates = []
    for a, mapped in held:
        up = escalate(
            mapped, history, cluster=cluster, node=node, alert_key=a.key, xid=alert_xid(a), now=now
        )
        candidates.append(_Candidate(a, up.action, up.escalated_from, up.reason))
    chosen = _pick(candidates)
    if chosen.escalated_from is not None:
        trace.append((RepairRule.ESCALATION, chosen.why))
    action, note = apply_migration_gate(chosen.action, [*firing, *past_alerts], now, trace)
    action, note = _executable(action, executable, trace, note)
    # the gate can bring a climb back to where it started: then it did not escalate
    escalated_from = chosen.escalated_from if chosen.escalated_from is not action else None
    answered = tuple(c.alert.key for c in candidates)
    reason = f"{action} for {', '.join(answered)} on {node}: {chosen.alert.summary}"
    if chosen.escalated_from is not None:
        reason += f"; {chosen.why}"
    reason += note
    request = RepairRequest(
        cluster=cluster,
        node=node,
        action=action,
        requested_by=MEDIC_REQUESTER,
        requester_kind=RequesterKind.MEDIC,
        reason=reason,
        alert_keys=answered,
        xid=alert_xid(chosen.alert),
    )
    approval = approve(request, policy, escalated_from=escalated_from, breaker=breaker)
    trace.append((approval.id, approval_text(approval)))
    if approval.state is RepairState.APPROVED:
        budget = within_budget(cluster_nodes, active_repairs, node_pools, node, policy)
        if not budget:
            trace.append((RepairRule.BUDGET, budget.reason))
            why = f"{reason}; waits for the budget: {budget.reason}"
            return Skip(RepairRule.BUDGET, why, None, keys, unmapped, tuple(trace))
    evidence: dict[str, object] = {"trace": [list(t) for t in trace]}
    if escalated_from is not None:
        evidence["escalated_from"] = str(escalated_from)
    request = replace(request, evidence=evidence)
    return Recommendation(
        request=request,
        approval=approval,
        reason=f"{reason}; {approval_text(approval)}",
        escalated_from=escalated_from,
        wait_deadline=deadline(now, policy) if approval.state is RepairState.APPROVED else None,
        trace=tuple(trace),
        unmapped=unmapped,
    )
