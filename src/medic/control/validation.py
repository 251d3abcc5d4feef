"""Revalidation of a repaired machine: the configured test suite and its verdict.

The suite is ``repair.validation_commands``: shell commands separated by `` ;; ``, each optionally
named by a ``[name]`` prefix (otherwise the command's first word names it), with ``{node}`` and
``{repair_id}`` placeholders; for example a DCGM diagnostic, a GPU burn, an NCCL all-reduce, an
InfiniBand and a storage test::

    [dcgm] dcgmi diag -r 2 --host {node} ;; [nccl] ssh {node} all_reduce_perf -b 1G -g 8

Every command runs (through an injected runner, so this module does no I/O of its own) with a
timeout, and the verdict has three outcomes:

- **pass**: every command exited 0;
- **fail**: at least one exited with another status: that is an explicit failure, so a ticket
  is opened with each test's result and log, and the machine stays out of service;
- **abort**: the suite could not run (no suite configured, no runner, a command missing or not
  executable (126/127), a command past its timeout) and nothing failed explicitly: the machine
  returns to its previous state and is not marked faulty.

The tests after an aborted one are not run (the suite cannot give a clean answer any more).

:class:`ReturnToService` holds the last steps of the repair lifecycle:

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
"""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from medic.config.settings import RepairSettings
from medic.control.steps import Steps
from medic.domain.audit import AuditKind
from medic.domain.cluster import NodeState, is_medic_reason
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    Repair,
    RepairAction,
    RepairState,
    RepairUpdate,
    ValidationOutcome,
    ValidationResult,
)
from medic.errors import MedicError
from medic.ports import NodeProvider, Scheduler

if TYPE_CHECKING:
    from medic.control.repair_alerts import PassView, RepairStores

__all__ = [
    "OUT_OF_SERVICE",
    "SEPARATOR",
    "VALIDATION_ALERT",
    "CheckRunner",
    "LifecycleOps",
    "ReturnToService",
    "ValidationCheck",
    "Validator",
    "failure_alert",
    "foreign",
    "parse_validation_commands",
    "result_payload",
    "ticket_id",
    "validation_failed_nodes",
]

logger = logging.getLogger(__name__)

SEPARATOR = " ;; "
VALIDATION_ALERT = "validation:failed"
"""Alert key of a failed revalidation: critical, unmapped (a person decides), the evidence of the
next repair of the machine; resolved when a later revalidation passes."""
LOG_LIMIT = 2_000
"""Characters of each test's output kept in the result (its tail)."""
_NAMED = re.compile(r"^\[(?P<name>[^\]\s]{1,64})\]\s*(?P<command>.*)$", re.DOTALL)
_CANNOT_RUN = frozenset({126, 127})

CheckRunner = Callable[[str, Mapping[str, str], float], tuple[int | None, str]]
"""``(command, extra environment, timeout seconds) -> (exit status, output)``; the status is None
when the command could not start or ran past its timeout (``medic.schedulers.hooks.run_command``).
"""


@dataclass(frozen=True, slots=True)
class ValidationCheck:
    name: str
    command: str
    """With ``{node}`` / ``{repair_id}`` placeholders."""


def parse_validation_commands(text: str) -> tuple[ValidationCheck, ...]:
    """The suite in ``text`` (see the module docstring); blanks between separators are skipped."""
    checks = []
    for i, part in enumerate(p.strip() for p in text.split(SEPARATOR.strip())):
        if not part:
            continue
        match = _NAMED.match(part)
        if match and match["command"].strip():
            name, command = match["name"], match["command"].strip()
        else:
            words = part.split()
            name, command = f"{words[0].rsplit('/', 1)[-1]}#{i + 1}", part
        checks.append(ValidationCheck(name, command))
    return tuple(checks)


def ticket_id(cluster: ClusterName, repair_id: int, attempt: int) -> str:
    """The hardware ticket of a failed validation (stable: the same failure, the same ticket)."""
    return f"medic-{cluster}-r{repair_id}-v{attempt}"


def _render(template: str, node: NodeName, repair_id: int) -> str:
    return template.replace("{node}", shlex.quote(str(node))).replace(
        "{repair_id}", shlex.quote(str(repair_id))
    )


