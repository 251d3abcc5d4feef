"""Repair intake: a detector's or a person's own repair request, and people's decisions on repairs.

Library functions shared by the repair API (``medic.api.repairs``) and the Slurm path
(``medic-request:`` drain reasons, read by the repair engine each pass). Every function takes the
store and ``now``; none reads a clock or keeps state, so the API, the engine and several replicas
can call them at once: the store's idempotency key and compare-and-set transitions are the only
arbiters.

**Submission** (:func:`submit_repair`), first stop wins:

1. identity: a request is a detector's or a person's (medic's own recommendations come from
   :func:`medic.policy.repair.recommend`, never through here); a detector names a request id and
   never asks for removal (human-only);
2. idempotency: (requested_by, request_id) names one repair across the cluster, finished ones
   included: a repeat returns that repair (``created`` False), never a second one, so a detector
   that keeps reporting the same fault never repairs the node twice;
3. a detector's own failed check is recorded as a firing alert (source ``detector``, key
   ``detector:<name>:<check or action>``, the request's evidence refs) and named as the request's
   evidence. The alert maps to no action: the detector's request is the repair, and medic never
   repairs the node again on that alert by itself;
4. :func:`medic.policy.repair.admit`: evidence gate (a named alert firing on the node), detector
   cap, one open repair per node, migration gate;
5. a detector's request skips the approval queue (``detector-request``) but must fit now: not in
   cooldown, breaker closed, within the concurrency budget;
6. a person's request waits for approval (``approval-required``) unless the policy approves its
   action class or Xid automatically (``auto:...``, breaker closed); removal always waits.

A refusal raises a precise error and is audited (``repair-request-refused``, with its rule):
:class:`GuardrailRefused` (a :class:`~medic.errors.SafetyBudgetExceeded`: budget, detector cap,
cooldown, breaker), :class:`EvidenceRequired` (a :class:`~medic.errors.PolicyViolation`),
:class:`RepairInProgress` (a :class:`~medic.errors.ConflictError`: the node has an open repair),
``PolicyViolation`` (identity) or ``InputError`` (malformed). Nothing is dropped silently.

**Decisions** (:func:`approve_repair`, :func:`reject_repair`, :func:`cancel_repair`,
:func:`change_action`, :func:`put_policy`, :func:`reset_breaker`) are a person's: an
:class:`Actor` of kind detector gets ``PolicyViolation``. Each is a compare-and-set, audited with
who, when and the rule.

Audit events are written as ``medic-engine`` (the intake decides); the requester or the person is
in the payload (``requested_by``/``requester_kind``, ``by``).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Node
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    TERMINAL_STATES,
    TRANSITIONS,
    Alert,
    AlertSource,
    AlertState,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RepairUpdate,
    RequesterKind,
)
from medic.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    PolicyViolation,
    SafetyBudgetExceeded,
)
from medic.policy.guards import (
    AUTO_APPROVER,
    RULE_BUDGET,
    RULE_COOLDOWN,
    RULE_EVIDENCE,
    in_cooldown,
    within_budget,
)
from medic.policy.ladder import gate_migration
from medic.policy.repair import (
    MEDIC_REQUESTER,
    RULE_BREAKER_TRIPPED,
    RULE_OPEN_REPAIR,
    RULE_REMOVE_HUMAN_ONLY,
    Recommendation,
    Skip,
    admit,
    approval_text,
    approve,
    deadline,
)
from medic.policy.waiting import MAX_WAIT_CAP_SECONDS
from medic.policy.xid_classes import XID_CLASSES
from medic.ports import AuditQuery, RepairStore

__all__ = [
    "ENGINE_ACTOR",
    "RULE_INVALID",
    "RULE_REPEAT",
    "Actor",
    "EvidenceRequired",
    "GuardrailRefused",
    "IntakeStore",
    "RepairInProgress",
    "approve_repair",
    "cancel_repair",
    "change_action",
    "check_policy",
    "detector_alert_key",
    "node_pools",
    "put_policy",
    "record_invalid_request",
    "reject_repair",
    "reset_breaker",
    "submit_repair",
]

ENGINE_ACTOR = "medic-engine"
RULE_REPEAT = "idempotent-repeat"
"""A request id seen before: the existing repair is returned."""
RULE_INVALID = "invalid-request"
RULE_IDENTITY = "identity"
RULE_MANUAL_APPROVAL = "manual-approval"
RULE_MANUAL_REJECTION = "manual-rejection"
RULE_MANUAL_CANCELLATION = "manual-cancellation"
RULE_MANUAL_ACTION = "manual-action"
RULE_MANUAL_POLICY = "manual-policy"
RULE_MANUAL_RESET = "manual-breaker-reset"

RESERVED_NAMES = frozenset({AUTO_APPROVER, MEDIC_REQUESTER})
"""Names only medic itself acts under (``auto`` approves by policy, ``medic`` recommends)."""
_NAME = re.compile(r"^[A-Za-z0-9][\w.:@+-]{0,127}$")
_KEY_UNSAFE = re.compile(r"[^a-z0-9_.:-]+")
_PREFIXES = {"user:": RequesterKind.USER, "detector:": RequesterKind.DETECTOR}
_AGENT_PREFIX = "agent:"
_HOUR = timedelta(hours=1)
_OPEN = frozenset(RepairState) - TERMINAL_STATES
_DAY = 86_400.0
_RETRIES = 3


class IntakeStore(RepairStore, AuditQuery, Protocol):
    """What intake needs: the repair store and the audit trail (``SqlStore`` is both)."""

    def append_audit(self, event: AuditEvent) -> int: ...


# --- refusals ------------------------------------------------------------------------------------
class GuardrailRefused(SafetyBudgetExceeded):
    """A guardrail refused the request now (budget, detector cap, cooldown, breaker)."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(f"{rule}: {reason}")
        self.rule = rule
        self.reason = reason


