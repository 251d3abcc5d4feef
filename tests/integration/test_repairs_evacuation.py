"""A repair moves its node's jobs off through advice that job recovery's controller carries out.

The repair in ``draining`` publishes advice owned by it (``repair_id``) for each job still on the
node; the controller embedded in the loop issues requeue-hold, exclude and release with its ledger
and audit records; the repair moves on once that advice converged. Nothing of it is in memory:
a medic killed between the hold and the release, replaced by a fresh one, or a repair cancelled
meanwhile, still ends with the job released exactly once and requeued exactly once. The
checkpoint baseline of a repair waiting in ``checkpoint`` mode is stored on the repair: a
restarted engine makes the same decision. Job recovery's advice for the same job is waited for
or superseded (:mod:`medic.repair.evacuation`).
"""

from __future__ import annotations

from datetime import datetime

import pytest

from medic.control.executor import ACTOR
from medic.domain.actions import ActionKind, ActionStatus
from medic.domain.advice import Advice, AdviceAction, AdviceRequest, Reconciliation
from medic.domain.audit import AuditKind
from medic.domain.cluster import JobState, Mode
from medic.domain.ids import JobId, NodeName
from medic.domain.repairs import (
    Repair,
    RepairAction,
    RepairPolicy,
    RepairState,
    RequesterKind,
    WaitMode,
)
from medic.errors import PermanentError
from medic.repair import decisions as repair_decisions
from medic.repair.evacuation import EVACUATION_RULE, Evacuation

from .conftest import CLUSTER, Crash, Harness, MakeHarness
from .test_repairs_race import _twin
from .test_repairs_rig import Rig, replace_engine, rig

QUICK = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=0)
"""Approved automatically; the wait for idle ends 10 s after the node was drained."""
_REQUEUE = (ActionKind.REQUEUE_HOLD, ActionKind.EXCLUDE_NODES, ActionKind.RELEASE)


def _waiting(r: Rig) -> tuple[JobId, NodeName]:
    """A job running on a node whose repair waits for it (observe mode: job recovery leaves the
    job where it is, so only the repair moves it)."""
    h = r.h
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    node = h.job(job).nodes[0]
    r.kernel(node)
    r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)
    return job, node


def _killed_after_the_hold(r: Rig, job: JobId, node: NodeName) -> Repair:
    """Run until the controller's requeue-hold of ``job``, and kill medic right after it."""
    h = r.h
    h.scheduler.crash_after = h.scheduler.attempted + 1
    with pytest.raises(Crash):
        h.run(30.0, step=0.5)
    h.scheduler.crash_after = None
    assert h.scheduler.names(job) == ["requeue_hold"]
    assert h.job(job).state is JobState.PENDING and h.job(job).held, "left held by the crash"
    draining = r.repair(node)
    assert draining.state is RepairState.DRAINING
    return draining


def _evacuation(h: Harness, job: JobId) -> Advice:
    advice = h.advice(job)
    assert advice is not None and advice.rule == EVACUATION_RULE
    return advice


def _ledger(h: Harness, job: JobId, advice: Advice) -> list[tuple[ActionKind, ActionStatus]]:
    """The controller's steps of ``advice`` in the ledger (not the per-node exclusion rows)."""
    return [
        (a.kind, a.status)
        for a in h.actions(job)
        if a.node is None and a.advice_id == advice.id and a.kind in _REQUEUE
    ]


def test_a_medic_replaced_after_the_hold_releases_once_and_never_requeues_again(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness, policy=QUICK, mode=Mode.OBSERVE)
    h = r.h
    job, node = _waiting(r)
    draining = _killed_after_the_hold(r, job, node)
    held = _evacuation(h, job)
    assert held.repair_id == draining.id and held.is_active

    # a new medic process: a fresh engine and loop (its controller) on the same store
    h.loop = replace_engine(r, _twin(r))
    done = r.run_until_state(node, RepairState.DONE, within=300)
    assert done.id == draining.id and done.interrupted_jobs == (job,)
    assert h.scheduler.count("requeue_hold", job) == 1, "requeued exactly once"
    assert h.scheduler.count("release", job) == 1, "released exactly once"
    assert h.scheduler.names(job) == ["requeue_hold", "set_excluded_nodes", "release"]
    assert node in h.job(job).excluded_nodes and h.job(job).restart_count == 1
    converged = _evacuation(h, job)
    assert (converged.id, converged.generation) == (held.id, held.generation), "not republished"
    assert converged.status is Reconciliation.CONVERGED
    # the hold the dead medic issued (its outcome never recorded) is seen done, not repeated,
    # and recorded as succeeded (its outcome found from the scheduler), not as skipped
    assert _ledger(h, job, converged) == [
        (ActionKind.REQUEUE_HOLD, ActionStatus.SUCCEEDED),
        (ActionKind.EXCLUDE_NODES, ActionStatus.SUCCEEDED),
        (ActionKind.RELEASE, ActionStatus.SUCCEEDED),
    ]
    # the repair executed only once its advice had converged
    reconciled = next(e for e in h.audit(job, AuditKind.RECONCILIATION))
    executing = next(
        e
        for e in r.events(AuditKind.REPAIR_TRANSITION)
        if e.payload["repair_id"] == done.id and e.payload["to"] == "executing"
    )
    assert reconciled.payload["status"] == "converged" and reconciled.time <= executing.time
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=60)
    assert node not in h.job(job).nodes


