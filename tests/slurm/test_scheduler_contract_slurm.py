"""The shared ``Scheduler`` contract suite (``tests/contract/test_scheduler_contract.py``) run
against the real local Slurm cluster: its test functions are imported here, and this module's
``env`` fixture hands them a Slurm harness instead of the simulator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from contract.test_scheduler_contract import (
    Env,
    test_a_drained_node_gets_no_new_job,
    test_cancel_a_held_job,
    test_cancel_ends_the_job,
    test_cluster_name_is_set,
    test_drain_and_resume_a_node_with_a_medic_reason,
    test_excluded_nodes_are_visible_and_change_only_while_pending,
    test_nodes_are_listed_with_gpus_and_partitions,
    test_release_runs_the_job_again_never_on_excluded_nodes,
    test_requeue_hold_puts_the_job_back_held_and_counts_the_restart,
    test_submitted_job_runs_on_usable_nodes,
    test_unknown_job_is_not_found,
    test_unknown_node_is_not_found,
)
from medic.config.settings import SlurmSettings
from medic.dev.slurm import SlurmEnv
from medic.domain.cluster import NodeState, is_medic_reason
from medic.domain.ids import ClusterName
from medic.ports import Scheduler, Workload
from medic.schedulers.slurm import LocalRunner, SlurmScheduler, SlurmWorkload

__all__ = [
    "test_a_drained_node_gets_no_new_job",
    "test_cancel_a_held_job",
    "test_cancel_ends_the_job",
    "test_cluster_name_is_set",
    "test_drain_and_resume_a_node_with_a_medic_reason",
    "test_excluded_nodes_are_visible_and_change_only_while_pending",
    "test_nodes_are_listed_with_gpus_and_partitions",
    "test_release_runs_the_job_again_never_on_excluded_nodes",
    "test_requeue_hold_puts_the_job_back_held_and_counts_the_restart",
    "test_submitted_job_runs_on_usable_nodes",
    "test_unknown_job_is_not_found",
    "test_unknown_node_is_not_found",
]

POLL_S = 0.25


class SlurmHarness:
    """The contract's ``Harness`` on a real cluster: sees every job (no opt-in), submits with
    ``sbatch`` into the cluster's shared directory, waits in real time."""

    def __init__(self, slurm: SlurmEnv) -> None:
        settings = SlurmSettings(
            slurm_conf=str(slurm.slurm_conf), opt_in=False, command_timeout_seconds=30
        )
        runner = LocalRunner(slurm.env)
        self._scheduler = SlurmScheduler(runner, ClusterName("medic"), settings)
        self._workload = SlurmWorkload(runner, settings, output_dir=str(slurm.shared_dir))

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    @property
    def workload(self) -> Workload:
        return self._workload

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True


@pytest.fixture
def env(slurm: SlurmEnv) -> Iterator[Env]:
    harness = SlurmHarness(slurm)
    scheduler = harness.scheduler

    def idle() -> bool:
        return all(n.state is NodeState.IDLE for n in scheduler.list_nodes())

    assert harness.wait_until(idle, 60), f"nodes not idle: {scheduler.list_nodes()}"
    e = Env(harness)
    yield e
    e.cleanup()
    for node in scheduler.list_nodes():  # a failed test must not leave a node drained
        if is_medic_reason(node.reason) and node.state is not NodeState.IDLE:
            scheduler.resume_node(node.name, "medic: contract test cleanup")
