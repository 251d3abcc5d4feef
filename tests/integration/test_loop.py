"""Integration tests of the control loop: observe -> detect -> attribute -> decide -> act -> verify
against the simulated cluster and a real (SQLite) store, in virtual time.

Every scenario checks three things: what the store holds (detections, verdicts, advice, actions,
attempts), the audit trail, and the scheduler's state together with the exact commands medic sent
to it (through a recording proxy).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from itertools import pairwise

import pytest

from medic.config.settings import DetectSettings, LoopSettings, PolicySettings
from medic.domain.actions import ActionKind, ActionStatus
from medic.domain.advice import Advice, AdviceAction, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.cluster import JobState, Mode
from medic.domain.diagnosis import FaultDomain, JobAction
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import JobId, NodeName

from .conftest import (
    ACTION_KINDS,
    CLUSTER,
    SIM,
    Crash,
    FaultyStore,
    Harness,
    MakeHarness,
    RecordingScheduler,
)

REQUEUE_COMMANDS = ["requeue_hold", "set_excluded_nodes", "release"]
REQUEUE_STEPS = ["requeue_hold", "exclude_nodes", "release"]
XID = FaultKind.GPU_FELL_OFF_BUS
WARM_UP = 13.0
"""Seconds a job runs before a fault: checkpoints at steps 10 and 20 are saved by then."""


# --- helpers ------------------------------------------------------------------------------------
def _converged(h: Harness, job: JobId, attempt: int = 0) -> bool:
    advice = h.advice(job)
    return (
        advice is not None
        and advice.attempt == attempt
        and advice.status is Reconciliation.CONVERGED
        and advice.observed_generation == advice.generation
    )


def _advice(h: Harness, job: JobId) -> Advice:
    advice = h.advice(job)
    assert advice is not None, f"no advice for job {job}"
    return advice


def _events(h: Harness, job: JobId, kind: AuditKind, **payload: object) -> list[AuditEvent]:
    return [
        e
        for e in h.audit(job, kind)
        if all(e.payload.get(key) == value for key, value in payload.items())
    ]


def _assert_steps_audited(h: Harness, job: JobId, advice: Advice, steps: list[str]) -> None:
    """Each step: one action-started, then one action-succeeded with the same key; in order."""
    firsts = []
    for step in steps:
        key = f"advice/{advice.id}/g{advice.generation}/{step}"
        started = _events(h, job, AuditKind.ACTION_STARTED, key=key)
        succeeded = _events(h, job, AuditKind.ACTION_SUCCEEDED, key=key)
        assert len(started) == 1, (step, started)
        assert len(succeeded) == 1, (step, succeeded)
        assert started[0].id is not None and succeeded[0].id is not None
        assert started[0].id < succeeded[0].id
        for event in (*started, *succeeded):
            assert event.actor == "medic-controller"
            assert event.action == step
            assert event.mode is Mode.ACT
            assert event.payload["advice_id"] == advice.id
            assert event.payload["generation"] == advice.generation
        firsts.append(started[0].id)
    assert firsts == sorted(firsts), "steps were issued out of order"


def _assert_recovered(h: Harness, job: JobId, bad: NodeName | None, restarts: int = 1) -> None:
    state = h.job(job)
    assert state.state is JobState.RUNNING
    assert state.restart_count == restarts
    assert not state.held
    assert len(state.nodes) == 2
    if bad is not None:
        assert bad in state.excluded_nodes
        assert bad not in state.nodes


def _loaded_checkpoints(h: Harness, job: JobId) -> list[tuple[int, str]]:
    """(step, line) of every 'successfully loaded checkpoint' line of the job."""
    pattern = re.compile(
        rf"successfully loaded checkpoint from /checkpoints/{job} \[.*\] at iteration\s+(\d+)$"
    )
    found = []
    for line in h.logs.of_job(job):
        match = pattern.search(line.text)
        if match:
            found.append((int(match.group(1)), line.text))
    return found


# --- 1. observe mode ----------------------------------------------------------------------------
def test_observe_mode_advises_without_touching_the_scheduler(make_harness: MakeHarness) -> None:
    h = make_harness()  # observe is the default mode
    job = h.submit("train-a")
    bystander = h.submit("train-b", partition="p1")
    h.run(WARM_UP)
    fault = h.inject(XID, job)
    bad = fault.node
    assert bad is not None
    h.run(30)

    # store: detection, verdict, advice
    xid = [d for d in h.detections(job, 0) if d.signature_id == "xid.fallen_off_bus"]
    assert xid, "the Xid 79 kernel line was not detected"
    assert {d.node for d in xid} == {bad}
    assert xid[0].fields["xid"] == "79"
    [verdict] = h.verdicts(job)
    assert verdict.attempt == 0
    assert verdict.domain is FaultDomain.HARDWARE
    assert verdict.action is JobAction.RESTART
    assert verdict.implicated_nodes == frozenset({bad})
    assert verdict.root_signature == "xid.fallen_off_bus"
    advice = _advice(h, job)
    assert advice.action is AdviceAction.REQUEUE
    assert advice.exclude_nodes == frozenset({bad})
    assert advice.mode is Mode.OBSERVE
    assert advice.attempt == 0
    assert advice.generation == 1
    assert advice.rule == "node-fault-requeue"
    assert advice.observed_generation == 0, "no controller may report on observed advice"
    assert h.actions(job) == []
    assert h.store.list_actions(CLUSTER) == []

    # scheduler: not a single command; the job died as it would without medic
    assert h.scheduler.calls == []
    state = h.job(job)
    assert state.state is JobState.FAILED
    assert state.restart_count == 0
    assert state.excluded_nodes == frozenset()

    # audit: detection -> verdict -> advice, all in observe mode, no action
    kinds = h.kinds(job)
    assert kinds.count(AuditKind.VERDICT) == 1
    assert kinds.count(AuditKind.ADVICE) == 1
    assert not ACTION_KINDS & set(kinds)
    [det_event] = [
        e for e in h.audit(job, AuditKind.DETECTION) if e.signature_id == "xid.fallen_off_bus"
    ]
    [verdict_event] = h.audit(job, AuditKind.VERDICT)
    [advice_event] = h.audit(job, AuditKind.ADVICE)
    assert det_event.payload["node"] == bad
    assert det_event.payload["attempt"] == 0
    assert verdict_event.verdict == "hardware"
    assert verdict_event.payload["implicated_nodes"] == [bad]
    assert advice_event.action == "requeue"
    assert advice_event.payload["advice_id"] == advice.id
    assert advice_event.payload["exclude_nodes"] == [bad]
    assert advice_event.payload["rule"] == "node-fault-requeue"
    for event in (det_event, verdict_event, advice_event):
        assert event.mode is Mode.OBSERVE
        assert event.actor == "medic-engine"
    assert det_event.id is not None and verdict_event.id is not None
    assert advice_event.id is not None
    assert det_event.id < verdict_event.id < advice_event.id

    # the other job was left alone
    assert h.kinds(bystander) == []
    assert h.advice(bystander) is None
    assert h.job(bystander).state is JobState.RUNNING


# --- 2 and 3. act mode, node faults -------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "domain", "root"),
    [
        (FaultKind.GPU_FELL_OFF_BUS, FaultDomain.HARDWARE, "xid.fallen_off_bus"),
        (FaultKind.ECC_DBE, FaultDomain.HARDWARE, "xid.ecc_dbe"),
        (FaultKind.IB_LINK_DOWN, FaultDomain.NETWORK, "mlx5.link_down"),
        (FaultKind.NODE_FAIL, FaultDomain.SCHEDULER, "medic.scheduler.node_fail"),
    ],
    ids=["xid79", "ecc_dbe", "ib_link_down", "node_fail"],
)
def test_act_mode_recovers_a_node_fault(
    make_harness: MakeHarness, kind: FaultKind, domain: FaultDomain, root: str
) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    bystander = h.submit("train-b", partition="p1")
    h.run(WARM_UP)
    fault = h.inject(kind, job)
    bad = fault.node
    assert bad is not None
    h.run_until(lambda: _converged(h, job), within=10)
    h.run(15)  # the new attempt trains on; nothing else happens

    # scheduler: requeued once, without the faulty node, running again
    _assert_recovered(h, job, bad)
    assert h.job(job).excluded_nodes == frozenset({bad})
    assert h.scheduler.names(job) == REQUEUE_COMMANDS
    assert h.scheduler.calls[1].args == (job, frozenset({bad}))
    assert h.scheduler.names() == REQUEUE_COMMANDS, "the bystander job got a command"

    # the new attempt resumed from the last checkpoint saved before the fault
    saved = h.saved_checkpoints(job, until=fault.time)
    assert saved, "no checkpoint before the fault"
    [(loaded, _)] = _loaded_checkpoints(h, job)
    assert loaded == saved[-1]
    attempts = h.store.list_attempts(CLUSTER, job)
    assert [a.number for a in attempts] == [0, 1]
    assert attempts[0].state.is_terminal, attempts[0].state
    assert attempts[0].ended_at is not None
    assert attempts[1].ended_at is None
    assert attempts[0].progress.last_checkpoint_step == saved[-1]
    assert attempts[1].progress.loaded_checkpoint_step == saved[-1]
    assert attempts[1].progress.last_step is not None
    assert attempts[1].progress.last_step > saved[-1]
    assert bad not in attempts[1].nodes

    # store: one verdict, one advice, converged
    [verdict] = h.verdicts(job)
    assert verdict.domain is domain
    assert verdict.implicated_nodes == frozenset({bad})
    assert verdict.root_signature == root
    assert any(d.signature_id == root and d.node == bad for d in verdict.evidence)
    # a node failure prints nothing: its finding comes from the scheduler's node state
    assert any(d.signature_id == root and d.node == bad for d in h.detections(job, 0))
    root_events = [e for e in h.audit(job, AuditKind.DETECTION) if e.signature_id == root]
    assert root_events, f"no detection audit event for {root}"
    assert root_events[0].payload["node"] == bad
    advice = _advice(h, job)
    assert advice.action is AdviceAction.REQUEUE
    assert advice.exclude_nodes == frozenset({bad})
    assert advice.mode is Mode.ACT
    assert advice.status is Reconciliation.CONVERGED
    assert advice.observed_generation == advice.generation == 1
    records = [r for r in h.actions(job) if r.node is None]
    assert [r.kind for r in records] == [
        ActionKind.REQUEUE_HOLD,
        ActionKind.EXCLUDE_NODES,
        ActionKind.RELEASE,
    ]
    # which node medic itself added to the job's exclusions (taken off once it is back)
    added = [(r.kind, r.node, r.status) for r in h.actions(job) if r.node is not None]
    assert added == [(ActionKind.EXCLUDE_NODES, bad, ActionStatus.SUCCEEDED)]
    assert {r.status for r in records} == {ActionStatus.SUCCEEDED}
    assert {r.advice_id for r in records} == {advice.id}

    # audit: verdict -> advice -> the three steps -> converged
    _assert_steps_audited(h, job, advice, REQUEUE_STEPS)
    [verdict_event] = h.audit(job, AuditKind.VERDICT)
    [advice_event] = h.audit(job, AuditKind.ADVICE)
    [reconciled] = h.audit(job, AuditKind.RECONCILIATION)
    assert verdict_event.verdict == domain.value
    assert reconciled.payload["status"] == "converged"
    first_step = h.audit(job, AuditKind.ACTION_STARTED)[0]
    assert verdict_event.id is not None and advice_event.id is not None
    assert first_step.id is not None and reconciled.id is not None
    assert verdict_event.id < advice_event.id < first_step.id < reconciled.id
    assert not {AuditKind.ACTION_FAILED, AuditKind.ACTION_SKIPPED} & set(h.kinds(job))

    # the bystander in the other partition was not touched
    assert h.advice(bystander) is None
    assert h.job(bystander).state is JobState.RUNNING
    assert h.job(bystander).restart_count == 0


# --- 4. hang -------------------------------------------------------------------------------------
def test_act_mode_requeues_a_hang_without_excluding_a_node(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    h.run(WARM_UP)
    fault = h.inject(FaultKind.HANG, job)
    h.run_until(lambda: _converged(h, job), within=200)
    h.run(15)

    [hang] = [
        e for e in h.audit(job, AuditKind.DETECTION) if e.signature_id == "medic.hang.no_progress"
    ]
    latency = (hang.time - fault.time).total_seconds()
    # The default floor is 60 s; far earlier than PyTorch's 600 s NCCL watchdog.
    assert 60.0 <= latency <= 120.0, latency
    assert hang.payload["attempt"] == 0
    [verdict] = h.verdicts(job)
    assert verdict.root_signature == "medic.hang.no_progress"
    assert verdict.domain is FaultDomain.SYSTEM_SOFTWARE
    assert verdict.implicated_nodes == frozenset()
    advice = _advice(h, job)
    assert advice.action is AdviceAction.REQUEUE
    assert advice.exclude_nodes == frozenset()
    assert advice.rule == "retry"
    assert advice.observed_generation == advice.generation

    # requeued without any exclusion, long before the watchdog would have fired
    assert h.scheduler.names(job) == ["requeue_hold", "release"]
    assert (h.scheduler.calls[0].at - fault.time).total_seconds() < 120.0
    _assert_recovered(h, job, None)
    assert h.job(job).excluded_nodes == frozenset()
    _assert_steps_audited(h, job, advice, ["requeue_hold", "release"])
    assert not any(d.signature_id == "nccl.watchdog_timeout" for d in h.detections(job))
    saved = h.saved_checkpoints(job, until=fault.time)
    [(loaded, _)] = _loaded_checkpoints(h, job)
    assert loaded == saved[-1]


# --- 5. application errors ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "root"),
    [(FaultKind.APP_BUG, "python.exception"), (FaultKind.CUDA_OOM, "cuda.oom")],
    ids=["app_bug", "cuda_oom"],
)
def test_act_mode_stops_an_application_error(
    make_harness: MakeHarness, kind: FaultKind, root: str
) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    h.run(WARM_UP)
    h.inject(kind, job)
    h.run_until(lambda: _converged(h, job), within=20)
    h.run(30)

    [verdict] = h.verdicts(job)
    assert verdict.domain is FaultDomain.APPLICATION
    assert verdict.action is JobAction.STOP
    assert verdict.root_signature == root
    advice = _advice(h, job)
    assert advice.action is AdviceAction.STOP
    assert advice.rule == "application-error-stop"
    assert advice.exclude_nodes == frozenset()
    assert advice.status is Reconciliation.CONVERGED
    assert advice.observed_generation == advice.generation == 1

    # not requeued: no requeue_hold, one attempt only, the job ended for good
    state = h.job(job)
    assert state.restart_count == 0
    assert state.state in (JobState.CANCELLED, JobState.FAILED)
    assert h.scheduler.count("requeue_hold") == 0
    assert h.scheduler.count("release") == 0
    assert h.scheduler.count("set_excluded_nodes") == 0
    assert h.scheduler.names(job) in ([], ["cancel"])
    if state.state is JobState.CANCELLED:
        assert h.scheduler.names(job) == ["cancel"]
        _assert_steps_audited(h, job, advice, ["cancel"])
    assert [a.number for a in h.store.list_attempts(CLUSTER, job)] == [0]
    [verdict_event] = h.audit(job, AuditKind.VERDICT)
    [advice_event] = h.audit(job, AuditKind.ADVICE)
    [reconciled] = h.audit(job, AuditKind.RECONCILIATION)
    assert verdict_event.verdict == "application"
    assert advice_event.action == "stop"
    assert reconciled.payload["status"] == "converged"


# --- 6. no progress -----------------------------------------------------------------------------
def _fail_attempt(h: Harness, job: JobId, attempt: int, *, after: float) -> FaultRecord:
    """Let ``attempt`` train for ``after`` seconds, kill it with an Xid 79 and wait for medic."""
    h.run_until(
        lambda: h.job(job).restart_count == attempt and h.job(job).state is JobState.RUNNING,
        within=10,
    )
    h.run(after)
    fault = h.inject(XID, job)
    h.run_until(lambda: _converged(h, job, attempt), within=15)
    return fault


def test_no_progress_stops_after_the_policy_window(make_harness: MakeHarness) -> None:
    # A checkpoint every 10 s: attempt 0 saves step 20; the later attempts die before step 40.
    sim = replace(SIM, checkpoint_every=20)
    policy = PolicySettings(max_attempts_without_progress=2)
    h = make_harness(mode=Mode.ACT, sim=sim, policy=policy)
    job = h.submit("train-a")

    _fail_attempt(h, job, 0, after=WARM_UP)
    assert _advice(h, job).action is AdviceAction.REQUEUE
    _fail_attempt(h, job, 1, after=4)
    advice = _advice(h, job)
    assert advice.action is AdviceAction.REQUEUE, "one attempt without progress is not enough"
    assert advice.generation == 2
    _fail_attempt(h, job, 2, after=4)
    h.run(10)

    advice = _advice(h, job)
    assert advice.action is AdviceAction.STOP
    assert advice.rule == "no-progress-stop"
    assert advice.attempt == 2
    assert advice.generation == 3
    assert "no new checkpoint in the last 2 attempt(s)" in advice.reason
    assert advice.status is Reconciliation.CONVERGED

    state = h.job(job)
    assert state.state.is_terminal
    assert state.restart_count == 2
    assert h.scheduler.names(job).count("requeue_hold") == 2
    assert h.scheduler.names(job)[-1] == "cancel"
    attempts = h.store.list_attempts(CLUSTER, job)
    assert [a.number for a in attempts] == [0, 1, 2]
    assert attempts[0].progress.last_checkpoint_step == 20
    for attempt in attempts[1:]:
        assert attempt.progress.loaded_checkpoint_step == 20
        assert attempt.progress.last_checkpoint_step is None
    rules = [e.payload["rule"] for e in h.audit(job, AuditKind.ADVICE)]
    assert rules == ["node-fault-requeue", "node-fault-requeue", "no-progress-stop"]
    assert [v.attempt for v in h.verdicts(job)] == [0, 1, 2]


def test_no_progress_window_can_be_overridden_per_job(make_harness: MakeHarness) -> None:
    sim = replace(SIM, checkpoint_every=20)
    h = make_harness(mode=Mode.ACT, sim=sim)  # cluster window: 3 attempts
    strict = h.submit("strict", comment='{"medic": {"max_attempts_without_progress": 1}}')
    lenient = h.submit("lenient", partition="p1")
    both = (strict, lenient)
    h.run(WARM_UP)
    for job in both:
        h.inject(FaultKind.NODE_FAIL, job)
    h.run_until(
        lambda: all(
            h.job(j).restart_count == 1 and h.job(j).state is JobState.RUNNING for j in both
        ),
        within=15,
    )
    for job in both:  # attempt 0 saved a checkpoint: plain requeue for both
        assert _advice(h, job).rule == "node-fault-requeue"
    h.run(4)
    for job in both:
        h.inject(FaultKind.NODE_FAIL, job)
    h.run(15)

    advice = _advice(h, strict)
    assert advice.action is AdviceAction.STOP
    assert advice.rule == "no-progress-stop"
    assert advice.attempt == 1
    assert "in the last 1 attempt(s)" in advice.reason
    assert h.job(strict).state.is_terminal
    assert h.job(strict).restart_count == 1
    assert advice.status is Reconciliation.CONVERGED
    # cancelled by medic, or skipped when the node failure had already ended the job
    cancel = f"advice/{advice.id}/g{advice.generation}/cancel"
    if h.scheduler.names(strict) == [*REQUEUE_COMMANDS, "cancel"]:
        assert h.job(strict).state is JobState.CANCELLED
        assert len(_events(h, strict, AuditKind.ACTION_SUCCEEDED, key=cancel)) == 1
    else:
        assert h.scheduler.names(strict) == REQUEUE_COMMANDS
        assert len(_events(h, strict, AuditKind.ACTION_SKIPPED, key=cancel)) == 1

    advice = _advice(h, lenient)
    assert advice.action is AdviceAction.REQUEUE
    assert advice.attempt == 1
    _assert_recovered(h, lenient, None, restarts=2)
    assert h.scheduler.names(lenient) == REQUEUE_COMMANDS * 2


# --- 7. per-job mode ------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster_mode", [Mode.OBSERVE, Mode.ACT])
def test_job_comment_mode_overrides_the_cluster_mode(
    make_harness: MakeHarness, cluster_mode: Mode
) -> None:
    job_mode = Mode.ACT if cluster_mode is Mode.OBSERVE else Mode.OBSERVE
    h = make_harness(mode=cluster_mode)
    special = h.submit("special", comment=json.dumps({"medic": {"mode": job_mode.value}}))
    plain = h.submit("plain", partition="p1")
    acted, observed = (special, plain) if job_mode is Mode.ACT else (plain, special)
    h.run(WARM_UP)
    bad_acted = h.inject(XID, acted).node
    bad_observed = h.inject(XID, observed).node
    h.run_until(lambda: _converged(h, acted), within=10)
    h.run(20)

    _assert_recovered(h, acted, bad_acted)
    advice = _advice(h, acted)
    assert advice.mode is Mode.ACT
    assert advice.status is Reconciliation.CONVERGED
    assert h.scheduler.names(acted) == REQUEUE_COMMANDS
    assert {e.mode for e in h.audit(acted)} == {Mode.ACT}

    advice = _advice(h, observed)
    assert advice.mode is Mode.OBSERVE
    assert advice.action is AdviceAction.REQUEUE
    assert advice.exclude_nodes == frozenset({bad_observed})
    assert advice.observed_generation == 0
    assert h.scheduler.names(observed) == []
    assert h.actions(observed) == []
    assert h.job(observed).state is JobState.FAILED
    assert h.job(observed).restart_count == 0
    assert not ACTION_KINDS & set(h.kinds(observed))
    assert {e.mode for e in h.audit(observed)} == {Mode.OBSERVE}


# --- 8. invalid job options ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        ('{"medic": {"mode": "acts"}}', ["medic.mode", '"acts"', "observe", "act"]),
        (
            '{"medic": {"max_attempt_without_progress": 2}}',
            [
                "medic.max_attempt_without_progress",
                "unknown option",
                "max_attempts_without_progress",
            ],
        ),
    ],
    ids=["bad-mode", "unknown-key"],
)
def test_invalid_job_options_leave_the_job_alone(
    make_harness: MakeHarness, comment: str, expected: list[str]
) -> None:
    h = make_harness(mode=Mode.ACT)
    invalid = h.submit("invalid", comment=comment)
    valid = h.submit("valid", partition="p1")
    h.run(WARM_UP)
    h.inject(XID, invalid)
    bad_valid = h.inject(XID, valid).node
    h.run(40)

    [event] = h.audit(invalid, AuditKind.JOB_OPTIONS_INVALID)
    assert event.actor == "medic-engine"
    assert event.subject_id == invalid
    for piece in expected:
        assert piece in event.payload["error"], (piece, event.payload["error"])
    assert h.kinds(invalid) == [AuditKind.JOB_OPTIONS_INVALID]
    assert h.detections(invalid) == []
    assert h.verdicts(invalid) == []
    assert h.advice(invalid) is None
    assert h.actions(invalid) == []
    assert h.scheduler.names(invalid) == []
    assert h.job(invalid).state is JobState.FAILED
    assert h.job(invalid).restart_count == 0

    # the valid job in the same cluster is recovered as usual
    assert h.audit(valid, AuditKind.JOB_OPTIONS_INVALID) == []
    assert _converged(h, valid)
    _assert_recovered(h, valid, bad_valid)
    assert h.scheduler.names(valid) == REQUEUE_COMMANDS


# --- 9. robustness --------------------------------------------------------------------------------
def test_scheduler_read_failing_for_one_job_does_not_block_the_others(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(mode=Mode.ACT)
    flaky = h.submit("flaky")
    healthy = h.submit("healthy", partition="p1")
    h.run(WARM_UP)
    h.scheduler.failing_get_job.add(flaky)
    bad_flaky = h.inject(XID, flaky).node
    bad_healthy = h.inject(XID, healthy).node
    h.run(10)

    # the healthy job was recovered while get_job kept failing for the flaky one
    assert _converged(h, healthy)
    _assert_recovered(h, healthy, bad_healthy)
    advice = _advice(h, flaky)
    assert advice.status is Reconciliation.PENDING
    assert advice.observed_generation == 0
    assert h.scheduler.names(flaky) == []
    assert h.actions(flaky) == []
    assert h.job(flaky).state is JobState.FAILED

    # once the scheduler answers again, the flaky job converges, each command once
    h.scheduler.failing_get_job.clear()
    h.run_until(lambda: _converged(h, flaky), within=5)
    h.run(5)
    _assert_recovered(h, flaky, bad_flaky)
    assert h.scheduler.names(flaky) == REQUEUE_COMMANDS
    assert h.scheduler.names(healthy) == REQUEUE_COMMANDS
    assert len(h.verdicts(flaky)) == 1
    assert _advice(h, flaky).generation == 1


def test_evaluation_error_is_recorded_and_backed_off(make_harness: MakeHarness) -> None:
    backoff = 5.0
    h = make_harness(mode=Mode.ACT, loop=LoopSettings(error_backoff_seconds=backoff))
    store = FaultyStore(h.store)
    h.restart(store=store)
    poisoned = h.submit("poisoned")
    healthy = h.submit("healthy", partition="p1")
    h.run(WARM_UP)
    store.fail("list_attempts", poisoned, RuntimeError("boom (test)"))
    bad_poisoned = h.inject(XID, poisoned).node
    bad_healthy = h.inject(XID, healthy).node
    h.run(12)

    errors = h.audit(poisoned, AuditKind.LOOP_ERROR)
    assert len(errors) >= 2
    for event in errors:
        assert event.actor == "medic-engine"
        assert "RuntimeError" in event.payload["error"]
        assert "boom (test)" in event.payload["error"]
    gaps = [(b.time - a.time).total_seconds() for a, b in pairwise(errors)]
    assert all(backoff <= gap <= backoff + 0.25 for gap in gaps), gaps
    # evaluated once per back-off, not on every pass
    assert store.raised("list_attempts") == len(errors)
    assert sum(r.errors for r in h.reports) == len(errors)
    assert h.verdicts(poisoned) == []
    assert h.advice(poisoned) is None
    assert h.scheduler.names(poisoned) == []

    # the pass went on for the other job
    assert h.audit(healthy, AuditKind.LOOP_ERROR) == []
    assert _converged(h, healthy)
    _assert_recovered(h, healthy, bad_healthy)

    # once the store works again the job is decided at its next evaluation, on the evidence
    # gathered before the error
    store.heal("list_attempts")
    h.run_until(lambda: _converged(h, poisoned), within=backoff + 1)
    h.run(5)
    [verdict] = h.verdicts(poisoned)
    assert verdict.domain is FaultDomain.HARDWARE
    assert verdict.implicated_nodes == frozenset({bad_poisoned})
    _assert_recovered(h, poisoned, bad_poisoned)
    assert h.scheduler.names(poisoned) == REQUEUE_COMMANDS


def test_scheduler_listing_failure_ends_the_pass_quietly(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    h.run(WARM_UP)
    h.scheduler.failing_listing = True
    bad = h.inject(XID, job).node
    h.clock.advance(0.2)
    report = h.loop.run_once()  # must not raise
    assert report.jobs == 0
    assert report.lines == 0
    h.run(3)
    assert h.advice(job) is None
    assert h.audit(job, AuditKind.LOOP_ERROR) == []
    assert h.scheduler.calls == []

    # the lines were not lost: they are read once the scheduler answers again
    h.scheduler.failing_listing = False
    h.run_until(lambda: _converged(h, job), within=5)
    [verdict] = h.verdicts(job)
    assert verdict.implicated_nodes == frozenset({bad})
    _assert_recovered(h, job, bad)
    assert h.scheduler.names(job) == REQUEUE_COMMANDS


def test_evidence_seen_during_an_error_back_off_is_kept(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT, loop=LoopSettings(error_backoff_seconds=5.0))
    store = FaultyStore(h.store)
    h.restart(store=store)
    job = h.submit("train-a")
    h.run(WARM_UP)
    # one failed progress write (a database hiccup) puts the job into the 5 s back-off ...
    store.fail("update_progress_many", job, RuntimeError("db hiccup (test)"), times=1)
    h.run_until(lambda: not store.armed("update_progress_many"), within=10)
    assert len(h.audit(job, AuditKind.LOOP_ERROR)) == 1
    # ... and the GPU falls off the bus during it
    bad = h.inject(XID, job).node
    h.run(20)

    assert any(d.signature_id == "xid.fallen_off_bus" for d in h.detections(job, 0))
    [verdict, *_] = h.verdicts(job)
    assert verdict.attempt == 0
    assert verdict.implicated_nodes == frozenset({bad})
    assert h.job(job).restart_count == 1
    _assert_recovered(h, job, bad)


def test_first_evaluation_error_of_a_job_is_backed_off_too(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT, loop=LoopSettings(error_backoff_seconds=5.0))
    job = h.submit("train-a")
    h.run(WARM_UP)
    store = FaultyStore(h.store)
    store.fail("update_progress_many", job, RuntimeError("db down (test)"))
    # medic restarts while the job trains: its first pass sees new iteration lines at once
    h.restart(store=store)
    h.clock.advance(0.4)
    h.run(6)

    errors = h.audit(job, AuditKind.LOOP_ERROR)
    gaps = [(b.time - a.time).total_seconds() for a, b in pairwise(errors)]
    assert gaps, "expected at least two evaluations in 6 s"
    assert all(gap >= 5.0 for gap in gaps), gaps


# --- 10. restart of medic -------------------------------------------------------------------------
def test_restart_after_recovery_repeats_nothing(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    h.run(WARM_UP)
    bad = h.inject(XID, job).node
    h.run_until(lambda: _converged(h, job), within=10)
    h.run(2)
    last_event = h.audit()[-1].id
    assert last_event is not None
    calls = list(h.scheduler.calls)

    h.restart()
    h.run(30)
    assert h.scheduler.calls == calls
    assert len(h.verdicts(job)) == 1
    assert _advice(h, job).generation == 1
    new = {e.kind for e in h.audit(job) if e.id is not None and e.id > last_event}
    assert not new & {AuditKind.VERDICT, AuditKind.ADVICE, *ACTION_KINDS}, new
    _assert_recovered(h, job, bad)


def test_restart_in_observe_mode_repeats_nothing(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.OBSERVE)
    job = h.submit("train-a")
    h.run(WARM_UP)
    h.inject(XID, job)
    h.run(15)  # decided, and the job has failed (it stays listed)
    assert h.job(job).state is JobState.FAILED
    assert len(h.verdicts(job)) == 1

    h.restart()
    h.run(30)
    assert len(h.verdicts(job)) == 1
    advice = _advice(h, job)
    assert advice.generation == 1
    assert h.kinds(job).count(AuditKind.VERDICT) == 1
    assert h.kinds(job).count(AuditKind.ADVICE) == 1
    assert h.scheduler.calls == []
    assert h.job(job).restart_count == 0


@pytest.mark.parametrize(
    ("crash_before", "crash_after"),
    [(1, None), (None, 1), (None, 2)],
    ids=["before-requeue_hold", "after-requeue_hold", "after-set_excluded_nodes"],
)
def test_restart_after_a_crash_in_the_middle_of_a_recovery(
    make_harness: MakeHarness, crash_before: int | None, crash_after: int | None
) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    h.run(WARM_UP)
    dying = RecordingScheduler(
        h.sim.scheduler, h.clock, crash_before=crash_before, crash_after=crash_after
    )
    h.restart(scheduler=dying)
    bad = h.inject(XID, job).node
    with pytest.raises(Crash):
        h.run(5)
    assert len(h.verdicts(job)) == 1

    h.restart()  # a new medic process, same store and cluster
    h.run_until(lambda: _converged(h, job), within=5)
    h.run(10)
    assert dying.names(job) + h.scheduler.names(job) == REQUEUE_COMMANDS
    _assert_recovered(h, job, bad)
    assert h.job(job).excluded_nodes == frozenset({bad})
    assert len(h.verdicts(job)) == 1
    advice = _advice(h, job)
    assert advice.generation == 1
    records = [r for r in h.actions(job) if r.node is None]
    assert [r.kind for r in records] == [
        ActionKind.REQUEUE_HOLD,
        ActionKind.EXCLUDE_NODES,
        ActionKind.RELEASE,
    ]
    # Every step was issued once, and recorded as succeeded: the one the dead process issued
    # with its outcome found from the scheduler by the new one (never "skipped": that record
    # says nothing was issued).
    assert h.audit(job, AuditKind.ACTION_SKIPPED) == []
    assert {r.status for r in records} == {ActionStatus.SUCCEEDED}
    recovered = [
        e.action for e in h.audit(job, AuditKind.ACTION_SUCCEEDED) if e.payload.get("recovered")
    ]
    assert recovered == ([] if crash_after is None else [REQUEUE_STEPS[crash_after - 1]])


def test_restart_before_the_decision_uses_the_stored_evidence(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT)
    job = h.submit("train-a")
    h.run(WARM_UP)
    bad = h.inject(XID, job).node
    h.run(0.2)  # the Xid line is read and its detection stored; the settle time is not over
    assert any(d.signature_id == "xid.fallen_off_bus" for d in h.detections(job, 0))
    assert h.verdicts(job) == []

    h.restart()
    h.run(20)
    [verdict, *_] = h.verdicts(job)
    assert verdict.attempt == 0
    assert verdict.root_signature == "xid.fallen_off_bus"
    assert verdict.implicated_nodes == frozenset({bad})
    _assert_recovered(h, job, bad)
    assert h.scheduler.names(job) == REQUEUE_COMMANDS


def test_restart_keeps_the_progress_of_the_running_attempt(make_harness: MakeHarness) -> None:
    h = make_harness(mode=Mode.ACT, policy=PolicySettings(max_attempts_without_progress=1))
    job = h.submit("train-a")
    h.run(WARM_UP)
    h.inject(XID, job)
    h.run_until(lambda: _converged(h, job), within=10)

    def saved_30() -> bool:
        attempts = h.store.list_attempts(CLUSTER, job)
        return len(attempts) == 2 and attempts[1].progress.last_checkpoint_step == 30

    h.run_until(saved_30, within=15)  # attempt 1 resumed from step 20 and saved step 30
    h.restart()
    h.run(1)
    bad = h.inject(XID, job).node  # before the checkpoint at step 40
    h.run(10)

    advice = _advice(h, job)
    assert advice.attempt == 1
    assert advice.action is AdviceAction.REQUEUE, advice.reason
    _assert_recovered(h, job, bad, restarts=2)
    attempt = h.store.list_attempts(CLUSTER, job)[1]
    assert attempt.progress.last_checkpoint_step == 30
    assert attempt.progress.loaded_checkpoint_step == 20


def test_a_hang_that_began_just_before_medic_restarted_is_still_detected(
    make_harness: MakeHarness,
) -> None:
    # The restarted medic reads no new progress line at all: it must count the silence from the
    # progress its predecessor stored, not wait for a first line that never comes.
    h = make_harness(mode=Mode.ACT, detect=DetectSettings(hang_floor_seconds=10.0))
    job = h.submit("train-a")
    h.run(WARM_UP)
    h.inject(FaultKind.HANG, job)
    h.run(6)  # the progress of the attempt is stored (at most every 5 s) before the restart
    assert h.store.list_attempts(CLUSTER, job)[0].progress.last_progress_at is not None
    h.restart()
    took = h.run_until(
        lambda: any(d.signature_id == "medic.hang.no_progress" for d in h.detections(job, 0)),
        within=60,
    )
    assert took <= 2 * 10.0  # the cautious threshold of a watch without a measured rhythm
    h.run(2)  # the settle time
    advice = _advice(h, job)
    assert advice.attempt == 0 and advice.action is AdviceAction.REQUEUE


def test_a_fatal_fault_after_a_straggler_flag_is_decided_on_its_own_evidence(
    make_harness: MakeHarness,
) -> None:
    # Seen in a long simulator run: 14% of faults detected and never acted on, because the
    # attempt counted as decided once its straggler was flagged.
    h = make_harness(mode=Mode.ACT, detect=DetectSettings(straggler_seconds=20.0))
    job = h.submit("train-a", num_nodes=4)
    h.run(20)
    slow = h.inject(FaultKind.STRAGGLER, job).node
    h.run_until(lambda: h.advice(job) is not None, within=120)
    flagged = _advice(h, job)
    assert (flagged.action, flagged.exclude_nodes) == (AdviceAction.EXCLUDE_NEXT, {slow})
    bad = h.inject(XID, job, node=h.job(job).nodes[0]).node
    assert bad is not None and bad != slow
    h.run(20)
    advice = _advice(h, job)
    assert (advice.attempt, advice.action, advice.rule) == (0, AdviceAction.REQUEUE,
                                                             "node-fault-requeue")  # fmt: skip
    assert advice.exclude_nodes == {slow, bad}  # the straggler's exclusion joins the restart
    assert [v.root_signature for v in h.verdicts(job)] == [
        "medic.straggler.slow_node",
        "xid.fallen_off_bus",
    ]
    state = h.job(job)
    assert state.restart_count == 1 and state.state is JobState.RUNNING
    assert not {slow, bad} & set(state.nodes)


def test_a_fatal_fault_after_a_job_level_slowdown_is_decided_on_its_own_evidence(
    make_harness: MakeHarness,
) -> None:
    # A one-node job that slows down has no peer to compare its node with: the slowdown is a
    # job-level observation that names nobody and advises nothing. A crash later in the same
    # attempt is recovered on its own evidence.
    h = make_harness(mode=Mode.ACT, detect=DetectSettings(straggler_seconds=20.0))
    job = h.submit("train-a", num_nodes=1)
    h.run(20)
    h.inject(FaultKind.STRAGGLER, job)
    h.run_until(
        lambda: any(d.signature_id == "medic.straggler.slow_job" for d in h.detections(job, 0)),
        within=120,
    )
    h.run(5)
    assert h.advice(job) is None
    bad = h.inject(XID, job).node
    h.run(20)
    advice = _advice(h, job)
    assert (advice.attempt, advice.action) == (0, AdviceAction.REQUEUE), advice.reason
    assert advice.exclude_nodes == {bad}
    assert [v.root_signature for v in h.verdicts(job)] == ["xid.fallen_off_bus"]
