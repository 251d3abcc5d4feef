"""The repair lifecycle executor: each pass, every approved repair takes the steps it can now.

- **approved -> cordoned**: a failed check still firing (a person's request was checked when
  admitted), the breaker closed for a repair approved automatically (a tripped one holds it),
  and room in the concurrency budget (:func:`~medic.repair.rules.guards.within_budget`: a working
  slot, or a waiting one when its node runs jobs); the node is drained with
  ``medic: repair <id> <action>`` (someone else's drain fails the repair: never overridden);
- **-> waiting_for_idle -> draining**: :func:`~medic.repair.rules.waiting.wait_decision` (idle, the
  deadline, or every managed job's next checkpoint in ``checkpoint`` mode) and a working slot
  free; the interrupted jobs are stored on the repair and each gets a ``repair-job-interrupted``
  event saying why; each one still on the node gets advice owned by the repair (requeue away
  from the node), which the controller carries out: the repair waits until it converged
  (:mod:`medic.repair.evacuation`);
- **-> executing**: the boot id is stored, then ``NodeProvider.execute`` off the loop, and an
  action its engine left unfinished (killed, restarted) is finished from the step record and the
  node: :mod:`medic.repair.execution`;
- **-> rejoining -> validating -> done / failed**: the return to service,
  :class:`medic.repair.return_to_service.ReturnToService`.

Every state change is a compare-and-set (``transition_repair``): when another engine moved the
repair first, this one leaves it alone. The engine that moves a repair owns it: it holds a lease
on it in the store, renewed every pass, and only the owner does the work of the cordoned,
draining, executing and validating states; another engine takes a repair over once its lease
ran out (:mod:`medic.repair.leases`), within seconds of its engine stopping. Each change is
audited (``repair-transition``) and each command before and after (``repair-step-started`` /
``-succeeded`` / ``-failed``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from medic.config.settings import RepairSettings
from medic.domain.audit import AuditKind
from medic.domain.cluster import OUT_OF_SERVICE, Job, NodeState
from medic.domain.ids import JobId, NodeName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import (
    AlertSource,
    AlertState,
    Repair,
    RepairAction,
    RepairRequest,
    RepairState,
    RepairUpdate,
    RequesterKind,
    WaitMode,
)
from medic.errors import ConflictError, MedicError, PermanentError
from medic.ports import NodeProvider, Scheduler
from medic.repair.alerts import PassView, RepairMetrics, RepairStores, repair_event
from medic.repair.evacuation import Evacuation
from medic.repair.execution import EXECUTE, Execution
from medic.repair.leases import Leases
from medic.repair.return_to_service import ReturnToService, foreign
from medic.repair.rules.guards import (
    AUTO_APPROVER,
    Check,
    Slot,
    has_evidence,
    within_budget,
)
from medic.repair.rules.waiting import deadline, running_jobs, wait_decision
from medic.repair.steps import Steps
from medic.repair.validation import VALIDATION_ALERT, Validator

__all__ = ["Lifecycle", "PassView"]

logger = logging.getLogger(__name__)

S = RepairState
_BUSY = frozenset({NodeState.DRAINING, NodeState.ALLOCATED, NodeState.MIXED})
"""A node in one of these states runs jobs, whether medic watches them or not."""
_POLLED = {EXECUTE: S.EXECUTING, "validate": S.VALIDATING}
"""The background steps and the state their repair is in while they run."""


class Lifecycle:
    """Carries approved repairs out (see the module docstring). Who owns a repair is in the
    store; in memory only the steps this engine runs (execution, validation)."""

    def __init__(
        self,
        *,
        store: RepairStores,
        scheduler: Scheduler,
        provider: NodeProvider,
        clock: Callable[[], datetime],
        settings: RepairSettings,
        validator: Validator,
        metrics: RepairMetrics,
    ) -> None:
        self._store = store
        self._scheduler = scheduler
        self._provider = provider
        self._now = clock
        self._settings = settings
        self._metrics = metrics
        self._cluster = scheduler.cluster
        self.steps = Steps(self.audit, clock)
        """Runs the commands; slow ones (the action, the validation suite) off the loop."""
        self.leases = Leases(store, clock, self.audit, trail=store)
        """The repairs this engine owns (their leases in the store)."""
        self._execution = Execution(
            self, trail=store, provider=provider, clock=clock, settings=settings
        )
        self._back = ReturnToService(
            self,
            store=store,
            scheduler=scheduler,
            provider=provider,
            clock=clock,
            settings=settings,
            validator=validator,
        )
        self._evacuation = Evacuation(store, scheduler, clock)
        self._breaker_tripped = False
        self._busy: frozenset[NodeName] = frozenset()
        """The nodes that run jobs, as of this pass (a repair there waits, holding no slot)."""
        self._steps: dict[RepairState, Callable[[Repair, PassView], Repair | None]] = {
            S.APPROVED: self._start,
            S.CORDONED: self._cordoned,
            S.WAITING_FOR_IDLE: self._wait,
            S.DRAINING: self._drain,
            S.EXECUTING: self._execution.execute,
            S.REJOINING: self._back.rejoin,
            S.VALIDATING: self._back.validate,
        }

    def advance(self, repair: Repair, view: PassView) -> Repair:
        """Take every step ``repair`` can take now; the repair as it stands after them.

        A repair that was cordoned in this pass stops at ``waiting_for_idle``: whether the node
        is idle is decided on the next pass, from a listing read after the drain (this pass's was
        read before it, and misses a job that started since and the node's draining state)."""
        for _ in range(len(self._steps) + 1):
            step = self._steps.get(repair.state)
            moved = step(repair, view) if step is not None else None
            if moved is None or moved.state is repair.state:
                return moved or repair
            if moved.state is S.WAITING_FOR_IDLE:
                return moved
            repair = moved
        return repair

    def begin_pass(self, view: PassView) -> None:
        """Before the pass's steps: this engine's leases renewed, a fresh settle budget, and the
        background steps whose repair moved on without this engine (or was taken over by
        another one) abandoned (audited)."""
        self.leases.renew(view.open_repairs)
        self._breaker_tripped = self._store.get_breaker(self._cluster).tripped
        running = {n for job in running_jobs(view.jobs) for n in job.nodes}
        self._busy = frozenset(running | {n.name for n in view.nodes.values() if n.state in _BUSY})
        self.steps.begin_pass()
        states = {r.id: r.state for r in view.open_repairs}

        def collected(repair_id: int, step: str) -> bool:
            return states.get(repair_id) is _POLLED.get(step) and self.leases.holds(repair_id)

        self.steps.abandon(collected)

    def sweep(self, view: PassView) -> None:
        """Lift medic's drains left behind by finished or cancelled repairs (see
        ``ReturnToService.sweep``; a job a cancelled one was moving off is the controller's to
        finish: its advice stays active until it converged)."""
        self._back.sweep(view)

    # ------------------------------------------------------------------ transitions
    def move(
        self,
        repair: Repair,
        new: RepairState,
        view: PassView,
        rule: RepairRule,
        reason: str,
        update: RepairUpdate | None = None,
        **extra: Any,
    ) -> Repair | None:
        """Compare-and-set ``repair`` to ``new`` and audit it; None when another writer moved it
        first (this engine then leaves it alone). The move makes this engine its owner."""
        now = self._now()
        if new is S.DONE or (new is S.FAILED and rule == RepairRule.VALIDATION_FAILED):
            # Before the move, so an engine that sees the repair finished sees its alerts cleared.
            keys = set(repair.alert_keys) - {VALIDATION_ALERT}
            passed = {VALIDATION_ALERT} if rule == RepairRule.VALIDATION_PASSED else set()
            self._resolve(repair, keys | passed, new)
        try:
            stamped = self.leases.stamp(update, now)
            moved = self._store.transition_repair(repair.id, repair.state, new, now, stamped)
        except ConflictError as exc:
            logger.info("repair %s: %s", repair.id, exc)
            return None
        payload: dict[str, Any] = {"repair_id": repair.id, "from": repair.state.value}
        payload |= {"to": new.value, "rule": rule, "reason": reason}
        payload |= {"approved_by": moved.approved_by, **extra}
        self.audit(AuditKind.REPAIR_TRANSITION, moved, payload, now)
        self._metrics.repair_state(self._cluster, moved.action.value, new.value)
        view.open_repairs[:] = [r for r in view.open_repairs if r.id != moved.id]
        if not new.is_terminal:
            view.open_repairs.append(moved)
        view.moved.append(moved)
        self.leases.moved(moved)
        return moved

    def owns(self, repair: Repair) -> bool:
        """True when this engine holds ``repair`` (it does its state's work), taking it over
        when nobody's lease runs on it: a lease that ran out is the only sign that an engine
        stopped."""
        return self.leases.owns(repair)

    def fail(self, repair: Repair, view: PassView, rule: RepairRule, error: str) -> Repair | None:
        return self.move(repair, S.FAILED, view, rule, error, RepairUpdate(error=error[:1000]))

    def audit(
        self, kind: AuditKind, repair: Repair, payload: dict[str, Any], now: datetime
    ) -> None:
        event = repair_event(kind, now, self._cluster, repair.node, payload, repair.action.value)
        self._store.append_audit(event)

    def do(self, repair: Repair, step: str, work: Callable[[], object], **detail: Any) -> None:
        """Run one quick command on the cluster in this pass, audited before and after."""
        self.steps.now(repair, step, work, **detail)

    def _resolve(self, repair: Repair, keys: set[str], outcome: RepairState) -> None:
        """The repair fixed its faults: resolve its alerts (the scheduler's clear by themselves;
        a failed validation's only when this repair's validation passed)."""
        now = self._now()
        for alert in self._store.list_alerts(cluster=self._cluster, node=repair.node):
            if (
                alert.key in keys
                and alert.state is AlertState.FIRING
                and alert.source is not AlertSource.SCHEDULER
                and alert.id is not None
            ):
                self._store.resolve_alert(alert.id, now)
                payload = {"key": alert.key, "repair_id": repair.id, "why": f"repair {outcome}"}
                self.audit(AuditKind.ALERT_RESOLVED, repair, payload, now)

    # ------------------------------------------------------------------ steps
    def _start(self, repair: Repair, view: PassView) -> Repair | None:
        if not self._provider.can(repair.action):
            action = repair.action.value
            why = (
                f"nothing on this cluster can {action} {repair.node}: configure "
                f"repair.{action}_command (an operator hook) or change the repair's action; "
                "the node was not touched"
            )
            return self.fail(repair, view, RepairRule.NO_EXECUTOR, why)
        if repair.requester_kind is not RequesterKind.USER:
            evidence = has_evidence(_request(repair), view.firing.get(repair.node, []))
            if not evidence:
                return self.move(repair, S.CANCELLED, view, RepairRule.EVIDENCE, evidence.reason)
        if self._breaker_tripped and repair.approved_by == AUTO_APPROVER:
            return repair  # held until a person resets the breaker (or approves it anew)
        budget = self._budget(repair, view, Slot.START)
        if not budget:
            return repair
        climbed = repair.evidence.get("escalated_from") if repair.escalated_from is None else None
        update = RepairUpdate(
            wait_deadline=deadline(self._now(), view.policy),
            escalated_from=RepairAction(climbed) if isinstance(climbed, str) else None,
        )
        return self.move(repair, S.CORDONED, view, RepairRule.BUDGET, budget.reason, update)

    def _cordoned(self, repair: Repair, view: PassView) -> Repair | None:
        reason = f"medic: repair {repair.id} {repair.action.value}"
        node = view.nodes.get(repair.node)
        if node is not None and node.state in OUT_OF_SERVICE and foreign(node.reason):
            why = f"{node.name} was taken out of service by someone else ({node.reason!r})"
            return self.fail(repair, view, RepairRule.CORDON_REFUSED, f"cannot drain: {why}")
        if not self.owns(repair):
            return repair  # the engine that cordoned it drains it
        if node is None or node.reason != reason or node.state not in OUT_OF_SERVICE:
            try:
                self.do(repair, "drain", lambda: self._scheduler.drain_node(repair.node, reason))
            except PermanentError as exc:
                return self.fail(repair, view, RepairRule.CORDON_REFUSED, f"cannot drain: {exc}")
            except MedicError:
                return repair  # try again next pass
        why = f"{repair.node} drained ({reason!r}); waiting for it to be idle"
        return self.move(repair, S.WAITING_FOR_IDLE, view, RepairRule.CORDONED, why)

    def _wait(self, repair: Repair, view: PassView) -> Repair | None:
        node_jobs = [j for j in view.jobs if repair.node in j.nodes]
        saved = view.policy.wait_mode is WaitMode.CHECKPOINT and self._checkpointed(
            repair, running_jobs(node_jobs)
        )
        now = self._now()
        decision = wait_decision(repair, node_jobs, view.policy, now, saved)
        if not decision.proceed:
            return repair
        hidden = self._hidden_jobs(repair, view, node_jobs)
        if hidden is not None:
            until = repair.wait_deadline or deadline(repair.approved_at, view.policy)
            if until is None or now < until:
                return repair  # they hold the repair like visible jobs
            why = (
                f"jobs medic does not watch still run on {repair.node} ({hidden.value}) at the "
                "wait deadline: they end with the repair"
            )
            decision = decision._replace(timed_out=True, reason=why, rule=RepairRule.WAIT_TIMEOUT)
        if not self._budget(repair, view, Slot.WORK):
            return repair  # its node is free, the budget is not: it drains when a slot is
        jobs = decision.interrupted_jobs
        update = RepairUpdate(interrupted_jobs=jobs) if jobs else None
        extra = {"timed_out": decision.timed_out, "interrupted_jobs": list(jobs)}
        moved = self.move(repair, S.DRAINING, view, decision.rule, decision.reason, update, **extra)
        if moved is not None:
            for job in jobs:
                payload = {"repair_id": repair.id, "node": repair.node, "rule": decision.rule}
                payload |= {"why": decision.reason, "timed_out": decision.timed_out}
                event = repair_event(
                    AuditKind.REPAIR_JOB_INTERRUPTED,
                    now,
                    self._cluster,
                    repair.node,
                    payload,
                    repair.action.value,
                    job=JobId(job),
                )
                self._store.append_audit(event)
        return moved

    def _budget(self, repair: Repair, view: PassView, slot: Slot) -> Check:
        return within_budget(
            view.cluster_nodes,
            view.open_repairs,
            view.pools,
            repair.node,
            view.policy,
            candidate_id=repair.id,
            slot=slot,
            busy=self._busy,
        )

    @staticmethod
    def _hidden_jobs(repair: Repair, view: PassView, node_jobs: Sequence[Job]) -> NodeState | None:
        """The node's state when the scheduler says jobs medic does not watch (not opted in)
        still run there (draining, or still allocated), else None."""
        node = view.nodes.get(repair.node)
        if node is None or node.state not in _BUSY or running_jobs(node_jobs):
            return None
        return node.state

    def _checkpointed(self, repair: Repair, running: Sequence[Job]) -> bool:
        """True when every running job on the node saved a checkpoint since the wait for it
        began (its step then is stored on the repair: a restarted engine decides the same)."""
        base, new = repair.checkpoint_baseline, dict[str, int | None]()
        saved = bool(running)
        for job in running:
            attempts = self._store.list_attempts(self._cluster, job.id)
            now_at = {a.number: a.progress.last_checkpoint_step for a in attempts}.get(
                job.restart_count
            )
            key = f"{job.id}/{job.restart_count}"
            if key not in base:
                new[key], saved = now_at, False
            elif now_at is None or (base[key] is not None and now_at <= (base[key] or 0)):
                saved = False
        if new:
            with contextlib.suppress(ConflictError):  # it moved on meanwhile: no wait to time
                self._store.note_checkpoint_baseline(repair.id, repair.state, new)
        return saved

    def _drain(self, repair: Repair, view: PassView) -> Repair | None:
        node = repair.node
        if not self.owns(repair):
            return repair  # the engine that decided to take the node moves its jobs off
        refused = self._evacuation.settled(repair, view.exclusions)
        if refused is None:
            return repair  # a job is still on its way off (the controller's): next pass
        boot_id = self._execution.boot_id(node)
        why = f"jobs left {node}; boot id before: {boot_id or 'unknown'}"
        if refused:
            why += f"; not moved (the scheduler refused): {', '.join(refused)}, interrupted"
        update = RepairUpdate(boot_id=boot_id)
        moved = self.move(repair, S.EXECUTING, view, RepairRule.DRAINED, why, update)
        if moved is not None:
            self._execution.entered(moved)
        return moved


def _request(repair: Repair) -> RepairRequest:
    return RepairRequest(
        cluster=repair.cluster,
        node=repair.node,
        action=repair.action,
        requested_by=repair.requested_by,
        requester_kind=repair.requester_kind,
        reason=repair.reason,
        alert_keys=repair.alert_keys,
    )
