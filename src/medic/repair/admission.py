"""Whether a detector's or a person's new repair request is admitted now, and in which state.

Steps 3 to 6 of :func:`medic.repair.intake.submit_repair` (the intake has checked who asks and
that the request is new):

- a detector's own failed check is recorded as a firing alert (source ``detector``, key
  ``detector:<name>:<check or action>``) and named as the request's evidence; the alert maps to no
  action, so medic never repairs the node on it by itself;
- :func:`medic.repair.rules.admission.admit`: evidence gate, detector cap, one open repair per node,
  migration gate;
- a detector's request is never admitted in its node's cooldown. The policy trusts the detector
  (:func:`medic.repair.rules.approval.approve`: ``trusted_detectors``; a name from a Slurm drain
  reason or comment only with ``trust_scheduler_requests``): approved automatically, so it must fit
  now (breaker closed, within the concurrency budget). Otherwise it waits for a person like a
  person's request (the budget is checked when it is about to start, the breaker does not stop
  a person's approval);
- a person's request waits for approval unless the policy approves its action class or Xid
  automatically (breaker closed); removal always waits.

A refusal raises :class:`~medic.repair.actors.GuardrailRefused`,
:class:`~medic.repair.actors.EvidenceRequired` or :class:`~medic.repair.actors.RepairInProgress`;
the intake audits it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from medic.domain.diagnosis import Severity
from medic.domain.ids import NodeName
from medic.domain.repair_rules import Approval, RepairRule
from medic.domain.repairs import (
    OPEN_STATES,
    Alert,
    AlertSource,
    AlertState,
    Breaker,
    Repair,
    RepairPolicy,
    RepairRequest,
    RequesterKind,
)
from medic.errors import InputError
from medic.ports import RepairStore
from medic.repair.actors import EvidenceRequired, GuardrailRefused, RepairInProgress
from medic.repair.intake_common import HOUR, IntakeStore, detector_alert_key
from medic.repair.rules.admission import admit
from medic.repair.rules.approval import (
    approval_text,
    approve,
)
from medic.repair.rules.guards import (
    in_cooldown,
    within_budget,
)
from medic.repair.rules.recommend import Recommendation, Skip

__all__ = ["Decision", "decide"]

_WAITS_FOR_A_PERSON = frozenset(
    {RepairRule.DETECTOR_UNTRUSTED, RepairRule.DETECTOR_UNAUTHENTICATED}
)
"""The rules under which a detector's request waits for a person (the policy does not trust it)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """How a new request is created: in which state, approved by whom, under which rule."""

    request: RepairRequest
    approval: Approval
    reason: str
    trace: tuple[tuple[str, str], ...]


def _record_detector_alert(store: RepairStore, request: RepairRequest, now: datetime) -> str:
    refs = {k: v for k, v in request.evidence.items() if k not in ("check", "severity")}
    check = request.evidence.get("check")
    check = check if isinstance(check, str) and check.strip() else request.action.value
    try:
        severity = Severity(str(request.evidence.get("severity", Severity.ERROR.value)))
    except ValueError as exc:
        raise InputError("severity", f"unknown severity {request.evidence['severity']!r}") from exc
    key = detector_alert_key(request.requested_by, check)
    alert = Alert(
        cluster=request.cluster,
        node=request.node,
        key=key,
        source=AlertSource.DETECTOR,
        summary=f"{request.requested_by}: {check} failed; asks for {request.action.value}"[:200],
        description=request.reason,
        severity=severity,
        # No xid, node_action or recovery_action here: the alert maps to no action, so medic
        # never repairs on it by itself (the detector's request is the repair).
        evidence={
            "request_id": request.request_id,
            "requested_action": request.action.value,
            "check": check,
            "refs": refs,
        },
        detector=request.requested_by,
        mapped_action=None,
        xid=None,
    )
    store.upsert_alert(alert, now)
    return key


