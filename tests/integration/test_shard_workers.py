"""``loop.workers: 2``: two processes match and evaluate the jobs, each its own shard.

The scenario of ``test_quiet_skip`` (every fault kind, a person's cancel) runs once in one
process and once with two shard workers on the same kind of store: the same scheduler commands
in the same order, the same verdicts, the same trail per job. Times may differ by the few
milliseconds a worker's clock runs on between the loop's reading and its own, so they are left
out. A worker killed mid-run is started again and the jobs it held still recover.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import replace

import pytest

from medic.config.settings import LoopSettings, StoreSettings
from medic.control.loop import ControlLoop
from medic.control.shards import shard_of
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.cluster import JobState, Mode
from medic.domain.faults import FaultKind
from medic.errors import TransientError
from medic.telemetry.metrics import NullMetrics
from medic.workers import ProcessShardPool

from .conftest import CLUSTER, Harness, MakeHarness
from .test_quiet_skip import _run

pytestmark = pytest.mark.slow


@pytest.fixture
def pools() -> Iterator[list[ProcessShardPool]]:
    opened: list[ProcessShardPool] = []
    yield opened
    for pool in opened:
        pool.close()


def _sharded(pools: list[ProcessShardPool], workers: int = 2):  # type: ignore[no-untyped-def]
    def shard(h: Harness) -> None:
        settings = replace(
            h.settings,
            store=StoreSettings(url=h.store.url),
            loop=replace(h.settings.loop, workers=workers),
        )
        pool = ProcessShardPool(settings)
        pools.append(pool)
        h.loop = ControlLoop(
            scheduler=h.scheduler,
            logs=h.logs,
            store=h.store,
            modes=h.store,
            diagnoser=SignatureDiagnoser(),
            clock=h.clock,
            metrics=NullMetrics(),
            settings=settings,
            shards=pool,
        )

    return shard


def _per_job(h: Harness) -> dict[str, list[tuple[object, ...]]]:
    return {
        str(job.id): [
            (e.kind, e.signature_id, e.verdict, e.action, e.mode) for e in h.audit(job.id)
        ]
        for job in h.store.list_jobs(CLUSTER)
    }


def _verdicts(h: Harness, job_id: str) -> list[tuple[object, ...]]:
    return [(v.root_signature, v.implicated_nodes, v.action) for v in h.verdicts(job_id)]  # type: ignore[arg-type]


def test_two_shard_workers_do_what_one_process_does(
    make_harness: MakeHarness, pools: list[ProcessShardPool]
) -> None:
    sharded = _run(make_harness, skip=True, shard=_sharded(pools))
    alone = _run(make_harness, skip=True)

    assert [(c.name, c.args) for c in sharded.scheduler.calls] == [
        (c.name, c.args) for c in alone.scheduler.calls
    ]
    assert _per_job(sharded) == _per_job(alone)
    for job in alone.store.list_jobs(CLUSTER):
        assert _verdicts(sharded, job.id) == _verdicts(alone, job.id), job.id
    assert len({str(j.id) for j in alone.store.list_jobs(CLUSTER)}) == 8


def test_a_killed_worker_is_started_again_and_its_jobs_still_recover(
    make_harness: MakeHarness, pools: list[ProcessShardPool]
) -> None:
    h = make_harness(mode=Mode.ACT, loop=LoopSettings())
    _sharded(pools)(h)
    jobs = [h.submit(f"train-{i}", partition=f"p{i % 2}") for i in range(4)]
    h.run(13.0)
    pool = pools[0]
    os.kill(pool._workers[0].process.pid or 0, signal.SIGKILL)
    failed = []
    for _ in range(10):
        h.clock.advance(0.2)
        try:
            h.loop.run_once()
        except TransientError as exc:
            failed.append(str(exc))
    # exactly the pass that met the dead worker failed, saying so; the worker is back
    assert len(failed) == 1 and failed[0].startswith("shard 0: its worker died"), failed
    assert pool._workers[0].process.is_alive()
    # jobs 1 and 4 (one in each partition): shard 1 and shard 0, the one whose worker died
    assert [shard_of(j, 2) for j in jobs] == [1, 1, 1, 0]
    for job in (jobs[0], jobs[3]):
        h.inject(FaultKind.GPU_FELL_OFF_BUS, job)
    h.run(20.0)
    assert [h.job(j).restart_count for j in jobs] == [1, 0, 0, 1]
    assert all(h.job(j).state is JobState.RUNNING for j in jobs)
    assert [len(h.verdicts(j)) for j in jobs] == [1, 0, 0, 1]
