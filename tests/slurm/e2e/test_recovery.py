"""End to end on real Slurm: a 2-node x 8-rank training job (``train.py``) on the module's 3-node
local cluster, a real fault, and medic (``build(settings)`` with ``scheduler.kind: slurm``, its
loop in a thread) carrying the job through detection, verdict, advice and recovery.

Faults: (a) an Xid 79 in node2's kernel log and node2's ranks killed (once more with the kernel
line read only after the run ended); (b) node2's slurmd (and its job processes) killed: a node
failure; (c) node2's ranks stopped (SIGSTOP): a silent hang; (d) a Python exception on every rank:
an application bug. In act mode (a)-(c) end with the job running again from its last checkpoint,
without node2 where medic has direct evidence against it; (d) ends with the job stopped and not
retried. In observe mode medic issues no scheduler command at all. The remote controller runs
once, as a real ``medic controller`` process reaching Slurm through SSH, and is killed between
requeue-hold and release: its successor finishes the recovery without repeating a step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from medic.api.app import create_app
from medic.api.auth import issue_token
from medic.dev.slurm import LocalSlurm
from medic.domain.actions import ActionKind, ActionStatus
from medic.domain.advice import AdviceAction, Reconciliation
from medic.domain.auth import Role
from medic.domain.cluster import Mode
from medic.testing import LiveServer

from .conftest import Jobs, Sshd
from .harness import (
    ACT,
    MEGATRON,
    OBSERVE,
    TRAINERS,
    Medic,
    Trainer,
    TrainingJob,
    poll,
    xid79_line,
)

pytestmark = pytest.mark.slow

HANG_FLOOR_S = 10.0
NCCL_WATCHDOG_S = 600.0
VICTIM = "node2"
CHECKPOINT_EVERY = 5
Trail = Sequence[tuple[str, str | None]]
MedicFactory = Callable[..., Medic]

REQUEUE_TRAIL: Trail = [
    ("detection", None),
    ("verdict", None),
    ("advice", "requeue"),
    ("action-started", "requeue_hold"),
    ("action-succeeded", "requeue_hold"),
    ("action-started", "exclude_nodes"),
    ("action-succeeded", "exclude_nodes"),
    ("action-started", "release"),
    ("action-succeeded", "release"),
    ("reconciliation", "requeue"),
]


# ------------------------------------------------------------------------------------ helpers
def start_training(jobs: Jobs, name: str, comment: str, trainer: Trainer = MEGATRON) -> TrainingJob:
    """Submit a 2-node job and wait until it runs on node1+node2 and saved a checkpoint.

    Each trainer's job has its own name, so its own output file: the file of an ended job of the
    same name would be the new job's (``--open-mode=append``)."""
    name = name if trainer is MEGATRON else f"{name}-{trainer.name}"
    job = jobs.new(name, comment, checkpoint_every=CHECKPOINT_EVERY, trainer=trainer)
    info = poll("the job to run", job.running, timeout=60)
    assert job.node_list(info) == ["node1", VICTIM]
    poll("a first checkpoint", lambda: job.checkpoint_step() >= CHECKPOINT_EVERY, timeout=60)
    assert len(job.pids_on(VICTIM)) == job.tasks_per_node
    return job


def xid79_and_kill(cluster: LocalSlurm, job: TrainingJob) -> None:
    """The GPU of one of node2's ranks falls off the bus: the kernel logs Xid 79, the ranks die."""
    pids = job.pids_on(VICTIM)
    with cluster.kernel_log(VICTIM).open("a") as log:
        log.write(xid79_line(VICTIM, pids[0]) + "\n")
    job.signal_ranks(VICTIM, signal.SIGKILL)


def is_subsequence(expected: Trail, trail: Trail) -> bool:
    """``expected`` appears in ``trail`` in order (an action of None matches any)."""
    rest = iter(trail)
    return all(
        any(kind == k and (action is None or action == a) for k, a in rest)
        for kind, action in expected
    )


def detected_within(medic: Medic, job: TrainingJob, fault: float, limit: float) -> float:
    """Seconds from the fault to the first stored evidence about the job."""
    at = poll("a detection", lambda: medic.first_detection_at(job.job_id, fault), timeout=limit)
    return at - fault


def converged(medic: Medic, job: TrainingJob, *, timeout: float = 60) -> None:
    def done() -> bool:
        advice = medic.advice(job.job_id)
        return advice is not None and advice.status is Reconciliation.CONVERGED

    poll("the advice to converge", done, timeout=timeout)


