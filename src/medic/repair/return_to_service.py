"""The last steps of a repair: rejoining, revalidation, and lifting medic's drain.

:class:`ReturnToService` is used by :class:`~medic.repair.lifecycle.Lifecycle` (through
:class:`LifecycleOps`) for:

- **rejoining**: ``NodeProvider.rejoined``, else failed after ``rejoin_timeout_seconds`` (the node
  stays drained); then revalidation when due (the policy's ``validate_after`` actions,
  ``repair.validate_always``, or a node whose last revalidation failed), else done;
- **validating**: pass -> done; fail -> failed, the node drained with
  ``medic: validation failed, ticket <id>`` and a critical ``validation:failed`` alert (unmapped:
  a person has it repaired, and a later revalidation that passes resolves it); abort -> the
  machine's previous state: done, back in service, the reason recorded (or failed, still out,
  when its previous revalidation had failed);
- **done**: the engine whose compare-and-set finished the repair lifts medic's drain (never
  someone else's); :meth:`~ReturnToService.sweep` lifts one a finished repair left behind.

The suite itself and its verdict live in :mod:`medic.repair.validation`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from medic.config.settings import RepairSettings
from medic.domain.audit import AuditKind
from medic.domain.cluster import OUT_OF_SERVICE, REQUEST_PREFIX, is_medic_reason
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import (
    Repair,
    RepairAction,
    RepairState,
    RepairUpdate,
    ValidationOutcome,
)
from medic.errors import MedicError
from medic.ports import NodeProvider, RepairStore, Scheduler
from medic.repair.steps import Steps
from medic.repair.validation import VALIDATION_ALERT, Validator, failure_alert, result_payload

if TYPE_CHECKING:
    from medic.repair.alerts import PassView

__all__ = [
    "OUT_OF_SERVICE",
    "LifecycleOps",
    "ReturnToService",
    "foreign",
]

logger = logging.getLogger(__name__)


class LifecycleOps(Protocol):
    """What the return to service uses of :class:`~medic.repair.lifecycle.Lifecycle`."""

    def move(
        self,
        repair: Repair,
        new: RepairState,
        view: PassView,
        rule: RepairRule,
        reason: str,
        update: RepairUpdate | None = None,
        **extra: Any,
    ) -> Repair | None: ...

    def fail(
        self, repair: Repair, view: PassView, rule: RepairRule, error: str
    ) -> Repair | None: ...

    def do(self, repair: Repair, step: str, work: Callable[[], object], **detail: Any) -> None: ...

    def audit(
        self, kind: AuditKind, repair: Repair, payload: dict[str, Any], now: datetime
    ) -> None: ...

    def owns(self, repair: Repair) -> bool: ...

    @property
    def steps(self) -> Steps: ...


class ReturnToService:
    """The last steps of a repair: rejoining, revalidation, and lifting medic's drain (with a
    sweep for a drain a finished repair left behind). One engine owns a validation in flight."""

    def __init__(
        self,
        ops: LifecycleOps,
        *,
        store: RepairStore,
        scheduler: Scheduler,
        provider: NodeProvider,
        clock: Callable[[], datetime],
        settings: RepairSettings,
        validator: Validator,
    ) -> None:
        self._ops = ops
        self._store = store
        self._scheduler = scheduler
        self._provider = provider
        self._now = clock
        self._settings = settings
        self._validator = validator
        self._cluster = scheduler.cluster

    def rejoin(self, repair: Repair, view: PassView) -> Repair | None:
        """REJOINING: wait for the node, then return it to service or hold it for validation."""
        node, now = repair.node, self._now()
        if repair.action is RepairAction.REMOVE:
            why = f"{node} removed for RMA: it stays drained"
            return self._ops.move(repair, RepairState.DONE, view, RepairRule.REMOVED, why)
        try:
            back = self._provider.rejoined(node, repair.action, repair.boot_id)
        except MedicError:
            back = False
        if not back:
            limit = self._settings.rejoin_timeout_seconds
            if (now - repair.updated_at).total_seconds() > limit:
                return self._ops.fail(
                    repair, view, RepairRule.REJOIN_TIMEOUT, f"{node} not back in {limit:g} s"
                )
            return repair
        validate = (
            repair.action in view.policy.validate_after
            or self._settings.validate_always
            or node in view.validation_failed
        )
        if not validate:
            return self._back_in_service(repair, view, RepairRule.REJOINED, f"{node} is back")
        why = f"{node} is back; running the validation suite"
        moved = self._ops.move(repair, RepairState.VALIDATING, view, RepairRule.REJOINED, why)
        if moved is not None:  # kept out of service while it is tested (medic's drain)
            reason = f"medic: repair {repair.id} validating"
            try:
                self._ops.do(repair, "drain", lambda: self._scheduler.drain_node(node, reason))
            except MedicError as exc:
                logger.warning("repair %s: cannot hold %s for validation: %s", repair.id, node, exc)
        return moved

    def _back_in_service(
        self, repair: Repair, view: PassView, rule: RepairRule, why: str, error: str | None = None
    ) -> Repair | None:
        node = view.nodes.get(repair.node)
        if node is not None and foreign(node.reason):  # someone drained it meanwhile: theirs
            return self._ops.move(
                repair, RepairState.DONE, view, rule, f"{why}; left drained: {node.reason}"
            )
        update = RepairUpdate(error=error) if error else None
        moved = self._ops.move(repair, RepairState.DONE, view, rule, why, update)
        if moved is not None:  # only the engine that finished it lifts the drain
            self._lift(moved)
        return moved

    def _lift(self, repair: Repair) -> None:
        done = f"medic: repair {repair.id} {repair.state.value}"
        with contextlib.suppress(MedicError):  # recorded; retried by :meth:`sweep`
            self._ops.do(repair, "resume", lambda: self._scheduler.resume_node(repair.node, done))

    def sweep(self, view: PassView) -> None:
        """Lift medic's drain left on a node whose repair is done (the engine that finished it
        failed to resume it, or stopped right before; never a removal, which keeps the node out)
        or was cancelled after the node was drained (a job it was moving off is the
        controller's to finish, whatever happens to the node)."""
        busy = {r.node for r in view.open_repairs}
        for node in view.nodes.values():
            found = _REPAIR_DRAIN.match(node.reason or "")
            if found is None or node.state not in OUT_OF_SERVICE or node.name in busy:
                continue
            repair = self._store.get_repair(int(found[1]))
            if (
                repair is not None
                and repair.state in (RepairState.DONE, RepairState.CANCELLED)
                and repair.action is not RepairAction.REMOVE  # out for RMA: stays drained
                and repair.node == node.name
                and (view.now - repair.updated_at).total_seconds() > _SWEEP_GRACE_SECONDS
            ):
                self._lift(repair)

    def validate(self, repair: Repair, view: PassView) -> Repair | None:
        """VALIDATING: run the suite (the engine that moved it here; another one after a while)."""
        if not self._ops.owns(repair):
            return repair  # the engine that moved it here runs the suite
        attempt = len(self._store.list_validations(repair.id)) + 1
        finished = self._ops.steps.poll(
            repair,
            "validate",
            lambda: self._validator.validate(
                self._cluster, repair.id, repair.node, self._now, attempt
            ),
            attempt=attempt,
        )
        if finished is None:
            return repair  # the suite still runs: the loop goes on meanwhile
        result, reason = finished.result()
        self._store.add_validation(result)
        payload = result_payload(result, reason)
        self._ops.audit(AuditKind.REPAIR_VALIDATION, repair, payload, result.time)
        if result.outcome is ValidationOutcome.PASS:
            return self._back_in_service(repair, view, RepairRule.VALIDATION_PASSED, reason)
        if result.outcome is ValidationOutcome.ABORT and repair.node in view.validation_failed:
            # its previous state is out of service: it stays out, still not marked faulty anew
            error = f"validation failed before and this revalidation {reason}"
            return self._ops.fail(repair, view, RepairRule.VALIDATION_ABORTED, error)
        if result.outcome is ValidationOutcome.ABORT:
            why = f"validation {reason}: back in service, not marked faulty"
            return self._back_in_service(repair, view, RepairRule.VALIDATION_ABORTED, why, reason)
        return self._failed_validation(repair, view, result.ticket or "-", reason)

    def _failed_validation(
        self, repair: Repair, view: PassView, ticket: str, reason: str
    ) -> Repair | None:
        node, now = repair.node, self._now()
        drain = f"medic: validation failed, ticket {ticket}"
        try:
            self._ops.do(repair, "drain", lambda: self._scheduler.drain_node(node, drain))
        except MedicError as exc:
            logger.warning("repair %s: cannot re-drain %s: %s", repair.id, node, exc)
        alert = failure_alert(self._cluster, repair, ticket, reason, now)
        self._store.upsert_alert(alert, now)
        payload = {"key": VALIDATION_ALERT, **alert.evidence}
        self._ops.audit(AuditKind.ALERT_FIRING, repair, payload, now)
        error = f"validation failed, ticket {ticket}: {reason}"
        return self._ops.fail(repair, view, RepairRule.VALIDATION_FAILED, error)


_REPAIR_DRAIN = re.compile(r"^medic: repair (\d+) ")
_SWEEP_GRACE_SECONDS = 30.0


def foreign(reason: str | None) -> bool:
    """A drain or down reason that is not medic's to override (a ``medic-request:`` drain was
    handed to medic by whoever wrote it)."""
    text = reason or ""
    return bool(text) and not is_medic_reason(text) and not text.lower().startswith(REQUEST_PREFIX)
