"""People's decisions on a repair: approve, reject, cancel and change its action.

The second half of repair intake (:mod:`medic.repair.intake` takes the requests; the repair
policy and the breaker reset are in :mod:`medic.repair.policy_changes`): each decision is a
compare-and-set transition, audited with who, when and the rule; only people decide (a detector
acting as one is a ``PolicyViolation``). The audit event's actor is the person who decided
(``user:NAME``, the API token's), never the engine; the repair keeps ``approved_by`` and the
engine's later transitions of it name that person too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from medic.domain.audit import AuditKind
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import (
    TRANSITIONS,
    Repair,
    RepairAction,
    RepairState,
    RepairUpdate,
)
from medic.errors import ConflictError, InputError
from medic.ports import RepairStore
from medic.repair.actors import Actor, IdentityViolation, as_person
from medic.repair.intake_common import IntakeStore, audit_event, get_repair
from medic.repair.rules.ladder import gate_migration
from medic.repair.rules.waiting import deadline

__all__ = [
    "approve_repair",
    "cancel_repair",
    "change_action",
    "reject_repair",
]

_RETRIES = 3


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
        RepairRule.MANUAL_APPROVAL,
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
    _decided(
        store, AuditKind.REPAIR_REJECTED, updated, who, now, RepairRule.MANUAL_REJECTION, reason
    )
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
            RepairRule.MANUAL_CANCELLATION,
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
        RepairRule.MANUAL_ACTION,
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
    rule: RepairRule,
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
    event = audit_event(
        kind, now, repair.cluster, repair.node, payload, repair.action, actor=str(who)
    )
    store.append_audit(event)
