"""Contract of the ``Scheduler`` port, run against every implementation through a harness.

The tests use only the ports (``Scheduler``, ``Workload``) and the harness's ``wait_until``, so a
real cluster's harness (Slurm) can join by adding one entry to ``HARNESSES``. A harness must offer
at least two nodes in the default partition and let a one-node job run for a few minutes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest

from medic.config.settings import SimSettings
from medic.domain.cluster import Job, JobSpec, JobState, Node, NodeState, is_medic_reason
from medic.domain.ids import JobId, NodeName
from medic.errors import NotFoundError, PermanentError
from medic.ports import Scheduler, Workload
from medic.schedulers.sim import SimCluster
from medic.testing import FakeClock

TIMEOUT_S = 120.0
"""Seconds a state change may take (virtual seconds for the sim, real ones on a cluster)."""


class Harness(Protocol):
    """What a scheduler implementation provides to the contract suite."""

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def workload(self) -> Workload: ...

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Let time pass until ``predicate()`` holds (True) or ``timeout_s`` passed (False)."""
        ...


class SimHarness:
    """The simulated cluster on a fake clock, advanced in small steps while waiting."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.sim = SimCluster(self.clock, SimSettings(nodes=8, partitions=2, seed=7))

    @property
    def scheduler(self) -> Scheduler:
        return self.sim.scheduler

    @property
    def workload(self) -> Workload:
        return self.sim.workload

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        waited = 0.0
        while not predicate():
            if waited >= timeout_s:
                return False
            self.clock.advance(0.25)
            waited += 0.25
        return True


HARNESSES: dict[str, Callable[[], Harness]] = {"sim": SimHarness}


class Env:
    """A harness plus the jobs a test submitted, cancelled when the test ends."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.s = harness.scheduler
        self.submitted: list[JobId] = []

    def submit(self, name: str = "contract", num_nodes: int = 1) -> JobId:
        job_id = self.h.workload.submit(JobSpec(name=name, num_nodes=num_nodes))
        self.submitted.append(job_id)
        return job_id

    def wait_job(self, job_id: JobId, predicate: Callable[[Job], bool]) -> Job:
        assert self.h.wait_until(lambda: predicate(self.s.get_job(job_id)), TIMEOUT_S), (
            self.s.get_job(job_id)
        )
        return self.s.get_job(job_id)

    def running(self, job_id: JobId) -> Job:
        return self.wait_job(job_id, lambda j: j.state is JobState.RUNNING and bool(j.nodes))

    def node(self, name: NodeName) -> Node:
        return next(n for n in self.s.list_nodes() if n.name == name)

    def cleanup(self) -> None:
        for job_id in self.submitted:
            with contextlib.suppress(NotFoundError):
                self.s.cancel(job_id, "medic: contract test cleanup")


@pytest.fixture(params=sorted(HARNESSES))
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    e = Env(HARNESSES[request.param]())
    yield e
    e.cleanup()


def _pending_held(job: Job) -> bool:
    return job.state is JobState.PENDING and job.held


def test_cluster_name_is_set(env: Env) -> None:
    assert env.s.cluster


def test_nodes_are_listed_with_gpus_and_partitions(env: Env) -> None:
    nodes = env.s.list_nodes()
    assert len(nodes) >= 2
    assert len({n.name for n in nodes}) == len(nodes)
    for node in nodes:
        assert node.gpus > 0
        assert node.partitions
        assert isinstance(node.state, NodeState)


def test_submitted_job_runs_on_usable_nodes(env: Env) -> None:
    job_id = env.submit(num_nodes=1)
    job = env.running(job_id)
    assert len(job.nodes) == job.num_nodes == 1
    assert job.restart_count == 0
    assert job.id in {j.id for j in env.s.list_jobs()}
    node = env.node(job.nodes[0])
    assert node.state.is_usable
    assert job.partition in node.partitions


def test_requeue_hold_puts_the_job_back_held_and_counts_the_restart(env: Env) -> None:
    job_id = env.submit()
    before = env.running(job_id).restart_count
    env.s.requeue_hold(job_id)
    job = env.wait_job(job_id, _pending_held)
    assert job.restart_count == before + 1
    env.s.requeue_hold(job_id)  # idempotent: already pending and held
    job = env.s.get_job(job_id)
    assert _pending_held(job)
    assert job.restart_count == before + 1
    # A held job stays pending however long we wait.
    assert not env.h.wait_until(lambda: env.s.get_job(job_id).state is JobState.RUNNING, 5.0)


