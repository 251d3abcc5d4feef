"""A repair's action on its node (the ``executing`` state), and finishing one its engine left.

The engine that drained the node recorded the node's boot id on the repair and moved it to
``executing``: it holds the repair (:mod:`medic.repair.leases`) and runs
``NodeProvider.execute`` off the loop (:meth:`~medic.repair.steps.Steps.poll`). Done ->
rejoining; a permanent error fails the repair; a transient one is issued again on the next
pass, the boot id checked first (a power cycle never hits a host that came back).

An engine that takes an executing repair over (its engine was killed or restarted: the lease ran
out) reads what is durable, the node's boot id against the one recorded before the action and
the step record (``repair-step-started`` is in the trail before the action is issued, its outcome
after, :func:`~medic.repair.steps.read_record`), and decides at once:

- the node booted since: the action happened -> rejoining (``boot-id-changed``);
- no ``execute`` was ever started: it never ran -> issued now;
- it succeeded -> rejoining; it was refused for good -> failed (``execute-failed``); it failed
  for a transient reason -> issued again, as its engine would have;
- started with no outcome (in doubt), and the provider sees nothing under way
  (``NodeProvider.in_flight`` False): it never took effect -> issued again, once (the started
  record says ``recovered``); in doubt a second time -> failed (``execution-lost``);
- in doubt, and under way or the provider cannot tell (an operator hook the stopped medic ran,
  which outlives it): the boot id is watched for the longer of the rejoin and hook timeouts (plus
  a minute) from the start; past that -> failed (``execution-lost``): whether the action ran
  cannot be told, and a half-done reprovision is never repeated blindly.

Each such decision is audited once (``repair-recovered``: what was found, what is done).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime
from typing import TYPE_CHECKING, Any

from medic.config.settings import RepairSettings
from medic.domain.audit import AuditKind
from medic.domain.ids import NodeName
from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import Repair, RepairState
from medic.errors import MedicError, PermanentError
from medic.ports import AuditQuery, NodeProvider
from medic.repair.return_to_service import LifecycleOps
from medic.repair.steps import RECOVERED, StepOutcome, StepRecord, read_record

if TYPE_CHECKING:
    from medic.repair.alerts import PassView

__all__ = ["EXECUTE", "Execution"]

EXECUTE = "execute"
"""The step name of the action in the audit trail."""
S = RepairState


class Execution:
    """The ``executing`` state of every repair this engine holds (see the module docstring)."""

    def __init__(
        self,
        ops: LifecycleOps,
        *,
        trail: AuditQuery,
        provider: NodeProvider,
        clock: Callable[[], datetime],
        settings: RepairSettings,
    ) -> None:
        self._ops = ops
        self._trail = trail
        self._provider = provider
        self._now = clock
        # the owner's hook may run up to its own timeout: only past both is an action lost
        self._patience = 60 + max(settings.rejoin_timeout_seconds, settings.hook_timeout_seconds)
        self._known: set[int] = set()
        """Repairs whose execution this engine carries out knowingly: it moved them to
        ``executing``, or decided what to do with one it took over."""
        self._waiting: dict[int, StepRecord] = {}
        """Taken-over repairs whose in-doubt action is waited for (audited once), with the record
        read when the wait began (it does not change: nobody else executes them)."""

    def entered(self, repair: Repair) -> None:
        """This engine moved ``repair`` to ``executing``: nothing is in doubt."""
        self._known.add(repair.id)

    def boot_id(self, node: NodeName) -> str | None:
        """The node's boot id now; None when the provider cannot tell."""
        try:
            return self._provider.boot_id(node)
        except MedicError:
            return None

    def execute(self, repair: Repair, view: PassView) -> Repair | None:
        """EXECUTING: carry the action out, or collect it (see the module docstring)."""
        if self._ops.steps.running(repair, EXECUTE):
            return self._collect(repair, view, self._issue(repair))
        if not self._ops.owns(repair):
            return repair  # its engine is alive (it renews its lease) and executes it
        node = repair.node
        current = self.boot_id(node) if repair.boot_id is not None else None
        if current is not None and current != repair.boot_id:
            why = f"{node} booted since ({repair.boot_id} -> {current}): not executing again"
            moved = self._ops.move(repair, S.REJOINING, view, RepairRule.BOOT_ID_CHANGED, why)
            return self._moved(repair, moved)
        record = self._waiting.get(repair.id) or read_record(self._trail, repair, EXECUTE)
        if repair.id in self._known and record.outcome in (
            StepOutcome.NOT_STARTED,
            StepOutcome.FAILED,
        ):
            return self._collect(repair, view, self._issue(repair))
        return self._recover(repair, view, record)

    # ------------------------------------------------------------------ taken over
    def _recover(self, repair: Repair, view: PassView, record: StepRecord) -> Repair | None:
        """Decide on an execution this engine took over, from its step record and the node."""
        node, action, now = repair.node, repair.action.value, self._now()
        started = record.started_at.isoformat() if record.started_at else "-"
        found = f"{action} on {node}: {record.outcome.value} (started {started})"
        if record.outcome is StepOutcome.NOT_STARTED:
            self._decided(repair, record, "issue", f"{found}: it never ran; issued now")
            return self._collect(repair, view, self._issue(repair))
        if record.outcome is StepOutcome.FAILED:
            why = f"{found}, {record.error}: issued again"
            self._decided(repair, record, "retry", why)
            return self._collect(repair, view, self._issue(repair))
        if record.outcome is StepOutcome.SUCCEEDED:
            why = f"{found}: carried out before this engine took over; waiting for it to rejoin"
            self._decided(repair, record, "rejoin", why)
            moved = self._ops.move(repair, S.REJOINING, view, RepairRule.EXECUTED, why)
            return self._moved(repair, moved)
        if record.outcome is StepOutcome.REFUSED:
            error = record.error or f"{action} refused"
            self._decided(repair, record, "fail", f"{found}: {error}")
            return self._moved(
                repair, self._ops.fail(repair, view, RepairRule.EXECUTE_FAILED, error)
            )
        return self._in_doubt(repair, view, record, found, now)

    def _in_doubt(
        self, repair: Repair, view: PassView, record: StepRecord, found: str, now: datetime
    ) -> Repair | None:
        node = repair.node
        try:
            under_way = self._provider.in_flight(node, repair.action)
        except MedicError:
            under_way = None
        booted = f"{node} did not boot since ({repair.boot_id or 'boot id unknown'})"
        if under_way is False and record.recoveries == 0:
            why = f"{found}, no outcome; {booted} and nothing is under way: issued again, once"
            self._decided(repair, record, "retry", why)
            return self._collect(repair, view, self._issue(repair, why))
        since = record.started_at or repair.updated_at
        if under_way is False or (now - since).total_seconds() > self._patience:
            seen = "issued again once already" if under_way is False else "no news since"
            error = (
                f"{found}, no outcome; {booted} and {seen}: medic cannot tell whether it ran. "
                f"{node} stays drained: check it, then approve a new repair"
            )
            self._decided(repair, record, "fail", error)
            return self._moved(
                repair, self._ops.fail(repair, view, RepairRule.EXECUTION_LOST, error)
            )
        if repair.id not in self._waiting:
            self._waiting[repair.id] = record
            what = "under way" if under_way else "not visible from here (an operator hook?)"
            why = (
                f"{found}, no outcome; {booted}, the action is {what}: waiting for it to boot "
                f"up to {self._patience:g} s from the start"
            )
            self._decided(repair, record, "wait", why, known=False)
        return repair

    def _decided(
        self, repair: Repair, record: StepRecord, decision: str, why: str, *, known: bool = True
    ) -> None:
        if known:
            self._known.add(repair.id)
            self._waiting.pop(repair.id, None)
        payload: dict[str, Any] = {"repair_id": repair.id, "step": EXECUTE}
        payload |= {"found": record.outcome.value, "decision": decision, "why": why}
        payload |= {"boot_id": repair.boot_id, "recoveries": record.recoveries}
        self._ops.audit(AuditKind.REPAIR_RECOVERED, repair, payload, self._now())

    # ------------------------------------------------------------------ the action
    def _issue(self, repair: Repair, recovered: str | None = None) -> Future[None] | None:
        """Start the action (or look at the one running); its future once finished."""
        detail: dict[str, Any] = {"boot_id": repair.boot_id}
        if recovered is not None:
            detail[RECOVERED] = recovered
        node, action = repair.node, repair.action
        return self._ops.steps.poll(
            repair, EXECUTE, lambda: self._provider.execute(node, action, repair.id), **detail
        )

    def _collect(
        self, repair: Repair, view: PassView, finished: Future[None] | None
    ) -> Repair | None:
        if finished is None:
            return repair  # an operator's hook still runs: the loop goes on meanwhile
        try:
            finished.result()
        except PermanentError as exc:
            return self._moved(
                repair, self._ops.fail(repair, view, RepairRule.EXECUTE_FAILED, str(exc))
            )
        except MedicError:
            return repair  # issued again next pass (boot id checked first)
        why = f"{repair.action.value} carried out on {repair.node}; waiting for it to rejoin"
        return self._moved(
            repair, self._ops.move(repair, S.REJOINING, view, RepairRule.EXECUTED, why)
        )

    def _moved(self, repair: Repair, moved: Repair | None) -> Repair | None:
        if moved is not None:
            self._known.discard(repair.id)
            self._waiting.pop(repair.id, None)
        return moved
