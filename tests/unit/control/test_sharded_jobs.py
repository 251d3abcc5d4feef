"""The loop's side of the shards (:class:`ShardedJobs`) with a pool in this process: what each
shard is sent, and everything again after a pass whose requests may have half arrived."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from medic.control.shards import EvaluateRequest, ObserveRequest, ShardedJobs, ShardReply, shard_of
from medic.domain.cluster import Job, JobState, Node, NodeState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.errors import TransientError
from medic.telemetry.metrics import NullMetrics

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _Pool:
    shards = 2

    def __init__(self) -> None:
        self.requests: list[list[ObserveRequest]] = []
        self.fail_next = False

    def fresh(self, shard: int) -> bool:
        return not self.requests

    def observe(self, requests: Sequence[ObserveRequest]) -> list[ShardReply]:
        self.requests.append(list(requests))
        if self.fail_next:
            self.fail_next = False
            raise TransientError("shard 1: its worker died (test)")
        return [ShardReply() for _ in requests]

    def evaluate(self, requests: Sequence[EvaluateRequest]) -> list[ShardReply]:
        return [ShardReply() for _ in requests]

    def close(self) -> None:
        pass


class _Nothing:
    def scan(self, lines: object) -> list[object]:
        return []


def _job(i: int) -> Job:
    return Job(
        id=JobId(str(i)),
        cluster=ClusterName("c"),
        name="t",
        state=JobState.RUNNING,
        partition="p0",
        nodes=(NodeName(f"n{i}"),),
    )


def test_each_shard_gets_its_jobs_once_and_everything_again_after_a_failed_pass() -> None:
    pool = _Pool()
    sharded = ShardedJobs(
        pool,  # type: ignore[arg-type]
        diagnoser=_Nothing(),  # type: ignore[arg-type]
        store_kernel=lambda _: None,
        metrics=NullMetrics(),
        counts=defaultdict(int),
        skip_quiet=True,
    )
    jobs = [_job(i) for i in range(6)]
    nodes = [Node(name=NodeName(f"n{i}"), state=NodeState.ALLOCATED) for i in range(6)]
    sharded.observe(NOW, jobs, nodes, frozenset(), [])
    first = pool.requests[-1]
    assert [len(r.jobs) for r in first] == [
        sum(shard_of(j.id, 2) == k for j in jobs) for k in (0, 1)
    ]
    sharded.observe(NOW, jobs, nodes, frozenset(), [])
    assert [r.jobs for r in pool.requests[-1]] == [(), ()]  # nothing changed: nothing sent
    assert [r.nodes for r in pool.requests[-1]] == [(), ()]
    pool.fail_next = True
    with pytest.raises(TransientError):
        sharded.observe(NOW, jobs[:5], nodes, frozenset(), [])  # job 5 left the listing
    sharded.observe(NOW, jobs, nodes, frozenset(), [])
    again = pool.requests[-1]
    assert sorted(j.id for r in again for j in r.jobs) == sorted(j.id for j in jobs)
    assert all(len(r.nodes) == 6 for r in again)