def assert_resumed(job: TrainingJob, checkpoint: int, *, avoid: str | None) -> None:
    """The job runs again (restarted, not on ``avoid``) and trains on from ``checkpoint``."""
    info = poll("the job running again", lambda: job.running(restarts=1, avoid=avoid), timeout=60)
    assert job.restarts(info) >= 1
    steps = poll("a new iteration after the resume", job.iterations_after_resume, timeout=60)
    assert job.loaded_steps()[-1] == checkpoint
    assert steps[0] == checkpoint + 1


def assert_one_requeue(job: TrainingJob, *, avoid: str | None, watch_s: float = 4.0) -> None:
    """Exactly one requeue for the fault: still running its first restart, ``watch_s`` seconds
    after medic's advice converged (a second requeue would show as Restarts=2 or PENDING)."""
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline:
        info = job.info()
        assert job.restarts(info) == 1, info
        assert info["JobState"] in ("RUNNING", "CONFIGURING"), info
        if avoid is not None:
            assert avoid not in job.node_list(info), info
        time.sleep(0.5)


def requeue_commands(job_id: str, excluded: str | None) -> list[tuple[str, ...]]:
    commands = [("scontrol", "requeuehold", job_id)]
    if excluded:
        commands.append(("scontrol", "update", f"JobId={job_id}", f"ExcNodeList={excluded}"))
    return [*commands, ("scontrol", "release", job_id)]


def assert_requeued(medic: Medic, job: TrainingJob, *, excluded: str | None) -> None:
    """Advice converged, the audit trail complete, each scheduler step issued exactly once."""
    converged(medic, job)
    advice = medic.advice(job.job_id)
    assert advice is not None and advice.action is AdviceAction.REQUEUE
    assert advice.mode is Mode.ACT
    assert advice.exclude_nodes == frozenset({excluded} if excluded else set())
    expected = [step for step in REQUEUE_TRAIL if excluded or step[1] != "exclude_nodes"]
    assert is_subsequence(expected, medic.trail(job.job_id)), medic.trail(job.job_id)
    actions = {a.kind: a.status for a in medic.actions(job.job_id)}
    kinds = [ActionKind.REQUEUE_HOLD, ActionKind.RELEASE]
    kinds += [ActionKind.EXCLUDE_NODES] if excluded else []
    assert actions == dict.fromkeys(kinds, ActionStatus.SUCCEEDED)
    assert medic.mutating(job.job_id) == requeue_commands(job.job_id, excluded)
    # the hold mark for ``medic watchdog``: put on right before the hold, taken off at the end
    marks = [argv[-1] for argv in medic.marks(job.job_id)]
    assert len(marks) == 2 and marks[0].startswith("AdminComment=[medic-hold advice="), marks
    assert marks[1] == "AdminComment=", marks
    excluded_now = job.info().get("ExcNodeList", "(null)")
    assert excluded_now == (excluded or "(null)")


# ------------------------------------------------------------------------------------ act mode
@pytest.mark.parametrize("trainer", TRAINERS, ids=lambda t: t.name)
def test_xid79_requeues_without_the_node_and_resumes_from_the_checkpoint(
    cluster: LocalSlurm, jobs: Jobs, medic_factory: MedicFactory, trainer: Trainer
) -> None:
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S, "scheduler.mode": "act"})
    job = start_training(jobs, "xid79", ACT, trainer)
    fault = time.time()
    xid79_and_kill(cluster, job)
    assert detected_within(medic, job, fault, 30) < 5
    checkpoint = job.checkpoint_step()

    assert_resumed(job, checkpoint, avoid=VICTIM)
    xid = [d for d in medic.detections(job.job_id) if d.signature_id == "xid.fallen_off_bus"]
    assert xid and xid[0].node == VICTIM and xid[0].attempt == 0
    verdict = medic.verdicts(job.job_id)[0]
    assert verdict.root_signature == "xid.fallen_off_bus"
    assert verdict.implicated_nodes == {VICTIM}
    assert_requeued(medic, job, excluded=VICTIM)
    assert_one_requeue(job, avoid=VICTIM)
    # the cluster in act mode: the node left the pool at once (drained by medic, its repair still
    # waiting for a person), drained exactly once
    node = cluster.env.run("scontrol", "show", "node", VICTIM).stdout
    assert "DRAIN" in node and "Reason=medic: cordon alert" in node, node
    drains = [a for a in medic.mutating() if f"NodeName={VICTIM}" in a and "State=DRAIN" in a]
    assert len(drains) == 1, medic.mutating()