class EvidenceRequired(PolicyViolation):
    """No alert the request names is firing on its node: no repair without a failed check."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{RULE_EVIDENCE}: {reason}")
        self.rule = RULE_EVIDENCE
        self.reason = reason


class RepairInProgress(ConflictError):
    """The node already has an unfinished repair (one repair per node at a time)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{RULE_OPEN_REPAIR}: {reason}")
        self.rule = RULE_OPEN_REPAIR
        self.reason = reason


class _IdentityViolation(PolicyViolation):
    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


# --- actors --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a person (``user:NAME``) or a detector (``detector:NAME``; a node agent's
    ``agent:NODE`` name is a detector too)."""

    name: str
    kind: RequesterKind

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}"

    @classmethod
    def parse(cls, text: str, kind: RequesterKind | None = None) -> Actor:
        """``user:alice``, ``detector:nvsentinel``, ``agent:node7`` or a bare name (of ``kind``,
        a person by default). ``InputError`` for a malformed name or a prefix contradicting
        ``kind``; ``PolicyViolation`` for medic's own names or kind."""
        text = text.strip()
        found: RequesterKind | None = None
        name = text
        for prefix, prefixed in _PREFIXES.items():
            if text.startswith(prefix):
                found, name = prefixed, text.removeprefix(prefix)
        if found is None and text.startswith(_AGENT_PREFIX):
            found = RequesterKind.DETECTOR  # the node agent keeps its agent: name
        if found is not None and kind is not None and found is not kind:
            raise InputError("actor", f"{text!r} names a {found.value}, not a {kind.value}")
        resolved = found or kind or RequesterKind.USER
        if resolved is RequesterKind.MEDIC:
            raise _IdentityViolation(RULE_IDENTITY, "only medic's own policy acts as medic")
        if not _NAME.match(name):
            raise InputError(
                "actor",
                f"{name!r} is not a valid name (letters, digits and _.:@+-, at most 128, "
                "starting with a letter or digit)",
            )
        if name in RESERVED_NAMES:
            raise _IdentityViolation(
                RULE_IDENTITY, f"{name!r} is medic's own name: a person or detector cannot use it"
            )
        return cls(name, resolved)


