"""The Slurm adapter against the real local Slurm 22.05 cluster (``tests/slurm/conftest.py``):
node states, opt-in, log tailing, the drain-ownership rule, reboot, node failure, an
unreachable controller, and the fail-open watchdog's release of a job medic left held. The
port-level behaviours (requeue-hold, exclude, release, cancel, drain/resume) are in
``test_scheduler_contract_slurm.py``."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from medic.config.settings import SlurmSettings
from medic.control.fail_open import FailOpen
from medic.dev.slurm import LocalSlurm, SlurmEnv
from medic.domain.cluster import Job, JobSpec, JobState, Mode, Node, NodeState
from medic.domain.holds import HoldMark, read_mark, with_mark
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.domain.logs import LogLine, LogStream
from medic.errors import PermanentError, TransientError
from medic.schedulers.slurm import (
    LocalRunner,
    SlurmLogSource,
    SlurmNodeProvider,
    SlurmScheduler,
    SlurmWorkload,
)
from medic.schedulers.slurm.requests import parse_request

from .conftest import check, wait_for

ACT = '{"medic": {"mode": "act"}}'


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class Cursors:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get_cursor(self, source: str) -> str | None:
        return self.values.get(source)

    def set_cursor(self, source: str, value: str) -> None:
        self.values[source] = value


@dataclass
class Parts:
    settings: SlurmSettings
    scheduler: SlurmScheduler
    provider: SlurmNodeProvider
    workload: SlurmWorkload


@pytest.fixture(scope="module")
def parts(slurm: SlurmEnv) -> Parts:
    settings = SlurmSettings(slurm_conf=str(slurm.slurm_conf), command_timeout_seconds=30)
    runner = LocalRunner(slurm.env)
    return Parts(
        settings,
        SlurmScheduler(runner, ClusterName("medic"), settings),
        SlurmNodeProvider(runner, settings),
        SlurmWorkload(runner, settings, output_dir=str(slurm.shared_dir)),
    )


@pytest.fixture(autouse=True)
def idle_cluster(parts: Parts) -> Iterator[None]:
    """Start from (and leave) a cluster whose nodes are all idle."""

    def all_idle() -> bool:
        return all(n.state is NodeState.IDLE for n in parts.scheduler.list_nodes())

    wait_for("every node idle before the test", all_idle, timeout=60)
    yield
    for node in parts.scheduler.list_nodes():
        if node.reason and node.reason.startswith("medic:"):
            parts.scheduler.resume_node(node.name, "medic: test cleanup")


def node(parts: Parts, name: str) -> Node:
    return next(n for n in parts.scheduler.list_nodes() if n.name == name)


def node_of(parts: Parts, name: str) -> NodeState:
    return node(parts, name).state


def test_nodes_have_gpus_and_partitions(parts: Parts, slurm: SlurmEnv) -> None:
    nodes = parts.scheduler.list_nodes()
    assert [n.name for n in nodes] == list(slurm.nodes)
    assert all(n.gpus == 8 and n.partitions and n.reason is None for n in nodes)


def test_opt_in_comment_output_paths_and_log_lines(
    parts: Parts, slurm_cluster: LocalSlurm, slurm: SlurmEnv
) -> None:
    opted = parts.workload.submit(JobSpec(name="opted", num_nodes=1, comment=ACT, train_iters=60))
    plain = parts.workload.submit(JobSpec(name="plain", num_nodes=1, train_iters=60))
    try:
        job: Job = wait_for(
            "the opted-in job to run",
            lambda: (j := parts.scheduler.get_job(opted)).state is JobState.RUNNING and j,
        )
        listed = {j.id: j for j in parts.scheduler.list_jobs()}
        assert opted in listed and plain not in listed
        assert listed[opted].comment == ACT and listed[opted].nodes == job.nodes
        assert job.log_paths == (str(slurm.shared_dir / f"opted-{opted}.out"),)

        template = str(slurm_cluster.kernel_log("node1").parent / "{node}.log")
        settings = SlurmSettings(kernel_log_template=template)
        logs = SlurmLogSource(Cursors(), settings, clock=WallClock())
        seen: list[LogLine] = []

        def iteration_line() -> bool:
            seen.extend(logs.read_new([job]))
            return any("iteration" in line.text for line in seen)

        wait_for("an iteration line from the job", iteration_line, timeout=20)
        line = next(line for line in seen if "iteration" in line.text)
        assert (line.stream, line.job_id, line.rank) == (LogStream.JOB, opted, 0)
        assert not [line for line in seen if line.stream is LogStream.KERNEL]  # history skipped

        where = job.nodes[0]
        with slurm_cluster.kernel_log(where).open("a") as kern:
            kern.write("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n")
        kernel = [line for line in logs.read_new([job]) if line.stream is LogStream.KERNEL]
        assert [(line.node, line.job_id) for line in kernel] == [(where, None)]
        assert "Xid" in kernel[0].text
    finally:
        for job_id in (opted, plain):
            parts.scheduler.cancel(job_id, "medic: test done")


def test_a_finished_job_keeps_its_exit_code(parts: Parts) -> None:
    job_id = parts.workload.submit(JobSpec(name="short", num_nodes=1, train_iters=1))
    job = wait_for(
        "the job to finish",
        lambda: (j := parts.scheduler.get_job(job_id)).state.is_terminal and j,
        timeout=30,
    )
    assert job.state is JobState.COMPLETED and job.exit_code == 0 and job.end_time is not None


def test_someone_elses_drain_is_left_alone(parts: Parts, slurm: SlurmEnv) -> None:
    check(slurm, "scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=NHC: bad disk")
    try:
        with pytest.raises(PermanentError, match="NHC: bad disk"):
            parts.scheduler.drain_node(NodeName("node2"), "medic: xid 79")
        with pytest.raises(PermanentError, match="NHC: bad disk"):
            parts.scheduler.resume_node(NodeName("node2"), "medic: healthy")
        with pytest.raises(PermanentError, match="NHC: bad disk"):
            parts.provider.reboot(NodeName("node2"), "medic: xid 79")
        node = next(n for n in parts.scheduler.list_nodes() if n.name == "node2")
        assert node.state is NodeState.DRAINED and node.reason == "NHC: bad disk"
    finally:
        check(slurm, "scontrol", "update", "NodeName=node2", "State=RESUME")


def test_a_node_comment_is_read_and_a_medic_request_in_it_parsed(
    parts: Parts, slurm: SlurmEnv
) -> None:
    text = "medic-request: reboot id=hc-1 detector=nvsentinel DCGM diag failed"
    check(slurm, "scontrol", "update", "NodeName=node2", f"Comment={text}")
    try:
        node = next(n for n in parts.scheduler.list_nodes() if n.name == "node2")
        assert node.comment == text and node.state is NodeState.IDLE
        request = parse_request(node, parts.scheduler.cluster)
        assert request is not None and (request.request_id, request.requested_by) == (
            "hc-1",
            "nvsentinel",
        )
    finally:
        check(slurm, "scontrol", "update", "NodeName=node2", "Comment=")
    node = next(n for n in parts.scheduler.list_nodes() if n.name == "node2")
    assert node.comment is None


def test_reboot_through_slurm_changes_the_boot_id(parts: Parts) -> None:
    name = NodeName("node2")
    before = parts.provider.boot_id(name)
    parts.provider.reboot(name, "xid 79")
    parts.provider.reboot(name, "xid 79")  # already on its way: no second request
    assert node_of(parts, name) in (NodeState.DRAINED, NodeState.DRAINING, NodeState.DOWN)
    wait_for("the node back from its reboot", lambda: parts.provider.boot_id(name) != before)
    wait_for("the node idle again", lambda: node_of(parts, name) is NodeState.IDLE, timeout=30)
    assert node(parts, name).reason is None


def test_a_dead_slurmd_shows_as_a_down_node(parts: Parts, slurm_cluster: LocalSlurm) -> None:
    assert slurm_cluster.kill_slurmd("node1") is not None
    try:

        def down_by_slurm() -> bool:
            found = node(parts, "node1")
            return found.state is NodeState.DOWN and found.reason == "Not responding"

        wait_for("node1 down, 'Not responding'", down_by_slurm, timeout=30)
        with pytest.raises(PermanentError, match="Not responding"):  # Slurm's, not medic's
            parts.scheduler.drain_node(NodeName("node1"), "medic: dead")
    finally:
        slurm_cluster.start_slurmd("node1")
    wait_for("node1 back", lambda: node_of(parts, "node1") is NodeState.IDLE, timeout=30)


def test_an_unreachable_controller_is_transient(slurm: SlurmEnv, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    shutil.copy(slurm.slurm_conf, conf)
    text = conf.read_text()
    lines = [
        "SlurmctldPort=9" if line.startswith("SlurmctldPort=") else line
        for line in text.splitlines()
    ]
    conf.write_text("\n".join(lines) + "\n")
    settings = SlurmSettings(slurm_conf=str(conf), command_timeout_seconds=60)
    broken = SlurmScheduler(LocalRunner({"SLURM_CONF": str(conf)}), ClusterName("x"), settings)
    with pytest.raises(TransientError):
        broken.list_jobs()
    with pytest.raises(TransientError):
        broken.get_job(JobId("1"))


def test_a_job_medic_held_and_left_is_released_by_the_watchdog_alone(
    parts: Parts, tmp_path: Path
) -> None:
    """What a controller killed between the hold and the release leaves in Slurm (the job
    marked in its AdminComment, requeue-held, the bad node excluded), and ``medic watchdog``'s
    check releasing it with the job's own exclusions, with nothing else of medic's running."""
    job_id = parts.workload.submit(JobSpec(name="held", num_nodes=1, comment=ACT))
    try:
        running: Job = wait_for(
            "the job to run",
            lambda: (j := parts.scheduler.get_job(job_id)).state is JobState.RUNNING and j,
        )
        held_at = datetime.fromtimestamp(int(time.time()) - 60, tz=UTC)
        mark = HoldMark(AdviceId(1), 1, running.restart_count, held_at, running.excluded_nodes)
        parts.scheduler.set_admin_comment(job_id, with_mark(running.admin_comment, mark))
        parts.scheduler.requeue_hold(job_id)
        wait_for("the job held", lambda: parts.scheduler.get_job(job_id).held, timeout=30)
        parts.scheduler.set_excluded_nodes(job_id, frozenset(running.nodes))
        held = parts.scheduler.get_job(job_id)
        assert read_mark(held.admin_comment) == mark, held.admin_comment
        assert held.excluded_nodes == frozenset(running.nodes) and held.restart_count == 1

        journal = tmp_path / "watchdog.jsonl"
        dog = FailOpen(
            scheduler=parts.scheduler,
            clock=WallClock(),
            timeout_seconds=30.0,
            mode=Mode.ACT,
            journal=journal,
        )
        assert dog.check() == [job_id]
        released = parts.scheduler.get_job(job_id)
        assert not released.held and released.excluded_nodes == running.excluded_nodes
        assert released.admin_comment is None, "the mark is taken off"
        assert [json.loads(x)["what"] for x in journal.read_text().splitlines()] == [
            "releasing",
            "released",
        ]
        assert dog.check() == [], "released once"
    finally:
        parts.scheduler.cancel(job_id, "medic: test done")
