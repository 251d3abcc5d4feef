"""A person's changes to a cluster's repair settings: the repair policy and the circuit breaker.

:func:`put_policy` replaces the policy after :func:`check_policy` (audited with what changed; a
field the store did not keep is logged as an error, and the answer is the policy in force);
:func:`reset_breaker` closes a tripped breaker so automatic repair resumes. Each is a person's
decision (a detector acting as one is a ``PolicyViolation``), audited as that person
(``user:NAME``) with when and the rule.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import replace
from datetime import datetime

from medic.domain.audit import AuditKind
from medic.domain.auth import Role, check_token_name
from medic.domain.ids import ClusterName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import Breaker, RepairAction, RepairPolicy
from medic.errors import ConflictError, InputError
from medic.repair.actors import Actor, as_person
from medic.repair.intake_common import IntakeStore, audit_event
from medic.repair.rules.waiting import MAX_WAIT_CAP_SECONDS
from medic.repair.rules.xid_classes import XID_CLASSES

__all__ = ["check_policy", "put_policy", "reset_breaker"]


_DAY = 86_400.0
MAX_TRUSTED_DETECTORS = 256


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
    _check_trusted(policy.trusted_detectors)


def _check_trusted(names: frozenset[str]) -> None:
    """Each trusted detector is named as its API token is (``nvsentinel``; ``agent`` trusts every
    node agent ``agent:<node>``): a name no detector token can have would trust nobody."""
    if len(names) > MAX_TRUSTED_DETECTORS:
        raise InputError(
            "trusted_detectors", f"{len(names)} names; at most {MAX_TRUSTED_DETECTORS}"
        )
    for name in sorted(names):
        try:
            check_token_name(name, Role.DETECTOR)
        except InputError as exc:
            raise InputError(
                "trusted_detectors",
                f"{exc.message}: name a trusted detector as its API token is named (without "
                "detector:)",
            ) from None


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
    payload = {"by": str(who), "rule": RepairRule.MANUAL_POLICY, "changed": changed}
    event = audit_event(
        AuditKind.REPAIR_POLICY_CHANGED, now, cluster, None, payload, actor=str(who)
    )
    store.append_audit(event)
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
        "rule": RepairRule.MANUAL_RESET,
        "tripped_at": current.tripped_at.isoformat() if current.tripped_at else None,
        "trip_reason": current.reason,
        "reason": reason,
    }
    store.append_audit(
        audit_event(AuditKind.BREAKER_RESET, now, cluster, None, payload, actor=str(who))
    )
    return stored, True
