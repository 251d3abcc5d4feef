"""A medic killed in the middle of a repair's action, and the medic that replaces it.

The engine is discarded at a crash point (:class:`~conftest.Crash`, as with SIGKILL nothing after
it runs) around the ``execute`` step: before its started record, right after it (the action never
issued), after the action ran but before its outcome was recorded. A new engine over the same
store waits out the stopped engine's lease (30 s), takes the repair over (audited) and decides
from the step record and the node within a pass or two: the action is issued once, issued
again once, or not repeated; an operator hook whose fate cannot be told is never repeated.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from medic.config.settings import RepairSettings
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.cluster import NodeState
from medic.domain.repairs import Repair, RepairAction, RepairPolicy, RepairState
from medic.ports import NodeProvider
from medic.repair.engine import RepairEngine
from medic.repair.leases import LEASE_SECONDS
from medic.schedulers.hooks import HookNodeProvider, run_command
from medic.schedulers.sim import SimCluster

from .conftest import Crash, MakeHarness
from .test_repairs_rig import LIFECYCLE, Rig, replace_engine, rig

NODE = "node005"
SETTINGS = RepairSettings(rejoin_timeout_seconds=120, hook_timeout_seconds=30)


def _restart(r: Rig, provider: NodeProvider | None = None) -> datetime:
    """A new medic process on the same store: a new engine and loop, nothing kept in memory."""
    engine = RepairEngine(
        store=r.h.store,
        scheduler=r.h.scheduler,
        provider=provider or r.h.sim.node_provider,
        clock=r.h.clock,
        settings=SETTINGS,
        validation_runner=run_command,
    )
    r.h.loop = replace_engine(r, engine)
    return r.h.clock.now()


def _kill_at(r: Rig, monkeypatch: pytest.MonkeyPatch, kind: AuditKind, *, written: bool) -> None:
    """Kill medic as it writes ``kind`` of the ``execute`` step (``written``: right after)."""
    store = r.h.store
    append = store.append_audit

    def killed(event: AuditEvent) -> int:
        if event.kind is kind and event.payload.get("step") == "execute":
            monkeypatch.undo()  # one crash: the next process writes normally
            if written:
                append(event)
            raise Crash(f"killed at {kind} of execute")
        return append(event)

    monkeypatch.setattr(store, "append_audit", killed)


def _crash(r: Rig) -> Repair:
    """Run until the crash point; the repair as the dead medic left it."""
    r.kernel(NODE)
    with pytest.raises(Crash):
        r.h.run(10.0, step=0.5)
    left = r.repair(NODE)
    assert left.state is RepairState.EXECUTING and left.owner is not None
    assert r.node(NODE)[0] in (NodeState.DRAINED, NodeState.DOWN), "left drained"
    return left


def _events(r: Rig, kind: AuditKind, repair: Repair) -> list[AuditEvent]:
    return [e for e in r.events(kind) if e.payload.get("repair_id") == repair.id]


def _steps(r: Rig, repair: Repair) -> list[tuple[AuditKind, str | None]]:
    kinds = (AuditKind.REPAIR_STEP_STARTED, AuditKind.REPAIR_STEP_SUCCEEDED)
    return [
        (e.kind, e.payload.get("recovered"))
        for e in r.events()
        if e.kind in kinds
        and e.payload.get("repair_id") == repair.id
        and e.payload.get("step") == "execute"
    ]


def _taken_over(r: Rig, left: Repair, restarted: datetime) -> datetime:
    """The new engine took the repair over once the dead one's lease ran out, not before."""
    (taken,) = _events(r, AuditKind.REPAIR_TAKEN_OVER, left)
    assert taken.payload["previous_owner"] == left.owner and taken.payload["state"] == "executing"
    assert left.lease_until is not None and taken.time >= left.lease_until
    assert (taken.time - restarted).total_seconds() <= LEASE_SECONDS + 1
    return taken.time


def _moved_on(r: Rig, left: Repair, after: datetime) -> None:
    """It left ``executing`` within a pass or two (0.5 s each) of the takeover."""
    (moved,) = [
        e for e in _events(r, AuditKind.REPAIR_TRANSITION, left) if e.payload["from"] == "executing"
    ]
    assert moved.payload["to"] == "rejoining"
    assert (moved.time - after).total_seconds() <= 1.0


def _every_start_has_an_outcome(r: Rig, repair: Repair) -> list[str | None]:
    """No ``repair-step-started`` of the repair is left without an outcome after it; the errors
    of the outcomes the engine that took over recorded as unknown."""
    kinds = {AuditKind.REPAIR_STEP_SUCCEEDED, AuditKind.REPAIR_STEP_FAILED}
    open_steps: dict[str, int] = {}
    unknown: list[str | None] = []
    for e in sorted(
        (e for e in r.events() if e.payload.get("repair_id") == repair.id),
        key=lambda e: e.id or 0,
    ):
        step = str(e.payload.get("step"))
        if e.kind is AuditKind.REPAIR_STEP_STARTED:
            open_steps[step] = open_steps.get(step, 0) + 1
        elif e.kind in kinds and open_steps.get(step):
            open_steps[step] -= 1
            if e.payload.get("unknown"):
                unknown.append(e.payload.get("error"))
    assert {s: n for s, n in open_steps.items() if n} == {}, "a started step has no outcome"
    return unknown