def test_a_repair_cancelled_after_the_hold_still_has_its_job_released_exactly_once(
    make_harness: MakeHarness,
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=600)
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)
    h = r.h
    job, node = _waiting(r)
    draining = _killed_after_the_hold(r, job, node)

    repair_decisions.cancel_repair(h.store, draining.id, "alice", h.clock.now())
    h.loop = replace_engine(r, _twin(r))
    h.run_until(lambda: r.node(node)[1] is None, within=60)  # the drain lifted
    assert r.repair(node).state is RepairState.CANCELLED
    assert h.scheduler.count("requeue_hold", job) == 1 and h.scheduler.count("release", job) == 1
    assert not h.job(job).held
    assert _evacuation(h, job).status is Reconciliation.CONVERGED
    h.run(10.0, step=0.5)
    assert h.scheduler.count("requeue_hold", job) == 1 and h.scheduler.count("release", job) == 1
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=60)


def test_evacuation_commands_are_the_controllers_ledger_rows_and_audit_records(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness, policy=QUICK, mode=Mode.OBSERVE)
    h = r.h
    job, node = _waiting(r)
    done = r.run_until_state(node, RepairState.DONE, within=120)
    advice = _evacuation(h, job)
    assert advice.repair_id == done.id and advice.mode is Mode.ACT
    assert advice.action is AdviceAction.REQUEUE and advice.attempt == 0
    assert node in advice.exclude_nodes
    assert advice.reason == f"node {node} under repair {done.id} (reboot)"

    assert _ledger(h, job, advice) == [(kind, ActionStatus.SUCCEEDED) for kind in _REQUEUE]
    added = [a for a in h.actions(job) if a.kind is ActionKind.EXCLUDE_NODES and a.node]
    assert [(a.node, a.advice_id) for a in added if a.node == node] == [(node, advice.id)]
    steps = [
        (e.kind, e.action, e.actor)
        for e in h.audit(job)
        if e.kind in (AuditKind.ACTION_STARTED, AuditKind.ACTION_SUCCEEDED)
        and e.payload["advice_id"] == advice.id
    ]
    assert steps == [
        (kind, step.value, ACTOR)
        for step in _REQUEUE
        for kind in (AuditKind.ACTION_STARTED, AuditKind.ACTION_SUCCEEDED)
    ]
    published = [e for e in h.audit(job, AuditKind.ADVICE) if e.payload.get("repair_id")]
    assert [(e.payload["advice_id"], e.payload["rule"], e.mode) for e in published] == [
        (advice.id, EVACUATION_RULE, Mode.ACT)
    ]
    # the repair itself issued no job command: its own steps are the node's
    repair_steps = {
        e.payload["step"]
        for e in r.events(AuditKind.REPAIR_STEP_STARTED)
        if e.payload["repair_id"] == done.id
    }
    assert repair_steps == {"drain", "execute", "resume"}


def test_a_move_the_scheduler_refuses_for_good_lets_the_repair_go_on(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rig(make_harness, policy=QUICK, mode=Mode.OBSERVE)
    h = r.h
    job, node = _waiting(r)

    def refused(job_id: JobId) -> None:
        raise PermanentError(f"job {job_id}: requeue disabled (test)")

    monkeypatch.setattr(h.sim.scheduler, "requeue_hold", refused)
    executing = r.run_until_state(node, RepairState.EXECUTING, RepairState.REJOINING, within=60)
    advice = _evacuation(h, job)
    assert advice.repair_id == executing.id and advice.status is Reconciliation.ABANDONED
    assert executing.interrupted_jobs == (job,)
    drained = next(
        e
        for e in r.events(AuditKind.REPAIR_TRANSITION)
        if e.payload["repair_id"] == executing.id and e.payload["to"] == "executing"
    )
    assert f"not moved (the scheduler refused): {job}, interrupted" in drained.payload["reason"]
    assert h.scheduler.names(job) == [], "tried once, refused, never again"


def test_the_checkpoint_baseline_survives_a_restart(make_harness: MakeHarness) -> None:
    policy = RepairPolicy(
        auto_xids=frozenset({79}),
        wait_mode=WaitMode.CHECKPOINT,
        max_wait_seconds=3600,
        cooldown_seconds=0,
    )
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)
    h = r.h
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    h.run(3.0)
    node = h.job(job).nodes[0]
    r.kernel(node)
    r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)
    h.run(0.2)  # the first pass in the wait notes the job's last checkpoint on the repair
    waiting = r.repair(node)
    key = f"{job}/0"
    assert waiting.state is RepairState.WAITING_FOR_IDLE and key in waiting.checkpoint_baseline
    base = waiting.checkpoint_baseline[key]

    # the next checkpoint is saved (job recovery stores it after the repair pass) ...
    def saved() -> bool:
        (attempt,) = h.store.list_attempts(CLUSTER, job)
        step = attempt.progress.last_checkpoint_step
        return step is not None and (base is None or step > base)

    h.run_until(saved, within=10)
    assert r.repair(node).state is RepairState.WAITING_FOR_IDLE
    # ... and medic restarts before its repair pass saw it: the new engine decides the same
    h.loop = replace_engine(r, _twin(r))
    h.run(0.2)
    repair = r.repair(node)
    assert repair.state is not RepairState.WAITING_FOR_IDLE, "it did not wait for another one"
    assert repair.checkpoint_baseline == waiting.checkpoint_baseline
    (to_draining,) = [
        e
        for e in r.events(AuditKind.REPAIR_TRANSITION)
        if e.payload["repair_id"] == repair.id and e.payload["to"] == "draining"
    ]
    assert to_draining.payload["rule"] == "checkpoint-saved"


