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
    Alert,
    AlertSource,
    AlertState,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
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
)
from medic.ports import AuditQuery, RepairStore

__all__ = [
    "ENGINE_ACTOR",
    "HOUR",
    "RULE_INVALID",
    "RULE_REPEAT",
    "Actor",
    "EvidenceRequired",
    "GuardrailRefused",
    "IdentityViolation",
    "IntakeStore",
    "RepairInProgress",
    "as_person",
    "audit_event",
    "detector_alert_key",
    "get_repair",
    "node_pools",
    "seen_recently",
    "submit_repair",
]

ENGINE_ACTOR = "medic-engine"
RULE_REPEAT = "idempotent-repeat"
"""A request id seen before: the existing repair is returned."""
RULE_INVALID = "invalid-request"
RULE_IDENTITY = "identity"

RESERVED_NAMES = frozenset({AUTO_APPROVER, MEDIC_REQUESTER})
"""Names only medic itself acts under (``auto`` approves by policy, ``medic`` recommends)."""
_NAME = re.compile(r"^[A-Za-z0-9][\w.:@+-]{0,127}$")
_KEY_UNSAFE = re.compile(r"[^a-z0-9_.:-]+")
_PREFIXES = {"user:": RequesterKind.USER, "detector:": RequesterKind.DETECTOR}
_AGENT_PREFIX = "agent:"
HOUR = timedelta(hours=1)
_OPEN = frozenset(RepairState) - TERMINAL_STATES


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


class IdentityViolation(PolicyViolation):
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
            raise IdentityViolation(RULE_IDENTITY, "only medic's own policy acts as medic")
        if not _NAME.match(name):
            raise InputError(
                "actor",
                f"{name!r} is not a valid name (letters, digits and _.:@+-, at most 128, "
                "starting with a letter or digit)",
            )
        if name in RESERVED_NAMES:
            raise IdentityViolation(
                RULE_IDENTITY, f"{name!r} is medic's own name: a person or detector cannot use it"
            )
        return cls(name, resolved)


def as_person(actor: Actor | str, verb: str) -> Actor:
    who = actor if isinstance(actor, Actor) else Actor.parse(actor)
    if who.kind is not RequesterKind.USER:
        raise IdentityViolation(
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


def audit_event(
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


def seen_recently(
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


def get_repair(store: RepairStore, repair_id: int) -> Repair:
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
        audit_event(
            AuditKind.REPAIR_REQUESTED, now, request.cluster, request.node, payload, repair.action
        )
    )
    return repair, True, decision.rule


def _check_identity(request: RepairRequest) -> None:
    kind = request.requester_kind
    if kind is RequesterKind.MEDIC:
        raise IdentityViolation(
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
            raise IdentityViolation(
                RULE_REMOVE_HUMAN_ONLY,
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
        "rule": RULE_REPEAT,
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
    recent = store.list_repairs(cluster=cluster, since=now - HOUR)
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