def _person(actor: Actor | str, verb: str) -> Actor:
    who = actor if isinstance(actor, Actor) else Actor.parse(actor)
    if who.kind is not RequesterKind.USER:
        raise _IdentityViolation(
            RULE_IDENTITY,
            f"{who} is a detector: only a person may {verb} (detectors never act as people)",
        )
    return who


# --- helpers -------------------------------------------------------------------------------------
def node_pools(nodes: Iterable[Node]) -> dict[NodeName, str]:
    """Each node's pool for the concurrency budget: its first partition (nodes without one have
    no pool limit). The engine uses the same, so the API and the engine count alike."""
    return {n.name: n.partitions[0] for n in nodes if n.partitions}


def detector_alert_key(detector: str, check: str) -> str:
    """``detector:<name>:<check>`` in the alert-key alphabet (lowercase, ``[a-z0-9_.:-]``)."""
    slug = _KEY_UNSAFE.sub("_", f"detector:{detector}:{check}".lower())
    return slug[:128]


def _event(
    kind: AuditKind,
    now: datetime,
    cluster: ClusterName,
    node: NodeName | None,
    payload: dict[str, Any],
    action: RepairAction | None = None,
) -> AuditEvent:
    return AuditEvent(
        time=now,
        actor=ENGINE_ACTOR,
        kind=kind,
        subject_type=SubjectType.NODE if node is not None else SubjectType.CLUSTER,
        subject_id=node if node is not None else cluster,
        cluster=cluster,
        action=action.value if action is not None else None,
        payload=payload,
    )


def _seen(
    store: IntakeStore,
    event: AuditEvent,
    window: timedelta | None,
    same: Sequence[str],
) -> bool:
    """True when an event of the same kind and subject with the same ``same`` payload fields was
    written within ``window`` (None: never deduplicate)."""
    if window is None:
        return False
    earlier = store.query_audit(
        cluster=ClusterName(event.cluster) if event.cluster else None,
        subject_type=event.subject_type.value,
        subject_id=event.subject_id,
        kind=event.kind,
        since=event.time - window,
        limit=1000,
    )
    return any(all(e.payload.get(f) == event.payload.get(f) for f in same) for e in earlier)


def _request_payload(request: RepairRequest) -> dict[str, Any]:
    return {
        "request_id": request.request_id,
        "requested_by": request.requested_by,
        "requester_kind": request.requester_kind.value,
        "requested_action": request.action.value,
        "alert_keys": list(request.alert_keys),
        "reason": request.reason,
    }


def _get(store: RepairStore, repair_id: int) -> Repair:
    repair = store.get_repair(repair_id)
    if repair is None:
        raise NotFoundError(f"repair {repair_id} does not exist; list them at /api/v1/repairs")
    return repair