def test_a_kernel_line_read_after_the_run_ended_still_excludes_the_node(
    cluster: LocalSlurm, jobs: Jobs, medic_factory: MedicFactory
) -> None:
    # The ranks die first; the Xid line reaches medic only once it has seen the run end (a
    # kernel log often trails the crash it explains). Within detect.settle_seconds it counts.
    medic = medic_factory(
        **{"detect.hang_floor_seconds": HANG_FLOOR_S, "detect.settle_seconds": 3.0}
    )
    job = start_training(jobs, "latexid", ACT)
    pids = job.pids_on(VICTIM)
    job.signal_ranks(VICTIM, signal.SIGKILL)
    poll("medic to see the run end", lambda: medic.job_state(job.job_id) not in ("", "running"),
         timeout=20, every=0.02)  # fmt: skip
    with cluster.kernel_log(VICTIM).open("a") as log:
        log.write(xid79_line(VICTIM, pids[0]) + "\n")
    checkpoint = job.checkpoint_step()

    assert_resumed(job, checkpoint, avoid=VICTIM)
    verdict = medic.verdicts(job.job_id)[0]
    assert verdict.root_signature == "xid.fallen_off_bus"
    assert verdict.implicated_nodes == {VICTIM}
    assert_requeued(medic, job, excluded=VICTIM)


@pytest.mark.parametrize("trainer", TRAINERS, ids=lambda t: t.name)
def test_node_failure_lets_slurm_requeue_and_only_adds_the_exclusion(
    cluster: LocalSlurm, jobs: Jobs, medic_factory: MedicFactory, trainer: Trainer
) -> None:
    # medic sees node2 NOT_RESPONDING at once but does not race Slurm, which declares it DOWN
    # after SlurmdTimeout and requeues the job itself: a requeue issued before that leaves the
    # job's GRES half released (seen on an independent 22.05 lab). medic only adds the exclusion.
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "nodefail", ACT, trainer)
    fault = time.time()
    cluster.kill_slurmd(VICTIM, with_jobs=True)  # slurmd, slurmstepd and the ranks
    # Slurm marks the node NOT_RESPONDING after SlurmdTimeout (5 s); medic reads it from sinfo.
    assert detected_within(medic, job, fault, 30) < 12
    checkpoint = job.checkpoint_step()

    assert_resumed(job, checkpoint, avoid=VICTIM)
    found = {d.signature_id: d for d in medic.detections(job.job_id)}
    assert found["medic.scheduler.node_fail"].node == VICTIM
    verdict = medic.verdicts(job.job_id)[0]
    assert verdict.implicated_nodes == {VICTIM} and verdict.attempt == 0
    converged(medic, job)
    advice = medic.advice(job.job_id)
    assert advice is not None and advice.action is AdviceAction.REQUEUE
    assert advice.exclude_nodes == {VICTIM} and advice.attempt == 0
    # Slurm's requeue was the only one; medic's exclusion went in unless the job had already
    # started again elsewhere (then it is not needed until its next requeue).
    update = ("scontrol", "update", f"JobId={job.job_id}", f"ExcNodeList={VICTIM}")
    assert medic.mutating(job.job_id) in ([], [update])
    assert_one_requeue(job, avoid=VICTIM)


@pytest.mark.parametrize("trainer", TRAINERS, ids=lambda t: t.name)
def test_hang_is_detected_long_before_the_nccl_watchdog_and_requeued_without_a_guess(
    jobs: Jobs, medic_factory: MedicFactory, trainer: Trainer
) -> None:
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "hang", ACT, trainer)
    fault = time.time()
    job.signal_ranks(VICTIM, signal.SIGSTOP)  # no error line anywhere: progress just stops
    took = detected_within(medic, job, fault, 60)
    assert HANG_FLOOR_S - 1 <= took < HANG_FLOOR_S + 10 < NCCL_WATCHDOG_S
    checkpoint = job.checkpoint_step()

    assert_resumed(job, checkpoint, avoid=None)
    hang = [d for d in medic.detections(job.job_id) if d.signature_id == "medic.hang.no_progress"]
    assert hang and hang[0].job_id == job.job_id and hang[0].attempt == 0
    verdict = medic.verdicts(job.job_id)[0]
    # A silent stall names no node: medic excludes a node only on evidence against it.
    evidence = {d.node for d in verdict.evidence if d.node}
    assert verdict.implicated_nodes <= evidence
    assert verdict.implicated_nodes == frozenset()
    assert_requeued(medic, job, excluded=None)
    assert_one_requeue(job, avoid=None)


