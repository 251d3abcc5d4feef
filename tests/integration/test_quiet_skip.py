"""Skipping quiet jobs (``loop.skip_quiet_jobs``) changes what a pass costs, never what it does.

The same deterministic cluster (simulator on a fake clock) runs twice, once with the skip and
once evaluating every job every pass, through crashes, a node failure, a hang, a straggler, an
application bug and a person's cancel. The scheduler commands (with their times), the audit
trail, the verdicts and the progress stored must be identical; and the skip must really skip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from medic.config.settings import DetectSettings, LoopSettings
from medic.control.evaluation import JobEvaluator
from medic.domain.cluster import Mode
from medic.domain.faults import FaultKind

from .conftest import CLUSTER, SIM, Harness, MakeHarness

SCENARIO_SECONDS = 160.0


def _run(
    make_harness: MakeHarness, *, skip: bool, shard: Callable[[Harness], None] | None = None
) -> Harness:
    """The scenario; ``shard`` may give the harness a loop with shard workers first."""
    h = make_harness(
        mode=Mode.ACT,
        sim=replace(SIM, nodes=24, nccl_timeout_seconds=5.0),
        detect=DetectSettings(straggler_seconds=20.0, hang_floor_seconds=30.0),
        loop=LoopSettings(skip_quiet_jobs=skip),
    )
    if shard is not None:
        shard(h)
    jobs = [h.submit(f"train-{i}", partition=f"p{i % 2}") for i in range(8)]
    h.run(13.0)
    h.inject(FaultKind.GPU_FELL_OFF_BUS, jobs[0])
    h.inject(FaultKind.STRAGGLER, jobs[1])
    h.run(7.0)
    h.inject(FaultKind.NODE_FAIL, jobs[2])
    h.inject(FaultKind.APP_BUG, jobs[3])
    h.run(5.0)
    h.inject(FaultKind.HANG, jobs[4])
    h.sim.scheduler.cancel(jobs[5], "a person cancels it")
    h.run(10.0)
    h.inject(FaultKind.IB_LINK_DOWN, jobs[6])
    h.run(SCENARIO_SECONDS - 35.0)
    return h


def _trail(h: Harness) -> list[tuple[Any, ...]]:
    return [
        (e.time, e.kind, e.subject_id, e.signature_id, e.verdict, e.action, e.mode, e.payload)
        for e in h.audit()
    ]


def _progress(h: Harness) -> list[tuple[Any, ...]]:
    return [
        (a.job_id, a.number, a.progress)
        for job in h.store.list_jobs(CLUSTER)
        for a in h.store.list_attempts(CLUSTER, job.id)
    ]


@pytest.fixture
def evaluations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs evaluated in full, one entry per evaluation."""
    seen: list[str] = []
    real = JobEvaluator._evaluate

    def counting(self: JobEvaluator, job: Any, *args: Any) -> None:
        seen.append(job.id)
        real(self, job, *args)

    monkeypatch.setattr(JobEvaluator, "_evaluate", counting)
    return seen


def test_skipping_quiet_jobs_does_exactly_what_evaluating_every_job_does(
    make_harness: MakeHarness, evaluations: list[str]
) -> None:
    skipped = _run(make_harness, skip=True)
    with_skip = len(evaluations)
    evaluations.clear()
    full = _run(make_harness, skip=False)

    assert [(c.name, c.args, c.at) for c in skipped.scheduler.calls] == [
        (c.name, c.args, c.at) for c in full.scheduler.calls
    ]
    assert _trail(skipped) == _trail(full)
    assert [v for j in range(1, 9) for v in skipped.verdicts(str(j))] == [  # type: ignore[arg-type]
        v
        for j in range(1, 9)
        for v in full.verdicts(str(j))  # type: ignore[arg-type]
    ]
    assert _progress(skipped) == _progress(full)
    # The scenario did what it says: recoveries, a stop and the straggler's exclusion.
    actions = {c.name for c in full.scheduler.calls}
    assert {"requeue_hold", "release", "cancel"} <= actions, actions
    roots = {e.signature_id for e in full.audit() if e.kind.value == "verdict"}
    assert {
        "xid.fallen_off_bus",
        "medic.straggler.slow_node",
        "medic.scheduler.node_fail",
        "python.exception",
        "medic.hang.no_progress",
        "mlx5.link_down",
    } <= roots, roots
    assert not full.audit("6"), "a person's cancel is left alone"
    # ... and the skip skipped most evaluations (a job prints one line every 0.5 s here).
    assert with_skip < 0.6 * len(evaluations), (with_skip, len(evaluations))