# --- submission ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Decision:
    request: RepairRequest
    state: RepairState
    approved_by: str | None
    rule: str
    reason: str
    trace: tuple[tuple[str, str], ...]


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

    ``cluster_nodes`` and ``node_pools`` size the concurrency budget (:func:`node_pools`).
    ``dedupe_window``: a repeat (same repair and state) or a refusal (same rule) of a request
    audited within the window is not audited again (the engine re-reads a Slurm drain reason
    every pass); None audits every submission (the API).
    """
    try:
        _check_identity(request)
        existing = _find(store, request)
        if existing is not None:
            return _repeat(store, request, existing, now, dedupe_window)
        decision = _decide(store, request, now, cluster_nodes, node_pools)
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
        state=decision.state,
        now=now,
        approved_by=decision.approved_by,
        rule=decision.rule,
    )
    if not created:  # a concurrent writer inserted the same request id first: theirs stands
        return _repeat(store, request, repair, now, dedupe_window)
    payload = {
        **_request_payload(request),
        "repair_id": repair.id,
        "action": repair.action.value,
        "state": repair.state.value,
        "rule": decision.rule,
        "approved_by": decision.approved_by,
        "decision": decision.reason,
        "trace": [list(t) for t in decision.trace],
    }
    store.append_audit(
        _event(
            AuditKind.REPAIR_REQUESTED, now, request.cluster, request.node, payload, repair.action
        )
    )
    return repair, True, decision.rule


def _check_identity(request: RepairRequest) -> None:
    kind = request.requester_kind
    if kind is RequesterKind.MEDIC:
        raise _IdentityViolation(
            RULE_IDENTITY,
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
            raise _IdentityViolation(
                RULE_REMOVE_HUMAN_ONLY,
                f"detector {request.requested_by} asked to {request.action.value} "
                f"{request.node}: removal is a person's decision, never a detector's",
            )


def _find(store: RepairStore, request: RepairRequest) -> Repair | None:
    if not request.request_id:
        return None
    for r in store.list_repairs(cluster=request.cluster, node=request.node):
        if r.requested_by == request.requested_by and r.request_id == request.request_id:
            return r
    return None


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
        "rule": RULE_REPEAT,
    }
    event = _event(
        AuditKind.REPAIR_REQUEST_REPEATED,
        now,
        request.cluster,
        request.node,
        payload,
        existing.action,
    )
    if not _seen(store, event, window, ("request_id", "requested_by", "repair_id", "state")):
        store.append_audit(event)
    return existing, False, RULE_REPEAT


def _refused(
    store: IntakeStore,
    request: RepairRequest,
    error: Exception,
    now: datetime,
    window: timedelta | None,
) -> None:
    rule = getattr(error, "rule", RULE_INVALID if isinstance(error, InputError) else "refused")
    payload = {**_request_payload(request), "rule": rule, "error": str(error)}
    event = _event(
        AuditKind.REPAIR_REQUEST_REFUSED,
        now,
        request.cluster,
        request.node,
        payload,
        request.action,
    )
    if not _seen(store, event, window, ("request_id", "requested_by", "rule")):
        store.append_audit(event)


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


def _decide(
    store: IntakeStore,
    request: RepairRequest,
    now: datetime,
    cluster_nodes: int,
    pools: Mapping[NodeName, str],
) -> _Decision:
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
    open_repairs = store.list_repairs(cluster=cluster, states=_OPEN)
    recent = store.list_repairs(cluster=cluster, since=now - _HOUR)
    answer = admit(request, firing, open_repairs, recent, policy, breaker, now, past_alerts=past)
    if isinstance(answer, Skip):
        if answer.rule == RULE_EVIDENCE:
            raise EvidenceRequired(answer.reason)
        if answer.rule == RULE_OPEN_REPAIR:
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
) -> _Decision:
    request = answer.request
    trace = list(answer.trace)
    history = store.list_repairs(cluster=request.cluster, node=request.node)
    cooling = in_cooldown(request.node, history, policy, now)
    if cooling:
        raise GuardrailRefused(RULE_COOLDOWN, cooling.reason)
    trace.append((RULE_COOLDOWN, cooling.reason))
    if answer.rule == RULE_BREAKER_TRIPPED or breaker.tripped:
        since = f" at {breaker.tripped_at.isoformat()}" if breaker.tripped_at else ""
        why = f": {breaker.reason}" if breaker.reason else ""
        raise GuardrailRefused(
            RULE_BREAKER_TRIPPED,
            f"the circuit breaker of {request.cluster} tripped{since}{why}; automatic repair "
            "is paused until an operator resets it",
        )
    budget = within_budget(cluster_nodes, open_repairs, pools, request.node, policy)
    if not budget:
        raise GuardrailRefused(RULE_BUDGET, budget.reason)
    trace.append((RULE_BUDGET, budget.reason))
    return _Decision(
        request, answer.state, answer.approved_by, answer.rule, answer.reason, tuple(trace)
    )


def _person_decision(answer: Recommendation, policy: RepairPolicy, breaker: Breaker) -> _Decision:
    """A person's request waits for approval unless the policy would approve the same repair
    automatically (its action class or Xid; breaker closed); removal always waits."""
    request = answer.request
    as_policy = replace(request, requester_kind=RequesterKind.MEDIC)
    state, approved_by, rule = approve(as_policy, policy, breaker=breaker)
    trace = [t for t in answer.trace if t[0] != answer.rule]
    trace.append((rule, approval_text(rule)))
    reason = (
        f"{request.action} on {request.node} for {request.requested_by}: {request.reason}; "
        f"{approval_text(rule)}"
    )
    return _Decision(request, state, approved_by, rule, reason, tuple(trace))


# --- decisions on a repair -----------------------------------------------------------------------
def approve_repair(
    store: IntakeStore,
    repair_id: int,
    user: Actor | str,
    now: datetime,
    action: RepairAction | None = None,
    *,
    reason: str | None = None,
) -> Repair:
    """A person approves a pending repair, optionally with another action (removal included).

    Approving again with the same action is a no-op (the repair is returned); anything else
    that is not pending is a ``ConflictError``. The wait for an idle node starts now.
    """
    who = _person(user, "approve a repair")
    repair = _get(store, repair_id)
    new_action = action or repair.action
    if (
        repair.state is RepairState.APPROVED
        and repair.approved_by == who.name
        and new_action is repair.action
    ):
        return repair  # the same approval again (a retried call)
    if repair.state is not RepairState.PENDING_APPROVAL:
        raise ConflictError(_not_pending(repair, "approved"))
    _gate(store, repair, new_action, now)
    policy = store.get_repair_policy(repair.cluster)
    update = RepairUpdate(
        action=new_action if new_action is not repair.action else None,
        approved_by=who.name,
        approved_at=now,
        wait_deadline=deadline(now, policy),
    )
    updated = _move(store, repair, RepairState.APPROVED, now, update, "approved")
    _decided(
        store,
        AuditKind.REPAIR_APPROVED,
        updated,
        who,
        now,
        RULE_MANUAL_APPROVAL,
        reason,
        previous_action=repair.action,
    )
    return updated


def reject_repair(
    store: IntakeStore,
    repair_id: int,
    user: Actor | str,
    now: datetime,
    *,
    reason: str | None = None,
) -> Repair:
    """A person rejects a pending repair (rejecting it again is a no-op)."""
    who = _person(user, "reject a repair")
    repair = _get(store, repair_id)
    if repair.state is RepairState.REJECTED:
        return repair
    if repair.state is not RepairState.PENDING_APPROVAL:
        raise ConflictError(_not_pending(repair, "rejected"))
    update = RepairUpdate(error=_ended("rejected", who, reason))
    updated = _move(store, repair, RepairState.REJECTED, now, update, "rejected")
    _decided(store, AuditKind.REPAIR_REJECTED, updated, who, now, RULE_MANUAL_REJECTION, reason)
    return updated


def cancel_repair(
    store: IntakeStore,
    repair_id: int,
    user: Actor | str,
    now: datetime,
    *,
    reason: str | None = None,
) -> Repair:
    """A person cancels a repair until it starts executing (cancelling again is a no-op).

    Compare-and-set against the engine moving it meanwhile: re-read and try again while
    cancelling is still allowed; once it executes, ``ConflictError``.
    """
    who = _person(user, "cancel a repair")
    for _ in range(_RETRIES):
        repair = _get(store, repair_id)
        if repair.state is RepairState.CANCELLED:
            return repair
        if RepairState.CANCELLED not in TRANSITIONS[repair.state]:
            raise ConflictError(
                f"repair {repair.id} ({repair.action} of {repair.node}) is {repair.state}: it "
                "can no longer be cancelled (cancelling is possible until it starts executing)"
            )
        update = RepairUpdate(error=_ended("cancelled", who, reason))
        try:
            updated = store.transition_repair(
                repair.id, repair.state, RepairState.CANCELLED, now, update
            )
        except ConflictError:
            continue  # the engine moved it: decide again on its new state
        _decided(
            store,
            AuditKind.REPAIR_CANCELLED,
            updated,
            who,
            now,
            RULE_MANUAL_CANCELLATION,
            reason,
            previous_state=repair.state,
        )
        return updated
    raise ConflictError(f"repair {repair_id} kept changing state; try cancelling it again")


def change_action(
    store: IntakeStore,
    repair_id: int,
    user: Actor | str,
    action: RepairAction,
    now: datetime,
    *,
    reason: str | None = None,
) -> Repair:
    """A person changes the action of a pending repair without approving it.

    Needs the domain to allow the pending -> pending transition; where it does not, an
    ``InputError`` says to approve with the new action instead.
    """
    who = _person(user, "change a repair's action")
    repair = _get(store, repair_id)
    if repair.action is action:
        return repair
    if repair.state is not RepairState.PENDING_APPROVAL:
        raise ConflictError(_not_pending(repair, "changed"))
    pending = RepairState.PENDING_APPROVAL
    if pending not in TRANSITIONS[pending]:
        raise InputError(
            "action",
            "this medic changes a pending repair's action only when approving it: POST "
            f'/api/v1/repairs/{repair_id}/approve with {{"action": "{action.value}"}}',
        )
    _gate(store, repair, action, now)
    updated = _move(store, repair, pending, now, RepairUpdate(action=action), "changed")
    _decided(
        store,
        AuditKind.REPAIR_ACTION_CHANGED,
        updated,
        who,
        now,
        RULE_MANUAL_ACTION,
        reason,
        previous_action=repair.action,
    )
    return updated


def _not_pending(repair: Repair, verb: str) -> str:
    by = f" by {repair.approved_by}" if repair.approved_by else ""
    return (
        f"repair {repair.id} ({repair.action} of {repair.node}) is {repair.state}{by}: only a "
        f"repair pending approval can be {verb}"
    )


def _ended(verb: str, who: Actor, reason: str | None) -> str:
    return f"{verb} by {who}" + (f": {reason}" if reason else "")


def _gate(store: RepairStore, repair: Repair, action: RepairAction, now: datetime) -> None:
    if action is RepairAction.MIGRATE and repair.action is not RepairAction.MIGRATE:
        gate = gate_migration(store.list_alerts(cluster=repair.cluster, node=repair.node), now)
        if not gate:
            raise _IdentityViolation(gate.rule, gate.reason)


def _move(
    store: RepairStore,
    repair: Repair,
    new: RepairState,
    now: datetime,
    update: RepairUpdate,
    verb: str,
) -> Repair:
    try:
        return store.transition_repair(repair.id, repair.state, new, now, update)
    except ConflictError:
        latest = _get(store, repair.id)
        raise ConflictError(_not_pending(latest, verb)) from None


def _decided(
    store: IntakeStore,
    kind: AuditKind,
    repair: Repair,
    who: Actor,
    now: datetime,
    rule: str,
    reason: str | None,
    *,
    previous_action: RepairAction | None = None,
    previous_state: RepairState | None = None,
) -> None:
    payload: dict[str, Any] = {
        "repair_id": repair.id,
        "by": str(who),
        "rule": rule,
        "policy_rule": repair.rule,
        "state": repair.state.value,
        "reason": reason,
    }
    if previous_action is not None:
        payload["previous_action"] = previous_action.value
    if previous_state is not None:
        payload["previous_state"] = previous_state.value
    store.append_audit(_event(kind, now, repair.cluster, repair.node, payload, repair.action))


# --- policy and breaker --------------------------------------------------------------------------
def _range(name: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise InputError(name, f"{value} is outside {bracket}{low:g}, {high:g}]")


def check_policy(policy: RepairPolicy) -> None:
    """``InputError`` naming the field when ``policy`` is not one medic can run."""
    _range("max_wait_seconds", policy.max_wait_seconds, 0, MAX_WAIT_CAP_SECONDS)
    _range("cooldown_seconds", policy.cooldown_seconds, 0, 30 * _DAY)
    _range("persistence_seconds", policy.persistence_seconds, 0, 7 * _DAY)
    for key, seconds in policy.persistence_overrides.items():
        if not re.fullmatch(r"[a-z0-9_.:*-]{1,128}", key):
            raise InputError("persistence_overrides", f"{key!r} is not an alert key or family")
        _range(f"persistence_overrides.{key}", seconds, 0, 7 * _DAY)
    _range("max_concurrent_fraction", policy.max_concurrent_fraction, 0, 1, low_open=True)
    _range("breaker_fraction", policy.breaker_fraction, 0, 1, low_open=True)
    _range("breaker_window_seconds", policy.breaker_window_seconds, 0, 7 * _DAY, low_open=True)
    if not 0 <= policy.detector_cap_per_hour <= 10_000:
        raise InputError(
            "detector_cap_per_hour", f"{policy.detector_cap_per_hour} is outside [0, 10000]"
        )
    if RepairAction.REMOVE in policy.auto_actions:
        raise InputError("auto_actions", "remove is never approved automatically")
    unknown = sorted(x for x in policy.auto_xids if x not in XID_CLASSES)
    if unknown:
        raise InputError(
            "auto_xids", f"unknown Xid code(s) {', '.join(map(str, unknown))} (see docs)"
        )


def put_policy(
    store: IntakeStore,
    cluster: ClusterName,
    policy: RepairPolicy,
    user: Actor | str,
    now: datetime,
) -> RepairPolicy:
    """A person replaces the cluster's repair policy (validated, audited with what changed)."""
    who = _person(user, "change the repair policy")
    check_policy(policy)
    before = store.get_repair_policy(cluster)
    store.put_repair_policy(cluster, policy)
    after = store.get_repair_policy(cluster)
    changed = {
        name: [_plain(getattr(before, name)), _plain(getattr(after, name))]
        for name in RepairPolicy.__dataclass_fields__
        if getattr(before, name) != getattr(after, name)
    }
    payload = {"by": str(who), "rule": RULE_MANUAL_POLICY, "changed": changed}
    store.append_audit(_event(AuditKind.REPAIR_POLICY_CHANGED, now, cluster, None, payload))
    return after