@pytest.mark.parametrize("trainer", TRAINERS, ids=lambda t: t.name)
def test_application_bug_stops_the_job_without_a_retry(
    jobs: Jobs, medic_factory: MedicFactory, trainer: Trainer
) -> None:
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "appbug", ACT, trainer)
    fault = time.time()
    job.raise_at(job.step() + 2)  # every rank: KeyError: 'labels'
    assert detected_within(medic, job, fault, 30) < 5
    converged(medic, job)

    advice = medic.advice(job.job_id)
    assert advice is not None and advice.action is AdviceAction.STOP
    assert advice.rule == "application-error-stop"
    verdict = medic.verdicts(job.job_id)[0]
    assert verdict.root_signature == "python.exception" and verdict.action.value == "stop"
    assert "KeyError: 'labels'" in verdict.summary
    trail = medic.trail(job.job_id)
    assert is_subsequence([("detection", None), ("verdict", None), ("advice", "stop")], trail)
    # The job was already ending when medic decided (srun --kill-on-bad-exit): the cancel is
    # either issued once or recorded as skipped, never repeated.
    cancels = [a for a in medic.actions(job.job_id) if a.kind is ActionKind.CANCEL]
    assert len(cancels) == 1
    assert cancels[0].status in (ActionStatus.SUCCEEDED, ActionStatus.SKIPPED)
    assert medic.mutating(job.job_id) in ([], [("scancel", job.job_id)])
    assert trail[-1] == ("reconciliation", "stop")
    # Not retried: still ended, never restarted, well past the time a requeue takes to run.
    time.sleep(8)
    info = job.info()
    assert info["JobState"] in ("FAILED", "CANCELLED") and job.restarts(info) == 0


# ------------------------------------------------------------------------------------ observe
def test_observe_mode_advises_and_issues_no_scheduler_command(
    cluster: LocalSlurm, jobs: Jobs, medic_factory: MedicFactory
) -> None:
    medic = medic_factory(**{"detect.hang_floor_seconds": HANG_FLOOR_S})
    job = start_training(jobs, "observed", OBSERVE)
    fault = time.time()
    xid79_and_kill(cluster, job)
    assert detected_within(medic, job, fault, 30) < 5

    def advised() -> bool:
        return medic.advice(job.job_id) is not None

    poll("the advice", advised, timeout=30)
    advice = medic.advice(job.job_id)
    assert advice is not None and advice.mode is Mode.OBSERVE
    assert advice.action is AdviceAction.REQUEUE and advice.exclude_nodes == {VICTIM}
    assert advice.status is Reconciliation.PENDING
    time.sleep(8)  # longer than a requeue takes to show
    assert medic.mutating() == []  # not one scheduler command, for any job
    assert medic.actions(job.job_id) == []
    kinds = {kind for kind, _action in medic.trail(job.job_id)}
    assert {"detection", "verdict", "advice"} <= kinds
    assert not kinds & {"action-started", "action-succeeded", "action-skipped", "reconciliation"}
    info = job.info()
    assert info["JobState"] == "FAILED" and job.restarts(info) == 0
    assert info.get("ExcNodeList") == "(null)"


# ------------------------------------------------------------------------------------ remote
def controller_config(cluster: LocalSlurm, sshd: Sshd, path: Path) -> Path:
    path.write_text(
        "scheduler:\n  kind: slurm\n"
        "slurm:\n  runner: ssh\n  ssh_host: 127.0.0.1\n  ssh_user: root\n"
        f"  ssh_port: {sshd.port}\n  ssh_key: {sshd.key}\n"
        f"  slurm_conf: {cluster.env.slurm_conf}\n  command_timeout_seconds: 30\n"
        "controller:\n  poll_seconds: 0.2\n  watchdog_timeout_seconds: 120\n"
    )
    return path


def controller_token(engine: Medic) -> str:
    """A new API token of role controller (the remote controller authenticates with it)."""
    _token, secret = issue_token(
        engine.store, engine.store, "e2e-controller", Role.CONTROLLER, datetime.now(UTC), "test:e2e"
    )
    return secret


