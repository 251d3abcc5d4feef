"""Where one attempt ends and the next begins, as the job evaluator sees a Slurm job's log.

Issue 10 traced medic's double requeues to this: after medic requeued a job, the teardown lines
of the attempt it ended (``*** STEP n.0 ... CANCELLED ... DUE TO JOB REQUEUE ***``, srun's
``Exited with exit code 143``) arrived once the job counted its restart, and were read as the new
attempt's failure. Here a :class:`JobEvaluator` on the real SQLite store is fed real matcher
detections of such lines and scheduler snapshots of the job, pass by pass; the attempt each
detection is stored under and the advice published are asserted exactly.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

from medic.config.settings import Settings
from medic.control.evaluation import JobEvaluator
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.advice import AdviceAction
from medic.domain.cluster import Job, JobState, Mode, Node, NodeState
from medic.domain.ids import JobId, NodeName
from medic.domain.logs import LogLine, LogStream
from medic.telemetry.metrics import NullMetrics

from .conftest import CLUSTER, Harness, MakeHarness

JOB = JobId("77")
NODES = (NodeName("node1"), NodeName("node2"))
ACT = '{"medic": {"mode": "act"}}'
TEARDOWN = [
    "slurmstepd: error: *** STEP 77.0 ON node1 CANCELLED AT 2026-12-01T10:00:00 DUE TO JOB"
    " REQUEUE ***",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "srun: error: node2: tasks 8-15: Exited with exit code 143",
    "srun: error: node1: tasks 0-7: Exited with exit code 143",
    "[rank0]: Traceback (most recent call last):",
    "[rank0]: KeyError: 'labels'",
]


class Rig:
    """A JobEvaluator, its store and clock, and a way to run one pass with given log lines."""

    def __init__(self, h: Harness, **detect: object) -> None:
        self.h = h
        settings = Settings()
        settings = replace(settings, detect=replace(settings.detect, **detect))  # type: ignore[arg-type]
        self.evaluator = JobEvaluator(
            cluster=CLUSTER,
            store=h.store,
            modes=h.store,
            clock=h.clock,
            metrics=NullMetrics(),
            settings=settings,
            counts=defaultdict(int),
        )
        self.diagnoser = SignatureDiagnoser()

    def job(self, state: JobState, restart: int = 0, nodes: tuple[NodeName, ...] = NODES) -> Job:
        return Job(JOB, CLUSTER, "train", state, "gpu", nodes=nodes, restart_count=restart,
                   num_nodes=2, comment=ACT)  # fmt: skip

    def pass_(self, job: Job, lines: list[str] = [], nodes: list[Node] = []) -> None:  # noqa: B006
        now = self.h.clock.now()
        log = [LogLine(LogStream.JOB, text, now, job_id=JOB, seq=i) for i, text in enumerate(lines)]
        self.h.store.sync_jobs(CLUSTER, [job], now)
        routed = self.evaluator.route(self.diagnoser.scan(log), [job])
        self.evaluator.evaluate(job, routed, {n.name: n for n in nodes})
        self.h.clock.advance(0.2)

    def attempts_of(self, signature: str) -> list[int]:
        """The attempt of each line of ``signature`` (identical lines share a row, counted)."""
        return [d.attempt for d in self.h.store.list_detections(CLUSTER, JOB)
                if d.signature_id == signature for _ in range(d.count)]  # fmt: skip


def test_teardown_of_a_requeued_attempt_is_its_own_and_never_fails_the_next(
    make_harness: MakeHarness,
) -> None:
    rig = Rig(make_harness(mode=Mode.ACT))
    rig.pass_(rig.job(JobState.RUNNING))
    # medic requeued attempt 0: Slurm counts the restart at once, the job is queued (held).
    queued = replace(rig.job(JobState.PENDING, restart=1), held=True)
    rig.pass_(queued, TEARDOWN)
    for _ in range(10):
        rig.pass_(queued)
    running = rig.job(JobState.RUNNING, restart=1, nodes=(NodeName("node1"), NodeName("node3")))
    for _ in range(10):
        rig.pass_(running)
    assert rig.attempts_of("python.exception") == [0]
    assert rig.h.store.advice_for_job(CLUSTER, JOB) is None
    assert rig.h.store.list_verdicts(CLUSTER, JOB) == []


def test_a_cancel_seen_completing_is_not_decided(make_harness: MakeHarness) -> None:
    # A person's scancel: the job shows COMPLETING for a moment, then CANCELLED. A trainer that
    # prints a traceback on SIGTERM must not turn that into a verdict.
    rig = Rig(make_harness(mode=Mode.ACT))
    rig.pass_(rig.job(JobState.RUNNING))
    completing = rig.job(JobState.COMPLETING)
    rig.pass_(completing, TEARDOWN[4:])
    for _ in range(10):  # longer than the settle time
        rig.pass_(completing)
    rig.pass_(rig.job(JobState.CANCELLED))
    assert rig.h.store.advice_for_job(CLUSTER, JOB) is None


def test_a_failure_seen_while_running_is_decided_while_completing(
    make_harness: MakeHarness,
) -> None:
    rig = Rig(make_harness(mode=Mode.ACT))
    crash = [
        "[rank8]: Traceback (most recent call last):",
        "[rank8]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    rig.pass_(rig.job(JobState.RUNNING), crash)
    for _ in range(5):
        rig.pass_(rig.job(JobState.COMPLETING))
    advice = rig.h.store.advice_for_job(CLUSTER, JOB)
    assert advice is not None and advice.attempt == 0


def test_a_node_only_not_responding_waits_for_slurm_then_the_exclusion_is_advised(
    make_harness: MakeHarness,
) -> None:
    rig = Rig(make_harness(mode=Mode.ACT))
    node1 = Node(NodeName("node1"), NodeState.ALLOCATED)
    lost = Node(NodeName("node2"), NodeState.DOWN, not_responding=True)
    rig.pass_(rig.job(JobState.RUNNING), nodes=[node1])
    for _ in range(20):  # 4 s not responding: no decision, Slurm has not declared it down
        rig.pass_(rig.job(JobState.RUNNING), nodes=[node1, lost])
    assert rig.h.store.advice_for_job(CLUSTER, JOB) is None
    assert rig.attempts_of("medic.scheduler.node_fail") == [0]
    # Slurm sets it DOWN, ends the job and requeues it by itself.
    down = replace(lost, not_responding=False)
    rig.pass_(rig.job(JobState.PENDING, restart=1, nodes=()), nodes=[node1, down])
    advice = rig.h.store.advice_for_job(CLUSTER, JOB)
    assert advice is not None
    assert (advice.attempt, advice.action) == (0, AdviceAction.REQUEUE)
    assert advice.exclude_nodes == {NodeName("node2")}
    assert [v.implicated_nodes for v in rig.h.store.list_verdicts(CLUSTER, JOB)] == [{"node2"}]


def test_the_wait_for_a_not_responding_node_is_bounded(make_harness: MakeHarness) -> None:
    rig = Rig(make_harness(mode=Mode.ACT), node_failure_wait_seconds=2.0)
    lost = Node(NodeName("node2"), NodeState.DOWN, not_responding=True)
    rig.pass_(rig.job(JobState.RUNNING))
    for _ in range(8):  # 1.6 s
        rig.pass_(rig.job(JobState.RUNNING), nodes=[lost])
    assert rig.h.store.advice_for_job(CLUSTER, JOB) is None
    rig.h.clock.advance(timedelta(seconds=1).total_seconds())
    rig.pass_(rig.job(JobState.RUNNING), nodes=[lost])
    advice = rig.h.store.advice_for_job(CLUSTER, JOB)
    assert advice is not None and advice.exclude_nodes == {NodeName("node2")}


def test_an_exception_on_every_rank_in_plain_print_style_stops_at_the_first_attempt(
    make_harness: MakeHarness,
) -> None:
    # The independent harness's trainer: `[rankN] ` prefixes (a space, no colon) and no
    # Megatron wording. medic retried it twice before it could tell the ranks apart.
    rig = Rig(make_harness(mode=Mode.ACT))
    rig.pass_(rig.job(JobState.RUNNING), [f"[rank{r}] step 40 loss 2.3105" for r in (0,)])
    trace = []
    for rank in range(16):
        trace += [
            f"[rank{rank}] Traceback (most recent call last):",
            f'[rank{rank}]   File "/opt/train/loop.py", line 88, in train_step',
            f"[rank{rank}]     labels = batch['labels']",
            f"[rank{rank}] KeyError: 'labels'",
        ]
    rig.pass_(rig.job(JobState.RUNNING), trace)
    for _ in range(3):
        rig.pass_(rig.job(JobState.FAILED))
    advice = rig.h.store.advice_for_job(CLUSTER, JOB)
    assert advice is not None
    assert (advice.attempt, advice.action, advice.rule) == (
        0,
        AdviceAction.STOP,
        "application-error-stop",
    )


# Verbatim from a public report of a requeue's teardown (github.com/facebookincubator/submitit
# issue 1708): the handler of the requeued run exits 1, which read as the new run's failure
# would be a cascade of an application error.
SUBMITIT_1708 = [
    "slurmstepd: error: *** JOB 608 ON SERVER_NAME CANCELLED AT 2022-08-12T02:06:12 DUE TO JOB"
    " REQUEUE ***",
    "slurmstepd: error: *** STEP 608.0 ON SERVER_NAME CANCELLED AT 2022-08-12T02:06:12 DUE TO"
    " JOB REQUEUE ***",
    "slurmstepd: error: Failed to send MESSAGE_TASK_EXIT: Connection refused",
    "slurmstepd: error: Failed to send MESSAGE_TASK_EXIT: Connection refused",
    "srun: error: SERVER_NAME: tasks 2-3: Exited with exit code 1",
]


def test_a_public_requeue_teardown_is_the_ended_attempts(make_harness: MakeHarness) -> None:
    rig = Rig(make_harness(mode=Mode.ACT))
    rig.pass_(rig.job(JobState.RUNNING))
    queued = replace(rig.job(JobState.PENDING, restart=1), held=True)
    rig.pass_(queued, SUBMITIT_1708)
    for _ in range(10):
        rig.pass_(replace(queued, held=False))
    for _ in range(10):
        rig.pass_(rig.job(JobState.RUNNING, restart=1))
    assert rig.attempts_of("slurm.task_exit") == [0]
    assert rig.attempts_of("slurm.cancelled_requeue") == [0, 0]
    assert rig.h.store.advice_for_job(CLUSTER, JOB) is None