def decide(
    store: IntakeStore,
    request: RepairRequest,
    now: datetime,
    cluster_nodes: int,
    pools: Mapping[NodeName, str],
) -> Decision:
    """Admit ``request`` now (see the module docstring), or raise why not."""
    detector = request.requester_kind is RequesterKind.DETECTOR
    if detector:
        key = _record_detector_alert(store, request, now)
        if key not in request.alert_keys:
            request = replace(request, alert_keys=(*request.alert_keys, key))
    cluster, node = request.cluster, request.node
    policy = store.get_repair_policy(cluster)
    breaker = store.get_breaker(cluster)
    on_node = store.list_alerts(cluster=cluster, node=node)
    firing = [a for a in on_node if a.state is AlertState.FIRING]
    past = [a for a in on_node if a.state is not AlertState.FIRING]
    open_repairs = store.list_repairs(cluster=cluster, states=OPEN_STATES)
    recent = store.list_repairs(cluster=cluster, since=now - HOUR)
    answer = admit(request, firing, open_repairs, recent, policy, breaker, now, past_alerts=past)
    if isinstance(answer, Skip):
        if answer.rule == RepairRule.EVIDENCE:
            raise EvidenceRequired(answer.reason)
        if answer.rule == RepairRule.OPEN_REPAIR:
            raise RepairInProgress(answer.reason)
        raise GuardrailRefused(answer.rule, answer.reason)
    if detector:
        return _detector_decision(
            store, answer, policy, breaker, cluster_nodes, open_repairs, pools, now
        )
    return _person_decision(answer, policy, breaker)


def _detector_decision(
    store: RepairStore,
    answer: Recommendation,
    policy: RepairPolicy,
    breaker: Breaker,
    cluster_nodes: int,
    open_repairs: Sequence[Repair],
    pools: Mapping[NodeName, str],
    now: datetime,
) -> Decision:
    request = answer.request
    trace = list(answer.trace)
    history = store.list_repairs(cluster=request.cluster, node=request.node)
    cooling = in_cooldown(request.node, history, policy, now)
    if cooling:
        raise GuardrailRefused(RepairRule.COOLDOWN, cooling.reason)
    trace.append((RepairRule.COOLDOWN, cooling.reason))
    if answer.approval.rule in _WAITS_FOR_A_PERSON:
        # Not automatic: a person approves it later, and the budget is checked before it starts.
        return Decision(request, answer.approval, answer.reason, tuple(trace))
    if answer.approval.rule is RepairRule.BREAKER_TRIPPED or breaker.tripped:
        since = f" at {breaker.tripped_at.isoformat()}" if breaker.tripped_at else ""
        why = f": {breaker.reason}" if breaker.reason else ""
        raise GuardrailRefused(
            RepairRule.BREAKER_TRIPPED,
            f"the circuit breaker of {request.cluster} tripped{since}{why}; automatic repair "
            "is paused until an operator resets it",
        )
    budget = within_budget(cluster_nodes, open_repairs, pools, request.node, policy)
    if not budget:
        raise GuardrailRefused(RepairRule.BUDGET, budget.reason)
    trace.append((RepairRule.BUDGET, budget.reason))
    return Decision(request, answer.approval, answer.reason, tuple(trace))


def _person_decision(answer: Recommendation, policy: RepairPolicy, breaker: Breaker) -> Decision:
    """A person's request waits for approval unless the policy would approve the same repair
    automatically (its action class or Xid; breaker closed); removal always waits."""
    request = answer.request
    as_policy = replace(request, requester_kind=RequesterKind.MEDIC)
    approval = approve(as_policy, policy, breaker=breaker)
    trace = [t for t in answer.trace if t[0] != answer.rule]
    trace.append((approval.id, approval_text(approval)))
    reason = (
        f"{request.action} on {request.node} for {request.requested_by}: {request.reason}; "
        f"{approval_text(approval)}"
    )
    return Decision(request, approval, reason, tuple(trace))