# --- job recovery's advice for the same job -------------------------------------------------
def _draining(h: Harness, job: JobId, node: NodeName) -> Repair:
    """A repair of ``node`` in ``draining`` that interrupted ``job`` (not stored: Evacuation
    reads only the repair it is given)."""
    now = h.clock.now()
    return Repair(
        id=77,
        cluster=CLUSTER,
        node=node,
        action=RepairAction.REBOOT,
        state=RepairState.DRAINING,
        requested_by="medic",
        requester_kind=RequesterKind.MEDIC,
        reason="test",
        alert_keys=("xid:79",),
        created_at=now,
        updated_at=now,
        interrupted_jobs=(job,),
    )


def _running(h: Harness) -> tuple[JobId, NodeName]:
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    return job, h.job(job).nodes[0]


def _recovery(
    h: Harness, job: JobId, action: AdviceAction, mode: Mode, exclude: set[str], now: datetime
) -> Advice:
    request = AdviceRequest(
        cluster=CLUSTER,
        job_id=job,
        attempt=h.job(job).restart_count,
        action=action,
        exclude_nodes=frozenset(NodeName(n) for n in exclude),
        reason="job recovery (test)",
        mode=mode,
        rule="node-fault-requeue",
    )
    return h.store.publish_advice(request, now)


def _moved(h: Harness, job: JobId, node: NodeName, attempt: int = 1) -> bool:
    found = h.job(job)
    return (
        found.state is JobState.RUNNING
        and found.restart_count == attempt
        and node not in found.nodes
    )


def test_job_recoverys_act_mode_requeue_off_the_node_is_waited_for_not_replaced(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(mode=Mode.OBSERVE)
    job, node = _running(h)
    theirs = _recovery(h, job, AdviceAction.REQUEUE, Mode.ACT, {node}, h.clock.now())
    evacuation = Evacuation(h.store, h.scheduler, h.clock.now)
    repair = _draining(h, job, node)

    assert evacuation.settled(repair, frozenset()) is None, "still on the node"
    assert h.advice(job) == theirs, "not published over"
    h.run_until(lambda: _moved(h, job, node), within=60)
    assert evacuation.settled(repair, frozenset()) == (), "off the node: settled"
    assert h.scheduler.count("requeue_hold", job) == 1


def test_other_advice_for_a_job_still_on_the_node_is_superseded_keeping_its_exclusions(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(mode=Mode.OBSERVE)
    job, node = _running(h)
    theirs = _recovery(h, job, AdviceAction.REQUEUE, Mode.OBSERVE, {"node012"}, h.clock.now())
    evacuation = Evacuation(h.store, h.scheduler, h.clock.now)
    repair = _draining(h, job, node)

    assert evacuation.settled(repair, frozenset({NodeName("node011")})) is None
    ours = _evacuation(h, job)
    assert (ours.id, ours.generation) == (theirs.id, theirs.generation + 1), "a new decision"
    assert ours.repair_id == repair.id and ours.mode is Mode.ACT
    assert ours.exclude_nodes == {node, "node011", "node012"}
    assert evacuation.settled(repair, frozenset()) is None
    assert _evacuation(h, job).generation == ours.generation, "published once"
    h.run_until(lambda: _evacuation(h, job).status is Reconciliation.CONVERGED, within=10)
    assert evacuation.settled(repair, frozenset()) == ()


def test_job_recoverys_advice_for_the_next_attempt_replacing_the_repairs_is_fine(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(mode=Mode.OBSERVE)
    job, node = _running(h)
    evacuation = Evacuation(h.store, h.scheduler, h.clock.now)
    repair = _draining(h, job, node)
    assert evacuation.settled(repair, frozenset()) is None
    h.run_until(lambda: _moved(h, job, node), within=60)

    # the job fails again elsewhere, before the repair looked: job recovery decides anew
    theirs = _recovery(h, job, AdviceAction.REQUEUE, Mode.OBSERVE, {"node012"}, h.clock.now())
    assert theirs.repair_id is None and theirs.attempt == 1
    assert evacuation.settled(repair, frozenset()) == (), "off the node: nothing republished"
    assert h.advice(job) == theirs