def _recovered(r: Rig, left: Repair) -> tuple[str, str]:
    (event,) = _events(r, AuditKind.REPAIR_RECOVERED, left)
    return event.payload["found"], event.payload["decision"]


def test_a_repair_killed_before_its_action_ran_is_carried_out_by_the_next_medic(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rig(make_harness, settings=SETTINGS)
    _kill_at(r, monkeypatch, AuditKind.REPAIR_STEP_STARTED, written=False)
    left = _crash(r)
    assert r.h.sim.repairs == [], "the action never ran"

    restarted = _restart(r)
    done = r.run_until_state(NODE, RepairState.DONE, within=LEASE_SECONDS + 30)
    _moved_on(r, left, _taken_over(r, left, restarted))
    assert _recovered(r, left) == ("not-started", "issue")
    assert [(n, a) for n, a, *_ in r.h.sim.repairs] == [(NODE, RepairAction.REBOOT)]
    assert _steps(r, left) == [
        (AuditKind.REPAIR_STEP_STARTED, None),
        (AuditKind.REPAIR_STEP_SUCCEEDED, None),
    ]
    assert r.transitions(done.id) == LIFECYCLE
    assert r.node(NODE) == (NodeState.IDLE, None), "back in service"


def test_an_action_started_with_no_outcome_and_nothing_under_way_is_issued_again_once(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rig(make_harness, settings=SETTINGS)
    _kill_at(r, monkeypatch, AuditKind.REPAIR_STEP_STARTED, written=True)
    left = _crash(r)
    assert r.h.sim.repairs == [], "killed after the record, before the action"

    restarted = _restart(r)
    r.run_until_state(NODE, RepairState.DONE, within=LEASE_SECONDS + 30)
    _moved_on(r, left, _taken_over(r, left, restarted))
    assert _recovered(r, left) == ("in-doubt", "retry")
    (first, _), (again, why), (succeeded, _) = _steps(r, left)  # issued again once, audited
    assert (first, again, succeeded) == (
        AuditKind.REPAIR_STEP_STARTED,
        AuditKind.REPAIR_STEP_STARTED,
        AuditKind.REPAIR_STEP_SUCCEEDED,
    )
    assert why is not None and "did not boot since" in why and "nothing is under way" in why
    assert [(n, a) for n, a, *_ in r.h.sim.repairs] == [(NODE, RepairAction.REBOOT)]
    assert r.node(NODE) == (NodeState.IDLE, None)
    # the dead engine's start got its outcome at the takeover, explicitly unknown
    [unknown] = _every_start_has_an_outcome(r, left)
    assert unknown is not None and unknown.startswith("outcome unknown: ")


def test_an_action_that_ran_before_the_kill_is_not_repeated(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rig(make_harness, settings=SETTINGS)
    _kill_at(r, monkeypatch, AuditKind.REPAIR_STEP_SUCCEEDED, written=False)
    left = _crash(r)
    assert [(n, a) for n, a, *_ in r.h.sim.repairs] == [(NODE, RepairAction.REBOOT)]

    restarted = _restart(r)
    r.run_until_state(NODE, RepairState.DONE, within=LEASE_SECONDS + 30)
    _moved_on(r, left, _taken_over(r, left, restarted))
    moved = [
        t for t in _events(r, AuditKind.REPAIR_TRANSITION, left) if t.payload["to"] == "rejoining"
    ]
    assert moved[0].payload["rule"] == "boot-id-changed"
    assert [(n, a) for n, a, *_ in r.h.sim.repairs] == [(NODE, RepairAction.REBOOT)], "once"
    assert _steps(r, left) == [(AuditKind.REPAIR_STEP_STARTED, None)]


def _hooked(calls: list[str]) -> Callable[[SimCluster], NodeProvider]:
    def runner(command: str, env: object, timeout: float) -> tuple[int | None, str]:
        calls.append(command)
        return 0, ""

    def build(sim: SimCluster) -> NodeProvider:
        commands = {RepairAction.REBOOT: "reprovision-tool {node}"}
        return HookNodeProvider(sim.node_provider, commands, timeout=30, runner=runner)

    return build


def test_an_operator_hook_in_doubt_is_never_repeated_blindly(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    hooked = _hooked(calls)
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=60, cooldown_seconds=0)
    r = rig(make_harness, policy=policy, settings=SETTINGS, provider=hooked)
    _kill_at(r, monkeypatch, AuditKind.REPAIR_STEP_STARTED, written=True)
    left = _crash(r)

    # the hook may still run (it outlives the medic that started it): nobody can see it
    _restart(r, hooked(r.h.sim))
    r.h.run(LEASE_SECONDS + 5, step=0.5)
    assert r.repair(NODE).state is RepairState.EXECUTING
    assert _recovered(r, left) == ("in-doubt", "wait")
    failed = r.run_until_state(NODE, RepairState.FAILED, within=200)
    assert failed.error is not None and "cannot tell whether it ran" in failed.error
    assert f"{NODE} stays drained" in failed.error
    assert r.transitions(failed.id)[-1] == ("executing", "failed")
    assert calls == [], "never issued again"
    assert r.node(NODE)[0] is NodeState.DRAINED