def start_controller(
    config: Path, api: LiveServer, state: Path, sshd: Sshd, log: Path, token: str
) -> subprocess.Popen[bytes]:
    """``medic controller`` in act mode, its ``ssh`` being the sshd fixture's wrapper."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MEDIC_"))}
    env["PATH"] = f"{sshd.bin}:{env.get('PATH', '/usr/bin:/bin')}"
    env["MEDIC_TOKEN"] = token
    argv = [sys.executable, "-m", "medic", "--config", str(config), "--log-level", "info"]
    argv += ["controller", "--api", api.url, "--cluster", "medic", "--mode", "act"]
    argv += ["--state-dir", str(state)]
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)


def ssh_commands(sshd: Sshd, job_id: str) -> list[str]:
    """The mutating Slurm commands that went through SSH for the job (remote words only)."""
    found = []
    for line in sshd.commands.read_text().splitlines():
        words = line.split()
        if "AdminComment=" in line:
            continue  # medic's hold mark, not a scheduling step
        for verb in ("requeuehold", "release", "update", "hold"):
            if f"scontrol {verb}" in line and (job_id in words or f"JobId={job_id}" in words):
                found.append(verb)
        if "scancel" in words and job_id in words:
            found.append("scancel")
    return found


def test_remote_controller_over_ssh_killed_between_hold_and_release(
    cluster: LocalSlurm,
    jobs: Jobs,
    medic_factory: MedicFactory,
    sshd: Sshd,
    tmp_path: Path,
) -> None:
    # The engine publishes act-mode advice; only the remote controller carries it out.
    engine = medic_factory(embedded_controller=False, **{"detect.hang_floor_seconds": 60.0})
    api = LiveServer(create_app(engine.services)).start()
    config = controller_config(cluster, sshd, tmp_path / "controller.yaml")
    state, log = tmp_path / "controller", tmp_path / "controller.log"
    token = controller_token(engine)
    first = second = None
    try:
        job = start_training(jobs, "remote", ACT)
        sshd.kill_after_hold.touch()
        first = start_controller(config, api, state, sshd, log, token)
        xid79_and_kill(cluster, job)
        checkpoint = job.checkpoint_step()

        # SIGKILLed right after `scontrol requeuehold` went through, before recording it.
        assert first.wait(timeout=60) == -signal.SIGKILL, log.read_text()
        held = job.info()
        assert job.restarts(held) == 1 and held.get("JobState") == "PENDING"
        assert held.get("Priority") == "0"  # held: the release never came
        hold = {a.kind: a for a in engine.actions(job.job_id)}[ActionKind.REQUEUE_HOLD]
        assert hold.status is ActionStatus.STARTED
        assert ssh_commands(sshd, job.job_id) == ["requeuehold"]

        second = start_controller(config, api, state, sshd, log, token)
        converged(engine, job, timeout=60)
        assert_resumed(job, checkpoint, avoid=VICTIM)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
        api.stop()

    # Each step went to Slurm exactly once over SSH; the engine itself issued nothing.
    assert ssh_commands(sshd, job.job_id) == ["requeuehold", "update", "release"]
    assert engine.mutating() == []
    assert job.info().get("ExcNodeList") == VICTIM
    statuses = {a.kind: a.status for a in engine.actions(job.job_id)}
    assert statuses == {
        # done by the killed one: its outcome found in Slurm by the next one, never "skipped"
        ActionKind.REQUEUE_HOLD: ActionStatus.SUCCEEDED,
        ActionKind.EXCLUDE_NODES: ActionStatus.SUCCEEDED,
        ActionKind.RELEASE: ActionStatus.SUCCEEDED,
    }
    trail = engine.trail(job.job_id)
    assert is_subsequence(
        [
            ("advice", "requeue"),
            ("action-started", "requeue_hold"),
            ("action-succeeded", "requeue_hold"),  # by the second controller, from Slurm
            ("action-started", "exclude_nodes"),
            ("action-succeeded", "exclude_nodes"),
            ("action-started", "release"),
            ("action-succeeded", "release"),
            ("reconciliation", "requeue"),
        ],
        trail,
    ), trail
    assert trail.count(("action-started", "requeue_hold")) == 1
    assert ("action-skipped", "requeue_hold") not in trail
    actors = {e.actor for e in engine.audit(job.job_id) if e.kind.value.startswith("action")}
    assert actors and all(actor.startswith("controller:") for actor in actors)
    assert "released job" not in log.read_text()  # the watchdog never had to step in