def test_excluded_nodes_are_visible_and_change_only_while_pending(env: Env) -> None:
    job_id = env.submit()
    node = env.running(job_id).nodes[0]
    with pytest.raises(PermanentError):
        env.s.set_excluded_nodes(job_id, frozenset({node}))
    env.s.requeue_hold(job_id)
    env.wait_job(job_id, _pending_held)
    env.s.set_excluded_nodes(job_id, frozenset({node}))
    assert env.s.get_job(job_id).excluded_nodes == frozenset({node})
    env.s.set_excluded_nodes(job_id, frozenset())  # replaces, not adds
    assert env.s.get_job(job_id).excluded_nodes == frozenset()


def test_release_runs_the_job_again_never_on_excluded_nodes(env: Env) -> None:
    job_id = env.submit()
    first = env.running(job_id).nodes
    env.s.release(job_id)  # releasing a running job is a no-op
    env.s.requeue_hold(job_id)
    env.wait_job(job_id, _pending_held)
    env.s.set_excluded_nodes(job_id, frozenset(first))
    env.s.release(job_id)
    job = env.running(job_id)
    assert not job.held
    assert not set(job.nodes) & set(first)
    assert job.excluded_nodes == frozenset(first)
    assert job.restart_count == 1


def test_cancel_ends_the_job(env: Env) -> None:
    job_id = env.submit()
    env.running(job_id)
    env.s.cancel(job_id, "medic: contract test")
    job = env.wait_job(job_id, lambda j: j.state is JobState.CANCELLED)
    assert job.state.is_terminal
    env.s.cancel(job_id, "medic: contract test")  # idempotent
    assert env.s.get_job(job_id).state is JobState.CANCELLED


def test_cancel_a_held_job(env: Env) -> None:
    job_id = env.submit()
    env.running(job_id)
    env.s.requeue_hold(job_id)
    env.wait_job(job_id, _pending_held)
    env.s.cancel(job_id, "medic: contract test")
    env.wait_job(job_id, lambda j: j.state is JobState.CANCELLED)


def test_drain_and_resume_a_node_with_a_medic_reason(env: Env) -> None:
    idle = [n for n in env.s.list_nodes() if n.state is NodeState.IDLE]
    assert idle
    name = idle[-1].name
    reason = "medic: contract test"
    env.s.drain_node(name, reason)
    try:
        assert env.h.wait_until(lambda: env.node(name).state is NodeState.DRAINED, TIMEOUT_S)
        assert env.node(name).reason == reason
        assert is_medic_reason(env.node(name).reason)
        env.s.drain_node(name, reason)  # idempotent
        assert env.node(name).state is NodeState.DRAINED
    finally:
        env.s.resume_node(name, reason)
    assert env.h.wait_until(lambda: env.node(name).state is NodeState.IDLE, TIMEOUT_S)
    assert not is_medic_reason(env.node(name).reason)
    env.s.resume_node(name, reason)  # idempotent
    assert env.node(name).state is NodeState.IDLE


def test_a_drained_node_gets_no_new_job(env: Env) -> None:
    job_id = env.submit()
    node = env.running(job_id).nodes[0]
    env.s.drain_node(node, "medic: contract test")
    try:
        assert env.node(node).state in (NodeState.DRAINING, NodeState.DRAINED)
        env.s.requeue_hold(job_id)
        env.wait_job(job_id, _pending_held)
        assert env.h.wait_until(lambda: env.node(node).state is NodeState.DRAINED, TIMEOUT_S)
        env.s.release(job_id)
        assert node not in env.running(job_id).nodes
    finally:
        env.s.resume_node(node, "medic: contract test")


def test_unknown_job_is_not_found(env: Env) -> None:
    missing = JobId("999999999")
    with pytest.raises(NotFoundError):
        env.s.get_job(missing)
    with pytest.raises(NotFoundError):
        env.s.requeue_hold(missing)
    with pytest.raises(NotFoundError):
        env.s.release(missing)
    with pytest.raises(NotFoundError):
        env.s.cancel(missing, "medic: contract test")
    with pytest.raises(NotFoundError):
        env.s.set_excluded_nodes(missing, frozenset())


def test_unknown_node_is_not_found(env: Env) -> None:
    with pytest.raises(NotFoundError):
        env.s.drain_node(NodeName("no-such-node"), "medic: contract test")
    with pytest.raises(NotFoundError):
        env.s.resume_node(NodeName("no-such-node"), "medic: contract test")
