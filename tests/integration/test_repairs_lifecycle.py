"""The repair lifecycle on the simulator, in virtual time: approval, cordon, wait for idle (and its
timeout), drain, execute, rejoin (and its timeout), revalidation (pass, fail, abort), and the
job-aware rules (job recovery avoids nodes under repair; interrupted jobs are recorded)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from medic.config.settings import RepairSettings
from medic.domain.advice import AdviceAction
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job, JobState, Mode, NodeState
from medic.domain.diagnosis import Severity
from medic.domain.faults import FaultKind
from medic.domain.ids import JobId, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    NodeHealth,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequesterKind,
    ValidationOutcome,
    WaitMode,
)
from medic.errors import TransientError
from medic.ports import Clock, Scheduler
from medic.repair import decisions as repair_decisions
from medic.repair import intake
from medic.repair.engine import RepairEngine
from medic.schedulers.hooks import run_command
from medic.schedulers.sim import SimNodeProvider
from medic.schedulers.slurm.adapter import is_opted_in

from .conftest import CLUSTER, MakeHarness, RecordingScheduler
from .test_repairs_rig import LIFECYCLE, XID79, Rig, replace_engine, rig

MANUAL = RepairPolicy(cooldown_seconds=0)
"""Approve before repair (the default), no cooldown."""


def test_a_job_fault_becomes_a_pending_repair_that_runs_once_approved(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness, policy=MANUAL)
    h = r.h
    job = h.submit("pretrain", partition="p0")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    r.kernel("node003")  # an idle node of the same partition breaks first: pending, degraded
    h.run(1.0)
    assert r.repair("node003").state is RepairState.PENDING_APPROVAL
    assert r.repair("node003").rule == "approval-required"

    faulty = h.job(job).nodes[-1]
    h.inject(FaultKind.GPU_FELL_OFF_BUS, job, faulty)
    h.run_until(lambda: bool(r.repairs(faulty)), within=10)
    pending = r.repair(faulty)
    assert pending.state is RepairState.PENDING_APPROVAL and pending.action is RepairAction.REBOOT
    health = r.engine.health()
    assert health[NodeName(faulty)] is NodeHealth.DEGRADED  # critical alert: out of placement
    assert {faulty, "node003"} <= r.engine.placement_exclusions()

    # job recovery never puts the job back on a node under repair or degraded by a critical alert
    h.run_until(lambda: h.job(job).restart_count == 1, within=30)
    advice = h.advice(job)
    assert advice is not None and advice.action is AdviceAction.REQUEUE
    assert {faulty, "node003"} <= advice.exclude_nodes
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=30)
    assert not {faulty, "node003"} & set(h.job(job).nodes)

    # nothing happens to the node until a person approves
    h.run(5.0)
    assert r.repair(faulty).state is RepairState.PENDING_APPROVAL
    assert r.h.sim.repairs == []
    repair_decisions.approve_repair(h.store, pending.id, "alice", h.clock.now())
    done = r.run_until_state(faulty, RepairState.DONE, within=30)
    assert done.approved_by == "alice"
    assert r.transitions(done.id) == LIFECYCLE
    # alice's approval is hers in the audit trail; the engine carries it out naming her
    [approval] = r.events(AuditKind.REPAIR_APPROVED)
    assert (approval.actor, approval.payload["by"]) == ("user:alice", "user:alice")
    moves = [e for e in r.events(AuditKind.REPAIR_TRANSITION) if e.payload["repair_id"] == done.id]
    assert {(e.actor, e.payload["approved_by"]) for e in moves} == {("medic-engine", "alice")}
    assert done.interrupted_jobs == ()  # the job had already left the node
    assert r.node(faulty) == (NodeState.IDLE, None)
    assert r.repair("node003").state is RepairState.PENDING_APPROVAL  # still waits for a person


def test_wait_for_idle_times_out_and_records_the_interrupted_job(
    make_harness: MakeHarness,
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=0)
    # observe mode: job recovery only advises, so the job stays on the node until the repair
    # takes it
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)
    h = r.h
    job = h.submit("pretrain", partition="p1")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    node = h.job(job).nodes[0]
    r.kernel(node)  # the node reports a fault, but the job still runs there
    h.run_until(lambda: bool(r.repairs(node)), within=5, step=0.5)
    waiting = r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)
    assert r.node(node)[0] is NodeState.DRAINING  # cordoned: no new work, the job keeps running
    h.run(5.0)
    assert r.repair(node).state is RepairState.WAITING_FOR_IDLE  # still within max_wait

    done = r.run_until_state(node, RepairState.DONE, within=60)
    assert done.interrupted_jobs == (job,)
    draining = next(
        e
        for e in r.events(AuditKind.REPAIR_TRANSITION)
        if e.payload["repair_id"] == done.id and e.payload["to"] == "draining"
    )
    assert draining.payload["rule"] == "wait-timeout" and draining.payload["timed_out"] is True
    assert draining.time - waiting.updated_at >= timedelta(seconds=10)
    interrupted = r.events(AuditKind.REPAIR_JOB_INTERRUPTED)
    assert [(e.subject_type, e.subject_id) for e in interrupted] == [(SubjectType.JOB, job)]
    assert interrupted[0].payload["repair_id"] == done.id
    assert "wait deadline" in interrupted[0].payload["why"]
    # the job left the node through the repair's advice, which the controller carried out:
    # requeue-hold, exclude, release (its ledger), then rescheduled
    steps = [
        e.payload["step"]
        for e in r.events(AuditKind.REPAIR_STEP_SUCCEEDED)
        if e.payload["repair_id"] == done.id
    ]
    assert steps == ["drain", "execute", "resume"]
    advice = h.advice(job)
    assert advice is not None and advice.repair_id == done.id
    assert advice.rule == "repair-evacuation" and node in advice.exclude_nodes
    assert [a.kind.value for a in h.actions(job) if a.node is None] == [
        "requeue_hold",
        "exclude_nodes",
        "release",
    ]
    assert h.scheduler.names(job) == ["requeue_hold", "set_excluded_nodes", "release"]
    assert h.job(job).restart_count >= 1 and node in h.job(job).excluded_nodes
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=30)
    assert node not in h.job(job).nodes


def test_checkpoint_mode_proceeds_after_the_managed_jobs_next_checkpoint(
    make_harness: MakeHarness,
) -> None:
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
    waiting = r.run_until_state(node, RepairState.WAITING_FOR_IDLE, within=5)
    done = r.run_until_state(node, RepairState.DONE, within=60)
    to_draining = next(
        e
        for e in r.events(AuditKind.REPAIR_TRANSITION)
        if e.payload["repair_id"] == done.id and e.payload["to"] == "draining"
    )
    assert to_draining.payload["rule"] == "checkpoint-saved"
    assert done.interrupted_jobs == (job,)
    # a checkpoint (every 5 s) was saved after the wait began and before the node was taken
    saved = h.saved_checkpoints(job, until=to_draining.time)
    assert saved and (to_draining.time - waiting.updated_at).total_seconds() <= 6


class _NeverBack(SimNodeProvider):
    """A provider whose nodes never answer again after a repair."""

    def rejoined(self, node: NodeName, action: RepairAction, boot_id_before: str | None) -> bool:
        return False


def test_a_node_that_does_not_rejoin_fails_the_repair_and_stays_out(
    make_harness: MakeHarness,
) -> None:
    settings = RepairSettings(rejoin_timeout_seconds=20)
    r = rig(make_harness, settings=settings, provider=_NeverBack)
    r.kernel("node004")
    failed = r.run_until_state("node004", RepairState.FAILED, within=60)
    assert failed.error is not None and "not back in 20 s" in failed.error
    last = r.transitions(failed.id)[-1]
    assert last == ("rejoining", "failed")
    assert r.node("node004")[0] is NodeState.DRAINED  # stays out, medic's drain
    assert r.firing("node004") == ["xid:79"]  # the fault was not fixed


def test_revalidation_pass_fail_and_abort(make_harness: MakeHarness, tmp_path: Path) -> None:
    burn_fails, ib_missing = tmp_path / "burn-fails", tmp_path / "ib-missing"
    suite = (
        f"[dcgm] true ;; [burn] echo burn on {{node}}; test ! -e {burn_fails} ;; "
        f"[ib] test ! -e {ib_missing} || exit 127"
    )
    settings = RepairSettings(
        validation_commands=suite, validate_always=True, rejoin_timeout_seconds=60
    )
    # two nodes fail within minutes on 12: the default breaker (2 nodes) would hold the second
    policy = RepairPolicy(
        auto_xids=frozenset({79}), max_wait_seconds=60, cooldown_seconds=0, breaker_fraction=0.5
    )
    r = rig(make_harness, settings=settings, policy=policy)
    h = r.h

    # fail: a ticket with each test's result and log; the node stays out
    burn_fails.touch()
    r.kernel("node005")
    failed = r.run_until_state("node005", RepairState.FAILED, within=30)
    (result,) = h.store.list_validations(failed.id)
    assert result.outcome is ValidationOutcome.FAIL
    assert [(name, ok) for name, ok, _ in result.tests] == [
        ("dcgm", True),
        ("burn", False),
        ("ib", True),
    ]
    assert "burn on node005" in result.tests[1][2]
    assert result.ticket == f"medic-{CLUSTER}-r{failed.id}-v1"
    assert failed.error is not None and result.ticket in failed.error
    assert r.node("node005") == (
        NodeState.DRAINED,
        f"medic: validation failed, ticket {result.ticket}",
    )
    assert r.firing("node005") == ["validation:failed"]  # the Xid alert is superseded
    assert r.engine.health()[NodeName("node005")] is NodeHealth.OUT_OF_SERVICE
    assert "node005" in r.engine.placement_exclusions()
    validation = r.events(AuditKind.REPAIR_VALIDATION)[0].payload
    assert validation["outcome"] == "fail" and validation["ticket"] == result.ticket
    h.run(5.0)
    assert len(r.repairs("node005")) == 1  # no automatic repair after a failed validation

    # pass: a person has it repaired again; revalidated, back in service
    burn_fails.unlink()
    request = RepairRequest(
        cluster=CLUSTER,
        node=NodeName("node005"),
        action=RepairAction.REBOOT,
        requested_by="alice",
        requester_kind=RequesterKind.USER,
        reason="replaced the riser card",
        alert_keys=("validation:failed",),
    )
    again, created, _ = intake.submit_repair(
        h.store, request, h.clock.now(), cluster_nodes=12, node_pools={}
    )
    assert created
    if again.state is RepairState.PENDING_APPROVAL:
        repair_decisions.approve_repair(h.store, again.id, "alice", h.clock.now())
    done = r.run_until_state("node005", RepairState.DONE, within=30)
    assert done.id == again.id
    assert h.store.list_validations(done.id)[0].outcome is ValidationOutcome.PASS
    assert r.node("node005") == (NodeState.IDLE, None)
    assert r.firing("node005") == [] and NodeName("node005") not in r.engine.health()

    # abort: a test cannot run -> back in service, not marked faulty, no ticket
    ib_missing.touch()
    r.kernel("node006")
    aborted = r.run_until_state("node006", RepairState.DONE, within=30)
    (result,) = h.store.list_validations(aborted.id)
    assert result.outcome is ValidationOutcome.ABORT and result.ticket is None
    assert aborted.error is not None and "ib could not run" in aborted.error
    assert r.node("node006") == (NodeState.IDLE, None)
    assert r.firing("node006") == []
    assert NodeName("node006") not in r.engine.health()


def test_every_repair_event_is_json_and_names_its_repair(make_harness: MakeHarness) -> None:
    r = rig(make_harness)
    r.kernel("node002", XID79)
    r.run_until_state("node002", RepairState.DONE, within=30)
    kinds = {
        AuditKind.REPAIR_TRANSITION,
        AuditKind.REPAIR_STEP_STARTED,
        AuditKind.REPAIR_STEP_SUCCEEDED,
        AuditKind.REPAIR_RECOMMENDED,
    }
    events = [e for e in r.events() if e.kind in kinds]
    assert events and all(e.payload["repair_id"] == 1 for e in events)
    assert all(e.actor == "medic-engine" and e.subject_id == "node002" for e in events)
    json.dumps([e.payload for e in r.events()])


class _AnswerLost(SimNodeProvider):
    """The first execute reaches the machine, but its answer is lost (a BMC call timing out
    after the power cycle happened): medic sees a transient error."""

    calls = 0

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        type(self).calls += 1
        super().execute(node, action, repair_id)
        if type(self).calls == 1:
            raise TransientError("BMC did not answer in time")


def test_a_retry_never_repeats_an_action_on_a_machine_that_already_came_back(
    make_harness: MakeHarness,
) -> None:
    _AnswerLost.calls = 0
    r = rig(make_harness, provider=_AnswerLost)
    h = r.h
    r.kernel("node009")
    executing = r.run_until_state("node009", RepairState.EXECUTING, within=5)
    assert executing.boot_id is not None and _AnswerLost.calls == 1
    h.clock.advance(10.0)  # the machine rebooted meanwhile: a new boot id
    h.reports.append(h.loop.run_once())
    done = r.repair("node009")
    assert done.state is RepairState.DONE and _AnswerLost.calls == 1  # not executed again
    skipped = [t for t in r.events(AuditKind.REPAIR_TRANSITION) if t.payload["to"] == "rejoining"]
    assert skipped[0].payload["rule"] == "boot-id-changed"
    assert [(n, a) for n, a, *_ in h.sim.repairs] == [("node009", RepairAction.REBOOT)]


class _SlowHook(SimNodeProvider):
    """An operator's hook that takes a while (a reprovision): the action is applied at once,
    then the call returns only when the test opens ``gate``."""

    gate = threading.Event()

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        super().execute(node, action, repair_id)
        assert type(self).gate.wait(timeout=30), "the test never opened the gate"


def test_a_slow_action_runs_off_the_loop_and_job_recovery_goes_on(
    make_harness: MakeHarness,
) -> None:
    _SlowHook.gate.clear()
    r = rig(make_harness, provider=_SlowHook)
    h = r.h
    job = h.submit("pretrain", partition="p0")
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    r.kernel("node009")
    r.run_until_state("node009", RepairState.EXECUTING, within=5)
    started = time.monotonic()
    h.run(3.0, step=0.5)  # six passes while the hook runs
    assert time.monotonic() - started < 5, "a pass waits at most the settle time for a step"
    assert r.repair("node009").state is RepairState.EXECUTING

    # job recovery is not held up behind the node's repair
    h.inject(FaultKind.GPU_FELL_OFF_BUS, job, h.job(job).nodes[0])
    h.run_until(lambda: h.job(job).restart_count == 1, within=30)

    _SlowHook.gate.set()
    done = r.run_until_state("node009", RepairState.DONE, within=30)
    steps = [
        (e.kind, e.payload["step"])
        for e in r.events()
        if e.payload.get("repair_id") == done.id and e.payload.get("step") == "execute"
    ]
    assert steps == [
        (AuditKind.REPAIR_STEP_STARTED, "execute"),
        (AuditKind.REPAIR_STEP_SUCCEEDED, "execute"),
    ], "started once, collected once"


class _RebootsOnly(SimNodeProvider):
    """A cluster where only reboots (and removal) can be carried out: Slurm without hooks."""

    def can(self, action: RepairAction) -> bool:
        return action in (RepairAction.REBOOT, RepairAction.REMOVE)


def test_without_an_executor_a_reset_becomes_a_reboot_and_nothing_else_touches_the_node(
    make_harness: MakeHarness,
) -> None:
    auto = frozenset(RepairAction) - {RepairAction.REMOVE}
    r = rig(make_harness, provider=_RebootsOnly, policy=RepairPolicy(auto, cooldown_seconds=0))
    h = r.h
    # an uncorrectable ECC error maps to a GPU reset, which this cluster cannot do
    r.kernel("node004", "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, An uncorrectable ECC error")
    done = r.run_until_state("node004", RepairState.DONE, within=30)
    assert done.action is RepairAction.REBOOT and "a reboot resets every GPU" in done.reason

    # a person asks for a reprovision of an overheating node: refused before it is drained
    thermal = Alert(
        cluster=CLUSTER,
        node=NodeName("node005"),
        key="agent:thermal",
        source=AlertSource.AGENT,
        summary="GPU 3 at 92 C, throttling",
        description="thermal slowdown",
        severity=Severity.ERROR,
        evidence={"peak_celsius": 92},
        detector="agent:node005",
    )
    h.store.upsert_alert(thermal, h.clock.now())
    request = RepairRequest(
        cluster=CLUSTER,
        node=NodeName("node005"),
        action=RepairAction.REPROVISION,
        requested_by="alice",
        requester_kind=RequesterKind.USER,
        reason="rebuild it",
        alert_keys=("agent:thermal",),
    )
    asked, _, _ = intake.submit_repair(
        h.store, request, h.clock.now(), cluster_nodes=12, node_pools={}
    )
    if asked.state is RepairState.PENDING_APPROVAL:
        repair_decisions.approve_repair(h.store, asked.id, "bob", h.clock.now())
    failed = r.run_until_state("node005", RepairState.FAILED, within=10)
    assert "repair.reprovision_command" in (failed.error or "")
    assert h.scheduler.names("node005") == [], "never drained"


OPTED_IN = json.dumps({"medic": {}})
"""A job comment that opts the job in: medic watches it (``slurm.opt_in``)."""


class _Slurmish(RecordingScheduler):
    """The recording proxy, listing jobs as Slurm does with ``slurm.opt_in``: only the jobs that
    opted in (the node still shows a job medic does not watch: allocated, or draining). And
    ``before_drain`` runs once just before the next drain reaches the cluster: a job starting
    between the pass's listing and medic's drain of the node."""

    def __init__(self, inner: Scheduler, clock: Clock) -> None:
        super().__init__(inner, clock)
        self.before_drain: Callable[[], object] | None = None

    def list_jobs(self) -> Sequence[Job]:
        return [j for j in super().list_jobs() if is_opted_in(j.comment)]

    def drain_node(self, node: NodeName, reason: str) -> None:
        started, self.before_drain = self.before_drain, None
        if started is not None:
            started()
        super().drain_node(node, reason)


def _slurmish(r: Rig) -> _Slurmish:
    """Puts medic (a fresh loop and engine) on a :class:`_Slurmish` proxy of the simulator."""
    h = r.h
    scheduler = _Slurmish(h.sim.scheduler, h.clock)
    h.scheduler = scheduler
    engine = RepairEngine(
        store=h.store,
        scheduler=scheduler,
        provider=h.sim.node_provider,
        clock=h.clock,
        settings=RepairSettings(rejoin_timeout_seconds=120),
        metrics=r.metrics,
        validation_runner=run_command,
    )
    h.loop = replace_engine(r, engine)
    return scheduler


def _to_draining(r: Rig, repair_id: int) -> AuditEvent:
    return next(
        e
        for e in r.events(AuditKind.REPAIR_TRANSITION)
        if e.payload["repair_id"] == repair_id and e.payload["to"] == "draining"
    )


@pytest.mark.parametrize("started", ["before the fault", "between the listing and the drain"])
def test_a_job_medic_does_not_watch_holds_the_repair_until_the_deadline(
    make_harness: MakeHarness, started: str
) -> None:
    """docs/node-repair.md, *Wait for idle*: jobs the scheduler shows on the node but medic does
    not watch (not opted in) hold the repair like visible ones, until the deadline. One that
    started after the cordoning pass's listing is seen only from the next pass's (the node
    draining, a job on it): the cordoning pass must not decide the wait."""
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=0)
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)
    h = r.h
    scheduler = _slurmish(r)
    node = "node007"  # p1 is empty: a one-node job there starts on node007
    if started == "before the fault":
        job = h.submit("unwatched", partition="p1", num_nodes=1)
        h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    else:
        submitted: list[JobId] = []
        scheduler.before_drain = lambda: submitted.append(
            h.submit("unwatched", partition="p1", num_nodes=1)
        )
    assert h.scheduler.list_jobs() == [], "medic sees no job anywhere"
    r.kernel(node)
    h.run_until(lambda: bool(r.repairs(node)), within=5, step=0.5)
    if started != "before the fault":
        (job,) = submitted
    assert h.job(job).nodes == (node,)
    assert h.job(job).state is JobState.RUNNING, "not rebooted in the pass that cordoned"
    h.run(5.0, step=0.5)  # ten passes, still before the deadline
    waiting = r.repair(node)
    assert waiting.state is RepairState.WAITING_FOR_IDLE, r.transitions(waiting.id)
    assert r.node(node) == (NodeState.DRAINING, f"medic: repair {waiting.id} reboot")
    assert h.sim.repairs == [] and h.job(job).state is JobState.RUNNING

    # the deadline passes: the repair takes the node; the job ends with the reboot (medic
    # cannot move a job it does not see)
    done = r.run_until_state(node, RepairState.DONE, within=60)
    to_draining = _to_draining(r, done.id)
    assert (to_draining.payload["rule"], to_draining.payload["timed_out"]) == ("wait-timeout", True)
    assert waiting.wait_deadline is not None and to_draining.time >= waiting.wait_deadline
    assert done.interrupted_jobs == () and h.scheduler.names(job) == []
    assert [(n, a) for n, a, *_ in h.sim.repairs] == [(node, RepairAction.REBOOT)]
    assert h.job(job).state is JobState.NODE_FAIL


def test_a_job_started_between_the_listing_and_the_drain_holds_the_repair(
    make_harness: MakeHarness,
) -> None:
    """The pass that cordons read its listing before the drain; a job the scheduler started in
    between is in the next pass's listing, which decides the wait: the job is waited for, then
    interrupted at the deadline (recorded) and moved off, never killed by the reboot."""
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=10, cooldown_seconds=0)
    r = rig(make_harness, policy=policy, mode=Mode.OBSERVE)
    h = r.h
    scheduler = _slurmish(r)
    node = "node007"  # p1 is empty: a one-node job there starts on node007
    submitted: list[JobId] = []
    scheduler.before_drain = lambda: submitted.append(
        h.submit("pretrain", partition="p1", num_nodes=1, comment=OPTED_IN)
    )
    r.kernel(node)
    h.run_until(lambda: bool(r.repairs(node)), within=5, step=0.5)
    (job,) = submitted
    assert h.job(job).nodes == (node,)
    assert h.job(job).state is JobState.RUNNING, "not rebooted in the pass that cordoned"
    h.run(5.0, step=0.5)  # ten passes, still before the deadline
    waiting = r.repair(node)
    assert waiting.state is RepairState.WAITING_FOR_IDLE, r.transitions(waiting.id)
    assert h.sim.repairs == [] and h.job(job).state is JobState.RUNNING

    done = r.run_until_state(node, RepairState.DONE, within=60)
    assert done.interrupted_jobs == (job,)
    to_draining = _to_draining(r, done.id)
    assert to_draining.payload["rule"] == "wait-timeout"
    assert waiting.wait_deadline is not None and to_draining.time >= waiting.wait_deadline
    assert h.scheduler.names(job) == ["requeue_hold", "set_excluded_nodes", "release"]
    assert h.job(job).state is not JobState.NODE_FAIL and node in h.job(job).excluded_nodes
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=30)
    assert node not in h.job(job).nodes and h.job(job).restart_count == 1