def _plain(value: object) -> object:
    """A policy field as JSON: sets sorted, enums by value."""
    if isinstance(value, frozenset):
        return sorted((_plain(v) for v in value), key=str)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def reset_breaker(
    store: IntakeStore,
    cluster: ClusterName,
    user: Actor | str,
    now: datetime,
    *,
    reason: str | None = None,
) -> tuple[Breaker, bool]:
    """A person closes a tripped breaker: (breaker, changed). Closed already: unchanged, not
    audited (also when another operator reset it a moment ago)."""
    who = _person(user, "reset the circuit breaker")
    current = store.get_breaker(cluster)
    if not current.tripped:
        return current, False
    closed = replace(current, tripped=False, reset_by=who.name, reset_at=now)
    try:
        stored = store.set_breaker(closed, expected_tripped=True)
    except ConflictError:
        return store.get_breaker(cluster), False
    payload = {
        "by": str(who),
        "rule": RULE_MANUAL_RESET,
        "tripped_at": current.tripped_at.isoformat() if current.tripped_at else None,
        "trip_reason": current.reason,
        "reason": reason,
    }
    store.append_audit(_event(AuditKind.BREAKER_RESET, now, cluster, None, payload))
    return stored, True


# --- the Slurm path ------------------------------------------------------------------------------
def record_invalid_request(
    store: IntakeStore,
    cluster: ClusterName,
    node: NodeName,
    error: InputError,
    now: datetime,
    *,
    dedupe_window: timedelta | None = _HOUR,
) -> bool:
    """Audit a malformed request (a ``medic-request:`` drain reason the parser refused) once per
    ``dedupe_window`` and message; the node is left alone. True when an event was written."""
    payload = {"error": str(error), "where": error.where, "rule": RULE_INVALID}
    event = _event(AuditKind.REPAIR_REQUEST_INVALID, now, cluster, node, payload)
    if _seen(store, event, dedupe_window, ("error",)):
        return False
    store.append_audit(event)
    return True