class Validator:
    """Runs the suite for one repaired node and gives its :class:`ValidationResult`."""

    def __init__(
        self,
        checks: tuple[ValidationCheck, ...],
        runner: CheckRunner | None,
        *,
        timeout: float,
    ) -> None:
        self.checks = checks
        self._run = runner
        self._timeout = timeout

    def validate(
        self,
        cluster: ClusterName,
        repair_id: int,
        node: NodeName,
        now: Callable[[], datetime],
        attempt: int = 1,
    ) -> tuple[ValidationResult, str]:
        """(result, one-line reason). ``attempt``: this repair's validation number (ticket id)."""
        tests: list[tuple[str, bool, str]] = []
        aborted = ""
        if not self.checks:
            aborted = "no validation commands are configured (repair.validation_commands)"
        elif self._run is None:
            aborted = "no command runner is available to run the validation suite"
        for check in self.checks if not aborted else ():
            command = _render(check.command, node, repair_id)
            env = {"MEDIC_NODE": str(node), "MEDIC_REPAIR_ID": str(repair_id)}
            assert self._run is not None
            status, output = self._run(command, {**env, "MEDIC_CHECK": check.name}, self._timeout)
            log = output[-LOG_LIMIT:]
            if status is None or status in _CANNOT_RUN:
                why = "timed out or could not start" if status is None else f"exit {status}"
                tests.append((check.name, False, f"[aborted: {why}] {log}"))
                aborted = f"{check.name} could not run ({why})"
                break
            tests.append(
                (check.name, status == 0, log if status == 0 else f"[exit {status}] {log}")
            )
        failed = [t[0] for t in tests if not t[1] and not t[2].startswith("[aborted")]
        if failed:
            outcome = ValidationOutcome.FAIL
            reason = f"failed: {', '.join(failed)}"
        elif aborted:
            outcome, reason = ValidationOutcome.ABORT, f"aborted: {aborted}"
        else:
            outcome = ValidationOutcome.PASS
            reason = f"passed: {', '.join(t[0] for t in tests)}"
        ticket = ticket_id(cluster, repair_id, attempt) if failed else None
        result = ValidationResult(repair_id, node, outcome, tuple(tests), now(), ticket)
        return result, reason


def result_payload(result: ValidationResult, reason: str) -> dict[str, object]:
    """The ``repair-validation`` audit payload of ``result``."""
    tests = [{"name": n, "passed": p, "log": log[-500:]} for n, p, log in result.tests]
    return {
        "repair_id": result.repair_id,
        "outcome": result.outcome.value,
        "reason": reason,
        "tests": tests,
        "ticket": result.ticket,
    }


def failure_alert(
    cluster: ClusterName, repair: Repair, ticket: str, reason: str, now: datetime
) -> Alert:
    """The critical ``validation:failed`` alert that keeps a machine out after a failed
    revalidation (until a later repair's revalidation passes)."""
    return Alert(
        cluster=cluster,
        node=repair.node,
        key=VALIDATION_ALERT,
        source=AlertSource.DETECTOR,
        summary=f"revalidation failed (ticket {ticket})",
        description=f"{repair.node} failed revalidation after repair {repair.id}: {reason}",
        severity=Severity.CRITICAL,
        evidence={"ticket": ticket, "repair_id": repair.id, "reason": reason},
        detector="medic-validation",
        first_seen=now,
        last_seen=now,
    )


def validation_failed_nodes(repairs: Iterable[Repair]) -> frozenset[NodeName]:
    """Nodes whose latest finished repair (cancelled ones aside) failed its revalidation."""
    latest: dict[NodeName, Repair] = {}
    for r in repairs:
        if r.state.is_terminal and r.state is not RepairState.CANCELLED:
            known = latest.get(r.node)
            if known is None or (r.updated_at, r.id) > (known.updated_at, known.id):
                latest[r.node] = r
    return frozenset(
        n
        for n, r in latest.items()
        if r.state is RepairState.FAILED and (r.error or "").startswith("validation failed")
    )


class LifecycleOps(Protocol):
    """What the return to service uses of :class:`~medic.control.lifecycle.Lifecycle`."""

    def move(
        self,
        repair: Repair,
        new: RepairState,
        view: PassView,
        rule: str,
        reason: str,
        update: RepairUpdate | None = None,
        **extra: Any,
    ) -> Repair | None: ...

    def fail(self, repair: Repair, view: PassView, rule: str, error: str) -> Repair | None: ...

    def do(self, repair: Repair, step: str, work: Callable[[], object], **detail: Any) -> None: ...

    def audit(
        self, kind: AuditKind, repair: Repair, payload: dict[str, Any], now: datetime
    ) -> None: ...

    def owns(self, repair: Repair, stale_after: float = ...) -> bool: ...

    @property
    def steps(self) -> Steps: ...


