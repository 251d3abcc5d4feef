"""Recovery policy v1: one table row per rule, and the no-progress window in detail."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from medic.config.settings import PolicySettings
from medic.domain.advice import AdviceAction
from medic.domain.attempts import Attempt, Progress
from medic.domain.cluster import Job, JobState, Mode
from medic.domain.diagnosis import FaultDomain, JobAction, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.policy.options import JobOptions
from medic.policy.recovery import (
    RULE_APPLICATION_STOP,
    RULE_NO_FAULT,
    RULE_NO_PROGRESS,
    RULE_NODE_FAULT,
    RULE_NODE_WARNING,
    RULE_RETRY,
    RULE_STRAGGLER,
    decide,
    effective_mode,
    stalled_attempts,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTER = ClusterName("sim")
JOB = Job(
    id=JobId("42"),
    cluster=CLUSTER,
    name="train",
    state=JobState.RUNNING,
    partition="p0",
    nodes=(NodeName("node001"), NodeName("node002")),
    excluded_nodes=frozenset({NodeName("node009")}),
    restart_count=2,
)
SETTINGS = PolicySettings()
N1, N2 = NodeName("node001"), NodeName("node002")


def verdict(
    domain: FaultDomain,
    action: JobAction,
    nodes: frozenset[NodeName] = frozenset(),
    root: str | None = "x",
    attempt: int = 2,
) -> Verdict:
    return Verdict(
        job_id=JOB.id,
        attempt=attempt,
        domain=domain,
        action=action,
        implicated_nodes=nodes,
        confidence=0.9,
        root_signature=SignatureId(root) if root else None,
        summary="what happened",
    )


def attempt(number: int, saved: int | None = None, loaded: int | None = None) -> Attempt:
    return Attempt(
        cluster=CLUSTER,
        job_id=JOB.id,
        number=number,
        nodes=JOB.nodes,
        state=JobState.FAILED,
        started_at=T0,
        ended_at=None,
        progress=Progress(last_checkpoint_step=saved, loaded_checkpoint_step=loaded),
    )


PROGRESSING = [attempt(0, saved=10), attempt(1, loaded=10, saved=20), attempt(2, loaded=20)]


@pytest.mark.parametrize(
    ("the_verdict", "action", "exclude", "rule"),
    [
        (verdict(FaultDomain.NONE, JobAction.NONE), AdviceAction.NONE, set(), RULE_NO_FAULT),
        (
            verdict(FaultDomain.SYSTEM_SOFTWARE, JobAction.NONE),
            AdviceAction.NONE,
            set(),
            RULE_NO_FAULT,
        ),
        (
            verdict(FaultDomain.APPLICATION, JobAction.STOP),
            AdviceAction.STOP,
            set(),
            RULE_APPLICATION_STOP,
        ),
        (
            verdict(FaultDomain.HARDWARE, JobAction.RESTART, frozenset({N2})),
            AdviceAction.REQUEUE,
            {N2, "node009"},
            RULE_NODE_FAULT,
        ),
        (
            verdict(FaultDomain.SYSTEM_SOFTWARE, JobAction.RESTART),
            AdviceAction.REQUEUE,
            {"node009"},
            RULE_RETRY,
        ),
        (
            verdict(
                FaultDomain.HARDWARE,
                JobAction.NONE,
                frozenset({N1}),
                root="medic.straggler.slow_node",
            ),
            AdviceAction.EXCLUDE_NEXT,
            {N1, "node009"},
            RULE_STRAGGLER,
        ),
        (
            verdict(FaultDomain.HARDWARE, JobAction.NONE, frozenset({N1}), root="xid.memory_remap"),
            AdviceAction.EXCLUDE_NEXT,
            {N1, "node009"},
            RULE_NODE_WARNING,
        ),
    ],
)
def test_rules(the_verdict: Verdict, action: AdviceAction, exclude: set[str], rule: str) -> None:
    request = decide(the_verdict, JOB, PROGRESSING, mode=Mode.OBSERVE, settings=SETTINGS)
    assert (request.action, request.exclude_nodes, request.rule) == (action, exclude, rule)
    assert (request.cluster, request.job_id, request.attempt) == (CLUSTER, JOB.id, 2)
    assert request.mode is Mode.OBSERVE
    assert "what happened" in request.reason and request.reason[0].isupper()


def test_straggler_requeue_when_configured() -> None:
    slow = verdict(
        FaultDomain.HARDWARE, JobAction.NONE, frozenset({N1}), "medic.straggler.slow_node"
    )
    request = decide(
        slow,
        JOB,
        PROGRESSING,
        mode=Mode.ACT,
        settings=PolicySettings(restart_on_straggler=True),
    )
    assert (request.action, request.rule, request.mode) == (
        AdviceAction.REQUEUE,
        RULE_STRAGGLER,
        Mode.ACT,
    )
    assert request.exclude_nodes == {N1, "node009"}


def test_no_progress_stops_a_crash_loop() -> None:
    attempts = [attempt(0, saved=10), attempt(1, loaded=10), attempt(2, loaded=10), attempt(3)]
    failing = verdict(FaultDomain.HARDWARE, JobAction.RESTART, frozenset({N2}), attempt=3)
    request = decide(failing, JOB, attempts, mode=Mode.ACT, settings=SETTINGS)
    assert (request.action, request.rule) == (AdviceAction.STOP, RULE_NO_PROGRESS)
    assert request.exclude_nodes == frozenset()
    assert "attempts 1-3" in request.reason and "step 10" in request.reason


def test_no_progress_override_from_the_job() -> None:
    attempts = [attempt(0, saved=10), attempt(1, loaded=10), attempt(2, loaded=10)]
    failing = verdict(FaultDomain.SYSTEM_SOFTWARE, JobAction.RESTART)
    default = decide(failing, JOB, attempts, mode=Mode.ACT, settings=SETTINGS)
    assert default.rule == RULE_RETRY  # attempt 0 saved, within the default window of 3
    strict = decide(
        failing, JOB, attempts, mode=Mode.ACT, settings=SETTINGS, max_attempts_without_progress=2
    )
    assert strict.rule == RULE_NO_PROGRESS
    assert "attempts 1-2" in strict.reason
    one = decide(
        failing, JOB, attempts, mode=Mode.ACT, settings=SETTINGS, max_attempts_without_progress=1
    )
    assert one.rule == RULE_NO_PROGRESS and "(attempt 2;" in one.reason


def test_application_stop_comes_before_no_progress() -> None:
    attempts = [attempt(0), attempt(1), attempt(2)]
    request = decide(
        verdict(FaultDomain.APPLICATION, JobAction.STOP),
        JOB,
        attempts,
        mode=Mode.ACT,
        settings=SETTINGS,
    )
    assert request.rule == RULE_APPLICATION_STOP


@pytest.mark.parametrize(
    ("attempts", "window", "stalled"),
    [
        ([], 3, False),
        ([attempt(0), attempt(1)], 3, False),  # fewer attempts than the window
        ([attempt(0), attempt(1), attempt(2)], 3, True),  # never saved anything
        ([attempt(0), attempt(1), attempt(2, saved=5)], 3, False),  # the current one counts
        ([attempt(0, saved=50), attempt(1, loaded=50, saved=50), attempt(2)], 2, True),
        ([attempt(0, saved=50), attempt(1, loaded=50, saved=60), attempt(2)], 2, False),
        # The window's first attempt resumed from 70 (saved by an attempt not listed).
        ([attempt(1, loaded=70, saved=70), attempt(2, loaded=70)], 2, True),
        # Attempts after the current one (a stale verdict) are not part of its window.
        ([attempt(0), attempt(1), attempt(2), attempt(3, saved=9)], 3, True),
        # Duplicates of an attempt: the last one given wins.
        ([attempt(0), attempt(1), attempt(2, saved=1), attempt(2)], 3, True),
        ([attempt(0), attempt(1), attempt(2)], 0, False),  # disabled
    ],
)
def test_stalled_attempts(attempts: list[Attempt], window: int, stalled: bool) -> None:
    assert (stalled_attempts(attempts, 2, window) is not None) is stalled


def test_stalled_attempts_reports_window_and_baseline() -> None:
    found = stalled_attempts([attempt(0, saved=10), attempt(1, loaded=10), attempt(2)], 2, 2)
    assert found is not None
    window, baseline = found
    assert [a.number for a in window] == [1, 2] and baseline == 10


def test_no_fault_when_the_verdict_domain_is_none_even_with_nodes() -> None:
    quiet = verdict(FaultDomain.NONE, JobAction.NONE, frozenset({N1}))
    request = decide(quiet, JOB, [], mode=Mode.OBSERVE, settings=SETTINGS)
    assert request.action is AdviceAction.NONE and request.exclude_nodes == frozenset()


def test_effective_mode() -> None:
    assert effective_mode(Mode.OBSERVE, JobOptions()) is Mode.OBSERVE
    assert effective_mode(Mode.OBSERVE, JobOptions(mode=Mode.ACT)) is Mode.ACT
    assert effective_mode(Mode.ACT, JobOptions(mode=Mode.OBSERVE)) is Mode.OBSERVE


def test_existing_exclusions_are_kept_on_retry() -> None:
    job = replace(JOB, excluded_nodes=frozenset())
    request = decide(
        verdict(FaultDomain.NETWORK, JobAction.RESTART),
        job,
        PROGRESSING,
        mode=Mode.ACT,
        settings=SETTINGS,
    )
    assert request.exclude_nodes == frozenset() and request.rule == RULE_RETRY
