"""Repair intake: a detector's or a person's own repair request, and a malformed one.

Library functions shared by the repair API (``medic.api.repairs``) and the Slurm path
(``medic-request:`` drain reasons, read by the repair engine each pass). Every function takes the
store and ``now``; none reads a clock or keeps state, so the API, the engine and several replicas
can call them at once: the store's idempotency key and compare-and-set transitions are the only
arbiters.

**Submission** (:func:`submit_repair`), first stop wins:

1. identity: a request is a detector's or a person's (medic's own recommendations come from
   :func:`medic.repair.rules.recommend.recommend`, never through here); a detector names a request
   id and never asks for removal (human-only);
2. idempotency: (requested_by, request_id) names one repair across the cluster, finished ones
   included: a repeat returns that repair (``created`` False), never a second one, so a detector
   that keeps reporting the same fault never repairs the node twice;
3. to 6. admission (:mod:`medic.repair.admission`): a detector's own failed check is recorded
   as a firing alert and named as the request's evidence (medic never repairs the node on that
   alert by itself); :func:`medic.repair.rules.admission.admit` (evidence gate, detector cap, one
   open repair per node, migration gate); no detector's request in its node's cooldown; then the
   policy decides (:mod:`medic.repair.rules.approval`): a detector it trusts by name
   (``trusted_detectors``, rule ``auto:detector:<name>``) is approved automatically and must fit
   now (breaker closed, within the concurrency budget); any other detector's request waits for a
   person (``detector-untrusted``: every detector's by default); a person's request waits for
   approval (``approval-required``) unless the policy approves its action class or Xid
   automatically (``auto:...``, breaker closed); removal always waits.

**Who is trusted.** Through the API the requester is the API token's principal
(:attr:`~medic.domain.repairs.RequestChannel.API`): authenticated, so the policy's trust in its
name applies. A ``detector=<name>`` in a Slurm drain reason or node comment
(:attr:`~medic.domain.repairs.RequestChannel.SCHEDULER`, also the default of a request that does
not say) is not authenticated: anyone Slurm lets drain a node or set its comment can write any
name, a trusted detector's included. So such a request waits for a person
(``detector-unauthenticated``) even when the name is trusted, unless the policy explicitly
trusts the scheduler channel (``trust_scheduler_requests``, off by default: for sites where only
the detectors themselves may run ``scontrol update``). The channel is in the audit payload.

A refusal raises a precise error (:mod:`medic.repair.actors`) and is audited
(``repair-request-refused``, with its rule): :class:`~medic.repair.actors.GuardrailRefused` (a
:class:`~medic.errors.SafetyBudgetExceeded`: budget, detector cap, cooldown, breaker),
:class:`~medic.repair.actors.EvidenceRequired` (a :class:`~medic.errors.PolicyViolation`),
:class:`~medic.repair.actors.RepairInProgress` (a :class:`~medic.errors.ConflictError`: the node
has an open repair), ``PolicyViolation`` (identity) or ``InputError`` (malformed). Nothing is
dropped silently.

A malformed request (a ``medic-request:`` drain reason the Slurm parser refused) is audited once
per hour and message by :func:`record_invalid_request` (``repair-request-invalid``); the node is
left alone.

People's decisions on repairs are in :mod:`medic.repair.decisions`, the repair policy and
the breaker reset in :mod:`medic.repair.policy_changes`. Audit events are written as
``medic-engine`` (the intake decides); the requester is in the payload
(``requested_by``/``requester_kind``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from medic.domain.audit import AuditKind
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import Repair, RepairRequest, RequesterKind
from medic.errors import InputError, PolicyViolation
from medic.ports import RepairStore
from medic.repair.actors import (
    Actor,
    GuardrailRefused,
    IdentityViolation,
    RepairInProgress,
)
from medic.repair.admission import decide
from medic.repair.intake_common import HOUR, IntakeStore, audit_event, seen_recently

__all__ = [
    "record_invalid_request",
    "submit_repair",
]

"""A request id seen before: the existing repair is returned."""


def submit_repair(
    store: IntakeStore,
    request: RepairRequest,
    now: datetime,
    *,
    cluster_nodes: int,
    node_pools: Mapping[NodeName, str],
    dedupe_window: timedelta | None = None,
) -> tuple[Repair, bool, str]:
    """Admit a detector's or a person's request: (repair, created, rule). See the module
    docstring for the order of the checks and the errors of a refusal.

    ``cluster_nodes`` and ``node_pools`` size the concurrency budget
    (:func:`medic.repair.intake_common.node_pools`).
    ``dedupe_window``: a repeat (same repair and state) or a refusal (same rule) of a request
    audited within the window is not audited again (the engine re-reads a Slurm drain reason
    every pass); None audits every submission (the API).
    """
    try:
        _check_identity(request)
        existing = _find(store, request)
        if existing is not None:
            return _repeat(store, request, existing, now, dedupe_window)
        decision = decide(store, request, now, cluster_nodes, node_pools)
    except (GuardrailRefused, RepairInProgress) as exc:
        # A concurrent twin may have created the repair that now blocks this one: same request.
        existing = _find(store, request)
        if existing is not None:
            return _repeat(store, request, existing, now, dedupe_window)
        _refused(store, request, exc, now, dedupe_window)
        raise
    except (PolicyViolation, InputError) as exc:
        _refused(store, request, exc, now, dedupe_window)
        raise
    evidence = {**decision.request.evidence, "trace": [list(t) for t in decision.trace]}
    repair, created = store.create_repair(
        replace(decision.request, evidence=evidence),
        state=decision.approval.state,
        now=now,
        approved_by=decision.approval.approved_by,
        rule=decision.approval.id,
    )
    if not created:  # a concurrent writer inserted the same request id first: theirs stands
        return _repeat(store, request, repair, now, dedupe_window)
    payload = {
        **_request_payload(request),
        "repair_id": repair.id,
        "action": repair.action.value,
        "state": repair.state.value,
        "rule": decision.approval.id,
        "approved_by": decision.approval.approved_by,
        "decision": decision.reason,
        "trace": [list(t) for t in decision.trace],
    }
    store.append_audit(
        audit_event(
            AuditKind.REPAIR_REQUESTED, now, request.cluster, request.node, payload, repair.action
        )
    )
    return repair, True, decision.approval.id


def _check_identity(request: RepairRequest) -> None:
    kind = request.requester_kind
    if kind is RequesterKind.MEDIC:
        raise IdentityViolation(
            RepairRule.IDENTITY,
            "medic's own recommendations come from its policy; a request is a detector's or a "
            "person's",
        )
    Actor.parse(request.requested_by, kind)  # a valid, non-reserved name of that kind
    if kind is RequesterKind.DETECTOR:
        if not request.request_id:
            raise InputError(
                "request_id",
                f"detector {request.requested_by} must name a request id: a repeated request "
                "must never repair the node twice",
            )
        if request.action.human_only:
            raise IdentityViolation(
                RepairRule.REMOVE_HUMAN_ONLY,
                f"detector {request.requested_by} asked to {request.action.value} "
                f"{request.node}: removal is a person's decision, never a detector's",
            )


def _find(store: RepairStore, request: RepairRequest) -> Repair | None:
    """The repair the request id already names, on any node (checked before anything is
    recorded: a request id reused for another node is refused without a trace on that node)."""
    if not request.request_id:
        return None
    return store.find_repair(request.cluster, request.requested_by, request.request_id)


def _repeat(
    store: IntakeStore,
    request: RepairRequest,
    existing: Repair,
    now: datetime,
    window: timedelta | None,
) -> tuple[Repair, bool, str]:
    if existing.node != request.node:
        error = InputError(
            "request_id",
            f"{request.requested_by}'s request id {request.request_id!r} already names repair "
            f"{existing.id} of {existing.node}, not {request.node}: use a new request id",
        )
        _refused(store, request, error, now, window)
        raise error
    payload = {
        **_request_payload(request),
        "repair_id": existing.id,
        "state": existing.state.value,
        "rule": RepairRule.REPEAT,
    }
    event = audit_event(
        AuditKind.REPAIR_REQUEST_REPEATED,
        now,
        request.cluster,
        request.node,
        payload,
        existing.action,
    )
    if not seen_recently(
        store, event, window, ("request_id", "requested_by", "repair_id", "state")
    ):
        store.append_audit(event)
    return existing, False, RepairRule.REPEAT


def _refused(
    store: IntakeStore,
    request: RepairRequest,
    error: Exception,
    now: datetime,
    window: timedelta | None,
) -> None:
    rule = getattr(
        error, "rule", RepairRule.INVALID if isinstance(error, InputError) else "refused"
    )
    payload = {**_request_payload(request), "rule": rule, "error": str(error)}
    event = audit_event(
        AuditKind.REPAIR_REQUEST_REFUSED,
        now,
        request.cluster,
        request.node,
        payload,
        request.action,
    )
    if not seen_recently(store, event, window, ("request_id", "requested_by", "rule")):
        store.append_audit(event)


def _request_payload(request: RepairRequest) -> dict[str, Any]:
    return {
        "request_id": request.request_id,
        "requested_by": request.requested_by,
        "requester_kind": request.requester_kind.value,
        "channel": request.channel.value,
        "requested_action": request.action.value,
        "alert_keys": list(request.alert_keys),
        "reason": request.reason,
    }


# --- the Slurm path ------------------------------------------------------------------------------
def record_invalid_request(
    store: IntakeStore,
    cluster: ClusterName,
    node: NodeName,
    error: InputError,
    now: datetime,
    *,
    dedupe_window: timedelta | None = HOUR,
) -> bool:
    """Audit a malformed request (a ``medic-request:`` drain reason the parser refused) once per
    ``dedupe_window`` and message; the node is left alone. True when an event was written."""
    payload = {"error": str(error), "where": error.where, "rule": RepairRule.INVALID}
    event = audit_event(AuditKind.REPAIR_REQUEST_INVALID, now, cluster, node, payload)
    if seen_recently(store, event, dedupe_window, ("error",)):
        return False
    store.append_audit(event)
    return True
