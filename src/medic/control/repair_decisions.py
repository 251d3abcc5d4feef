"""People's decisions on repairs, the repair policy, the breaker reset and invalid Slurm requests.

The second half of repair intake (:mod:`medic.control.intake` takes the requests): approve,
reject, cancel and change action are compare-and-set transitions, each audited with who, when
and the rule; only people decide (a detector acting as one is a ``PolicyViolation``).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from medic.control.intake import (
    HOUR,
    RULE_INVALID,
    Actor,
    IdentityViolation,
    IntakeStore,
    as_person,
    audit_event,
    get_repair,
    seen_recently,
)
from medic.domain.audit import AuditKind
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    TRANSITIONS,
    Breaker,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairState,
    RepairUpdate,
)
from medic.errors import (
    ConflictError,
    InputError,
)
from medic.policy.ladder import gate_migration
from medic.policy.repair import (
    deadline,
)
from medic.policy.waiting import MAX_WAIT_CAP_SECONDS
from medic.policy.xid_classes import XID_CLASSES
from medic.ports import RepairStore

__all__ = [
    "approve_repair",
    "cancel_repair",
    "change_action",
    "check_policy",
    "put_policy",
    "record_invalid_request",
    "reject_repair",
    "reset_breaker",
]

RULE_MANUAL_APPROVAL = "manual-approval"
RULE_MANUAL_REJECTION = "manual-rejection"
RULE_MANUAL_CANCELLATION = "manual-cancellation"
RULE_MANUAL_ACTION = "manual-action"
RULE_MANUAL_POLICY = "manual-policy"
RULE_MANUAL_RESET = "manual-breaker-reset"
_DAY = 86_400.0
_RETRIES = 3


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
    who = as_person(user, "approve a repair")
    repair = get_repair(store, repair_id)
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
    who = as_person(user, "reject a repair")
    repair = get_repair(store, repair_id)
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
    who = as_person(user, "cancel a repair")
    for _ in range(_RETRIES):
        repair = get_repair(store, repair_id)
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
    who = as_person(user, "change a repair's action")
    repair = get_repair(store, repair_id)
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
            raise IdentityViolation(gate.rule, gate.reason)


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
        latest = get_repair(store, repair.id)
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
    store.append_audit(audit_event(kind, now, repair.cluster, repair.node, payload, repair.action))


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
    who = as_person(user, "change the repair policy")
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
    store.append_audit(audit_event(AuditKind.REPAIR_POLICY_CHANGED, now, cluster, None, payload))
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
    who = as_person(user, "reset the circuit breaker")
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
    store.append_audit(audit_event(AuditKind.BREAKER_RESET, now, cluster, None, payload))
    return stored, True


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
    payload = {"error": str(error), "where": error.where, "rule": RULE_INVALID}
    event = audit_event(AuditKind.REPAIR_REQUEST_INVALID, now, cluster, node, payload)
    if seen_recently(store, event, dedupe_window, ("error",)):
        return False
    store.append_audit(event)
    return True