class ReturnToService:
    """The last steps of a repair: rejoining, revalidation, and lifting medic's drain (with a
    sweep for a drain a finished repair left behind). One engine owns a validation in flight."""

    def __init__(
        self,
        ops: LifecycleOps,
        *,
        store: RepairStores,
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
            return self._ops.move(repair, RepairState.DONE, view, "removed", why)
        try:
            back = self._provider.rejoined(node, repair.action, repair.boot_id)
        except MedicError:
            back = False
        if not back:
            limit = self._settings.rejoin_timeout_seconds
            if (now - repair.updated_at).total_seconds() > limit:
                return self._ops.fail(
                    repair, view, "rejoin-timeout", f"{node} not back in {limit:g} s"
                )
            return repair
        validate = (
            repair.action in view.policy.validate_after
            or self._settings.validate_always
            or node in view.validation_failed
        )
        if not validate:
            return self._back_in_service(repair, view, "rejoined", f"{node} is back")
        why = f"{node} is back; running the validation suite"
        moved = self._ops.move(repair, RepairState.VALIDATING, view, "rejoined", why)
        if moved is not None:  # kept out of service while it is tested (medic's drain)
            reason = f"medic: repair {repair.id} validating"
            try:
                self._ops.do(repair, "drain", lambda: self._scheduler.drain_node(node, reason))
            except MedicError as exc:
                logger.warning("repair %s: cannot hold %s for validation: %s", repair.id, node, exc)
        return moved

    def _back_in_service(
        self, repair: Repair, view: PassView, rule: str, why: str, error: str | None = None
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

    def sweep(self, view: PassView, settle: Callable[[Repair], bool]) -> None:
        """Lift medic's drain left on a node whose repair is done (the engine that finished it
        failed to resume it, or stopped right before) or was cancelled after the node was
        drained; ``settle`` first releases the jobs a cancelled repair left held (False: not
        yet, the drain stays until a later pass)."""
        busy = {r.node for r in view.open_repairs}
        for node in view.nodes.values():
            found = _REPAIR_DRAIN.match(node.reason or "")
            if found is None or node.state not in OUT_OF_SERVICE or node.name in busy:
                continue
            repair = self._store.get_repair(int(found[1]))
            if (
                repair is not None
                and repair.state in (RepairState.DONE, RepairState.CANCELLED)
                and repair.node == node.name
                and (view.now - repair.updated_at).total_seconds() > _SWEEP_GRACE_SECONDS
                and (repair.state is RepairState.DONE or settle(repair))
            ):
                self._lift(repair)

    def validate(self, repair: Repair, view: PassView) -> Repair | None:
        """VALIDATING: run the suite (the engine that moved it here; another one after a while)."""
        patience = self._settings.validation_timeout_seconds * max(1, len(self._validator.checks))
        if not self._ops.owns(repair, patience + 60):
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
            return self._back_in_service(repair, view, "validation-passed", reason)
        if result.outcome is ValidationOutcome.ABORT and repair.node in view.validation_failed:
            # its previous state is out of service: it stays out, still not marked faulty anew
            error = f"validation failed before and this revalidation {reason}"
            return self._ops.fail(repair, view, "validation-aborted", error)
        if result.outcome is ValidationOutcome.ABORT:
            why = f"validation {reason}: back in service, not marked faulty"
            return self._back_in_service(repair, view, "validation-aborted", why, reason)
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
        return self._ops.fail(repair, view, "validation-failed", error)


OUT_OF_SERVICE = (NodeState.DRAINED, NodeState.DRAINING, NodeState.DOWN)
REQUEST_PREFIX = "medic-request:"
"""A drain reason asking medic for a repair (``medic.schedulers.slurm.requests``)."""
_REPAIR_DRAIN = re.compile(r"^medic: repair (\d+) ")
_SWEEP_GRACE_SECONDS = 30.0


def foreign(reason: str | None) -> bool:
    """A drain or down reason that is not medic's to override (a ``medic-request:`` drain was
    handed to medic by whoever wrote it)."""
    text = reason or ""
    return bool(text) and not is_medic_reason(text) and not text.lower().startswith(REQUEST_PREFIX)
