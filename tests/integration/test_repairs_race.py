"""Two repair engines (two control-plane replicas) on one store and one cluster: every write is
a compare-and-set or an idempotent insert, so for each repair exactly one of them acts."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace

import pytest

from medic.config.settings import RepairSettings
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, JobState, Mode, NodeState
from medic.domain.ids import JobId, NodeName
from medic.domain.repairs import RepairAction, RepairPolicy, RepairState
from medic.repair import decisions as repair_decisions
from medic.repair.engine import RepairEngine
from medic.repair.lifecycle import PassView
from medic.schedulers.hooks import run_command

from .conftest import Crash, MakeHarness
from .test_repairs_rig import LIFECYCLE, Rig, replace_engine, rig


def _twin(r: Rig) -> RepairEngine:
    """A second engine on the same store, scheduler and nodes (another replica)."""
    return RepairEngine(
        store=r.h.store,
        scheduler=r.h.scheduler,
        provider=r.h.sim.node_provider,
        clock=r.h.clock,
        settings=RepairSettings(rejoin_timeout_seconds=120),
        validation_runner=run_command,
    )


def _race(engines: list[RepairEngine], r: Rig) -> None:
    """One pass of every engine at the same time, on the same observations."""
    nodes = list(r.h.sim.scheduler.list_nodes())
    jobs = list(r.h.sim.scheduler.list_jobs())
    found = r.h.loop._diagnoser.scan(r.h.logs.read_new(jobs))
    gate = threading.Barrier(len(engines))
    errors: list[BaseException] = []

    def one(engine: RepairEngine) -> None:
        gate.wait()
        try:
            engine.run_pass(nodes, jobs, found)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []


def test_two_engines_racing_on_one_repair_only_one_acts(make_harness: MakeHarness) -> None:
    r = rig(make_harness)
    engines = [r.engine, _twin(r)]
    boot = r.h.sim.node_provider.boot_id(NodeName("node004"))
    r.kernel("node004")
    for _ in range(60):
        r.h.clock.advance(0.5)
        _race(engines, r)
        if any(x.state is RepairState.DONE for x in r.repairs("node004")):
            break
    repair = r.repair("node004")  # one recommendation, not two
    assert repair.state is RepairState.DONE
    # each transition happened (and was audited) once, in order
    assert r.transitions(repair.id) == LIFECYCLE
    # one drain, one reboot, one resume
    assert Counter(r.h.scheduler.names("node004")) == {"drain_node": 1, "resume_node": 1}
    assert [(n, a) for n, a, *_ in r.h.sim.repairs] == [("node004", RepairAction.REBOOT)]
    executed = [
        e for e in r.events(AuditKind.REPAIR_STEP_STARTED) if e.payload["step"] == "execute"
    ]
    assert len(executed) == 1
    assert r.h.sim.node_provider.boot_id(NodeName("node004")) != boot
    assert r.node("node004") == (NodeState.IDLE, None)
    assert len(r.events(AuditKind.REPAIR_RECOMMENDED)) == 1


def test_a_stale_engine_loses_the_compare_and_set_and_does_nothing(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness)
    late = _twin(r)
    r.kernel("node011")
    r.h.run(0.5)  # engine one recommends (approved automatically) and starts it at once
    moved_on = r.repair("node011")
    assert moved_on.state in (RepairState.EXECUTING, RepairState.REJOINING)
    # engine two read the repair while it was still approved, and tries to start it now
    stale = replace(moved_on, state=RepairState.APPROVED)
    nodes = {n.name: n for n in r.h.sim.scheduler.list_nodes()}
    view = PassView(
        now=r.h.clock.now(),
        policy=r.h.store.get_repair_policy(stale.cluster),
        nodes=nodes,
        jobs=[],
        firing={NodeName("node011"): r.alerts("node011")},
        open_repairs=[stale],
        cluster_nodes=len(nodes),
        pools={},
    )
    commands = len(r.h.scheduler.calls)
    assert late.lifecycle.advance(stale, view) == stale  # it lost: nothing moved
    assert len(r.h.scheduler.calls) == commands and view.moved == []  # nothing issued
    assert r.repair("node011").state is moved_on.state


def test_a_medic_killed_between_hold_and_release_releases_the_job_after_restart(
    make_harness: MakeHarness,
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=0)
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)  # the job stays until the repair
    h = r.h
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    node = h.job(job).nodes[0]
    r.kernel(node)
    r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)
    h.scheduler.crash_after = h.scheduler.attempted + 1  # killed right after the next command
    with pytest.raises(Crash):
        h.run(30.0, step=0.5)
    assert h.scheduler.names(job) == ["requeue_hold"]
    assert h.job(job).state is JobState.PENDING and h.job(job).held, "left held by the crash"

    # a new medic process: nothing in memory, only the store (and its audit trail)
    h.scheduler.crash_after = None
    h.loop = replace_engine(r, _twin(r))
    done = r.run_until_state(node, RepairState.DONE, within=300)  # takes the drain over
    assert h.scheduler.names(job) == ["requeue_hold", "set_excluded_nodes", "release"]
    assert not h.job(job).held and node in h.job(job).excluded_nodes
    assert done.interrupted_jobs == (job,)
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=60)
    assert node not in h.job(job).nodes


def test_a_hold_that_is_not_the_repairs_is_left_alone(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=0)
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)  # the job stays until the repair
    h = r.h
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    node = h.job(job).nodes[0]
    r.kernel(node)
    r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)

    def killed(job_id: JobId) -> Job:
        raise Crash(f"killed before reading {job_id}")

    # killed right after the wait decision, at the drain step's first read of the job: before
    # the repair published any advice for it (after that, a hold is the controller's to finish)
    monkeypatch.setattr(h.scheduler, "get_job", killed)
    with pytest.raises(Crash):
        h.run(30.0, step=0.5)
    draining = r.repair(node)
    assert draining.state is RepairState.DRAINING
    assert draining.interrupted_jobs == (job,), "the job ran when the wait was decided"
    assert h.job(job).state is JobState.RUNNING and h.scheduler.names(job) == []
    assert (advice := h.advice(job)) is None or advice.repair_id is None

    # medic is down; a person holds the job (on the cluster, not through medic)
    h.sim.scheduler.requeue_hold(job)
    assert h.job(job).state is JobState.PENDING and h.job(job).held

    # a new medic process takes the drain over: the job is an interrupted job of the repair, held,
    # but not by the repair (it published no advice for it): off the node, nothing to move
    monkeypatch.undo()
    h.loop = replace_engine(r, _twin(r))
    done = r.run_until_state(node, RepairState.DONE, within=300)
    assert done.id == draining.id and done.interrupted_jobs == (job,)
    assert h.scheduler.names(job) == [], "medic never released (or touched) someone else's hold"
    assert h.job(job).state is JobState.PENDING and h.job(job).held
    assert (advice := h.advice(job)) is None or advice.repair_id is None


def test_a_repair_cancelled_after_the_drain_gives_the_node_back(
    make_harness: MakeHarness,
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=600, cooldown_seconds=600)
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)
    h = r.h
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    node = h.job(job).nodes[0]
    r.kernel(node)
    waiting = r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)
    assert r.node(node) == (NodeState.DRAINING, f"medic: repair {waiting.id} reboot")

    repair_decisions.cancel_repair(h.store, waiting.id, "alice", h.clock.now())
    h.run_until(lambda: r.node(node)[1] is None, within=60)
    assert r.node(node)[0] is NodeState.ALLOCATED, "back in service, the job still on it"
    assert h.job(job).state is JobState.RUNNING and h.scheduler.names(job) == []


def test_a_repair_cancelled_while_a_job_is_held_still_has_it_released_then_the_node(
    make_harness: MakeHarness,
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=600)
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)
    h = r.h
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    node = h.job(job).nodes[0]
    r.kernel(node)
    r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)
    h.scheduler.crash_after = h.scheduler.attempted + 1  # killed right after the requeue-hold
    with pytest.raises(Crash):
        h.run(30.0, step=0.5)
    draining = r.repair(node)
    assert draining.state is RepairState.DRAINING and h.job(job).held

    h.scheduler.crash_after = None
    h.loop = replace_engine(r, _twin(r))  # restarted, and a person cancels meanwhile
    repair_decisions.cancel_repair(h.store, draining.id, "alice", h.clock.now())
    h.run_until(lambda: r.node(node)[1] is None, within=60)
    # the controller finished the repair's advice all the same: once each, never requeued again
    assert h.scheduler.names(job) == ["requeue_hold", "set_excluded_nodes", "release"]
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=60)
