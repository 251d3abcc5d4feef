"""Admission of a detector's or a person's own repair request: admitted (with its approval) or
refused, and why.

:func:`admit` chains, first stop wins: the ``evidence`` gate (an alert the request names firing on
its node), the ``detector-cap`` (a detector's requests per hour), ``open-repair`` (one repair per
node at a time), the ``migration-gate`` (a migrate without critical evidence becomes a
reprovision), then approval (:func:`.approval.approve`). A detector's request is approved by
``auto`` (never as a person) only when the policy trusts the detector (``auto:detector:<name>``;
a name from a Slurm drain reason or comment only with ``trust_scheduler_requests``); otherwise it
waits for a person (``detector-untrusted``, ``detector-unauthenticated``); a person's request
answers ``user-request``, and the intake (``medic.repair.admission``) then has it wait for
another person's approval unless the policy would approve the same repair automatically. Removal
is never automatic (``remove-human-only``).

medic's own recommendations take :func:`medic.repair.rules.recommend.recommend` instead; both answer
with a :class:`~medic.repair.rules.recommend.Recommendation` or a
:class:`~medic.repair.rules.recommend.Skip`.

Pure: no I/O, no clock reads (``now`` is an argument).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import (
    Alert,
    Breaker,
    Repair,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequesterKind,
)
from medic.repair.rules.approval import approval_text, approve
from medic.repair.rules.guards import (
    detector_cap_reached,
    has_evidence,
)
from medic.repair.rules.ladder import apply_migration_gate
from medic.repair.rules.recommend import Recommendation, Skip, open_repair
from medic.repair.rules.waiting import deadline

__all__ = ["admit"]


def admit(
    request: RepairRequest,
    firing_alerts: Sequence[Alert],
    open_repairs: Sequence[Repair],
    recent_repairs: Sequence[Repair],
    policy: RepairPolicy,
    breaker: Breaker,
    now: datetime,
    *,
    past_alerts: Sequence[Alert] = (),
) -> Recommendation | Skip:
    """A detector's or a person's own request: admitted (with its approval) or refused, and why.

    ``firing_alerts``: the node's alerts (a detector's own alert recorded first);
    ``open_repairs``: the cluster's unfinished repairs; ``recent_repairs``: the cluster's repairs
    of the last hour at least (detector cap); ``past_alerts``: the node's resolved alerts. The
    concurrency budget applies when the repair is about to start; the caller refuses a request
    answered with a :class:`Skip`.
    """
    keys = request.alert_keys
    evidence = has_evidence(request, firing_alerts)
    trace: list[tuple[str, str]] = [(RepairRule.EVIDENCE, evidence.reason)]
    if not evidence:
        return Skip(RepairRule.EVIDENCE, evidence.reason, alert_keys=keys, trace=tuple(trace))
    if request.requester_kind is RequesterKind.DETECTOR:
        cap = detector_cap_reached(recent_repairs, policy, now)
        if cap:
            return Skip(RepairRule.DETECTOR_CAP, cap.reason, alert_keys=keys, trace=tuple(trace))
    blocked = open_repair(open_repairs, request.cluster, request.node)
    if blocked is not None:
        return replace(blocked, alert_keys=keys, trace=tuple(trace))
    on_node = [a for a in [*firing_alerts, *past_alerts] if a.node == request.node]
    action, note = apply_migration_gate(request.action, on_node, now, trace)
    if action is not request.action:
        request = replace(request, action=action, reason=f"{request.reason}{note}")
    approval = approve(request, policy, breaker=breaker)
    trace.append((approval.id, approval_text(approval)))
    reason = f"{request.action} on {request.node} for {request.requested_by}: {request.reason}"
    return Recommendation(
        request=request,
        approval=approval,
        reason=f"{reason}; {approval_text(approval)}",
        wait_deadline=deadline(now, policy) if approval.state is RepairState.APPROVED else None,
        trace=tuple(trace),
    )
