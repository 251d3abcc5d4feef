"""Unit tests of the simulated cluster (medic.schedulers.sim), in virtual time only.

Log lines are checked against the table in docs/simulator.md itself (parsed below), the same table
the detectors are written against, so the simulator and the doc cannot drift apart silently.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from medic.config.settings import SimLogProfile, SimSettings
from medic.domain.cluster import Job, JobSpec, JobState, Node, NodeState
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import JobId, NodeName
from medic.domain.logs import LogLine, LogStream
from medic.errors import ConfigError, NotFoundError, PermanentError
from medic.ports import FaultInjector, LogSource, NodeProvider, Scheduler, Workload
from medic.schedulers.sim import SimCluster
from medic.testing import FakeClock

DOC = Path(__file__).resolve().parents[3] / "docs" / "simulator.md"


# --- the documented lines -------------------------------------------------------------------
def _template_regex(template: str) -> re.Pattern[str]:
    """``{name...}`` placeholders become groups (a repeated name must repeat its value)."""
    out: list[str] = []
    seen: set[str] = set()
    pos = 0
    for m in re.finditer(r"\{([^{}]*)\}", template):
        out.append(re.escape(template[pos : m.start()]))
        name = m.group(1).split(":")[0]
        if not name.isidentifier():
            out.append("(.+?)")
        elif name in seen:
            out.append(f"(?P={name})")
        else:
            seen.add(name)
            out.append(f"(?P<{name}>.+?)")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


def _doc_templates(heading: str = "## Log lines (") -> dict[str, list[re.Pattern[str]]]:
    templates: dict[str, list[re.Pattern[str]]] = {}
    # the table of one "Log lines" section only (the repair tables document other things)
    section = DOC.read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    for row in section.splitlines():
        if not row.startswith("| "):
            continue
        cols = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        when = re.sub(r"\s*\(.*\)", "", cols[0])
        for code in re.findall(r"`([^`]*)`", cols[2]):
            templates.setdefault(when, []).append(_template_regex(code.replace("\\|", "|")))
    return templates


TEMPLATES = _doc_templates()
PRODUCTION = _doc_templates("## Log lines of the `production` profile")


def match(kind: str, text: str) -> dict[str, str] | None:
    """The placeholder values when ``text`` is a line of the doc row ``kind``, else None."""
    for pattern in TEMPLATES[kind]:
        m = pattern.fullmatch(text)
        if m:
            return {k: v.strip() for k, v in m.groupdict().items()}
    return None


def fields(kind: str, text: str) -> dict[str, str]:
    found = match(kind, text)
    assert found is not None, (kind, text)
    return found


def documented_kind(text: str) -> str | None:
    return next((kind for kind in TEMPLATES if match(kind, text) is not None), None)


# --- a small world around the simulator ------------------------------------------------------
@dataclass
class World:
    clock: FakeClock
    sim: SimCluster
    seen: list[LogLine]

    def run(self, seconds: float) -> list[LogLine]:
        """Let ``seconds`` pass in one jump and return the lines emitted meanwhile."""
        self.clock.advance(seconds)
        new = list(self.sim.logs.read_new(self.sim.scheduler.list_jobs()))
        self.seen.extend(new)
        return new

    def submit(
        self, num_nodes: int = 2, train_iters: int = 100_000, partition: str | None = None
    ) -> JobId:
        spec = JobSpec("train", num_nodes, partition=partition, train_iters=train_iters)
        return self.sim.workload.submit(spec)

    def job(self, job_id: JobId) -> Job:
        return self.sim.scheduler.get_job(job_id)

    def node(self, name: str) -> Node:
        return next(n for n in self.sim.scheduler.list_nodes() if n.name == name)

    def t(self, line: LogLine) -> float:
        """Seconds since the start of the world."""
        return (line.time - self.sim.events.start).total_seconds()


def world(**settings: Any) -> World:
    clock = FakeClock()
    merged: dict[str, Any] = {"nodes": 8, "partitions": 2, "seed": 3, **settings}
    return World(clock, SimCluster(clock, SimSettings(**merged)), [])


def of_kind(lines: list[LogLine], kind: str) -> list[LogLine]:
    return [ln for ln in lines if match(kind, ln.text) is not None]


def steps(lines: list[LogLine]) -> list[int]:
    found = []
    for ln in lines:
        m = match("each iteration", ln.text)
        if m is not None and "train_iters" in m:
            found.append(int(m["s"]))
    return found


def after_fault(w: World, kind: FaultKind) -> tuple[JobId, NodeName, list[LogLine]]:
    """A 2-node job on node001+node002 running to step 12, then ``kind`` on node002."""
    job_id = w.submit(num_nodes=2)
    w.run(7.0)  # step 12 done at t=7.0
    w.sim.fault_injector.inject(kind, job_id, NodeName("node002"))
    return job_id, NodeName("node002"), w.run(0.0)


# --- ports, layout, settings -----------------------------------------------------------------
def test_facades_satisfy_the_ports() -> None:
    sim = world().sim
    scheduler: Scheduler = sim.scheduler
    logs: LogSource = sim.logs
    nodes: NodeProvider = sim.node_provider
    injector: FaultInjector = sim.fault_injector
    workload: Workload = sim.workload
    assert scheduler.cluster == "sim"
    assert all(p is not None for p in (logs, nodes, injector, workload))


def test_nodes_are_named_and_split_into_contiguous_partitions() -> None:
    nodes = world().sim.scheduler.list_nodes()
    assert [n.name for n in nodes] == [f"node{i:03d}" for i in range(1, 9)]
    assert [n.partitions for n in nodes] == [("p0",)] * 4 + [("p1",)] * 4
    assert all(n.gpus == 8 and n.state is NodeState.IDLE and n.reason is None for n in nodes)


def test_names_widen_on_large_clusters_so_they_sort() -> None:
    names = [n.name for n in world(nodes=1000, partitions=3).sim.scheduler.list_nodes()]
    assert names[0] == "node0001" and names[-1] == "node1000" and names == sorted(names)


@pytest.mark.parametrize(
    "settings", [{"nodes": 0}, {"partitions": 9}, {"iteration_seconds": 0}, {"checkpoint_every": 0}]
)
def test_invalid_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        world(**settings)


def test_impossible_submissions_are_refused() -> None:
    w = world()
    with pytest.raises(PermanentError):
        w.submit(partition="nope")
    with pytest.raises(PermanentError):
        w.submit(num_nodes=5)  # a partition has 4 nodes
    with pytest.raises(PermanentError):
        w.submit(num_nodes=0)


# --- normal training ---------------------------------------------------------------------------
def test_a_job_starts_with_one_init_line_per_node_and_documented_ranks() -> None:
    w = world()
    job_id = w.submit(num_nodes=3, partition="p1")
    job = w.job(job_id)
    assert job.state is JobState.RUNNING and job.nodes == ("node005", "node006", "node007")
    assert job.comment is None and job.options == {}
    init = of_kind(w.run(0.0), "start of attempt")
    assert [(ln.node, ln.rank, ln.job_id) for ln in init] == [
        ("node005", 0, job_id),
        ("node006", 8, job_id),
        ("node007", 16, job_id),
    ]
    assert all(ln.stream is LogStream.JOB for ln in init)
    assert {fields("start of attempt", ln.text)["world"] for ln in init} == {"24"}
    assert [n.state for n in w.sim.scheduler.list_nodes()][4:] == [NodeState.ALLOCATED] * 3 + [
        NodeState.IDLE
    ]


def test_iterations_timing_lines_and_checkpoints_follow_the_settings() -> None:
    w = world(iteration_seconds=0.5, startup_seconds=1.0, checkpoint_every=10)
    job_id = w.submit(num_nodes=2)
    lines = w.run(6.0)
    iters = [ln for ln in of_kind(lines, "each iteration") if "timing" not in ln.text]
    assert steps(iters) == list(range(1, 11))
    assert [w.t(ln) for ln in iters] == [1.0 + 0.5 * k for k in range(1, 11)]
    assert all((ln.node, ln.rank, ln.job_id) == ("node001", 0, job_id) for ln in iters)
    first = match("each iteration", iters[0].text)
    assert first is not None
    assert first["train_iters"] == "100000" and first["n"] == "512" and first["gbs"] == "512"
    assert float(first["ms"]) == pytest.approx(500, rel=0.05)
    timing = [ln for ln in lines if "[timing]" in ln.text]
    assert [(ln.node, ln.rank) for ln in timing[:2]] == [("node001", 0), ("node002", 8)]
    assert len(timing) == 20
    saves = of_kind(lines, "checkpoint")
    assert len(saves) == 2 and all(w.t(ln) == 6.0 for ln in saves)
    assert match("checkpoint", saves[0].text) == {"s": "10", "job": job_id}
    assert steps(w.run(5.0)) == list(range(11, 21))


def test_a_finished_job_completes_frees_its_nodes_and_is_forgotten_later() -> None:
    w = world()
    job_id = w.submit(num_nodes=2, train_iters=5)
    w.run(3.5)
    job = w.job(job_id)
    assert job.state is JobState.COMPLETED and job.exit_code == 0
    assert job.end_time is not None and job.nodes == ("node001", "node002")
    assert w.node("node001").state is NodeState.IDLE
    w.run(599.0)
    assert job_id in {j.id for j in w.sim.scheduler.list_jobs()}
    w.run(1.0)
    assert job_id not in {j.id for j in w.sim.scheduler.list_jobs()}
    with pytest.raises(NotFoundError):
        w.job(job_id)


def test_fifo_first_fit_and_start_when_nodes_free_up() -> None:
    w = world()
    a = w.submit(num_nodes=3, train_iters=4)  # p0 has 4 nodes
    b = w.submit(num_nodes=2)
    c = w.submit(num_nodes=1)
    assert w.job(a).state is JobState.RUNNING
    assert w.job(b).state is JobState.PENDING
    assert w.job(c).state is JobState.RUNNING and w.job(c).nodes == ("node004",)
    w.run(3.0)  # a completes at 3.0
    assert w.job(a).state is JobState.COMPLETED
    assert w.job(b).state is JobState.RUNNING and w.job(b).nodes == ("node001", "node002")
    assert w.job(b).start_time == w.sim.events.start.replace(second=3)


def test_excluded_nodes_and_held_jobs_wait() -> None:
    w = world()
    job_id = w.submit(num_nodes=2)
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.set_excluded_nodes(job_id, frozenset({NodeName("node001")}))
    w.run(10.0)
    assert w.job(job_id).state is JobState.PENDING
    w.sim.scheduler.release(job_id)
    assert w.job(job_id).nodes == ("node002", "node003")
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.set_excluded_nodes(job_id, frozenset({NodeName(f"node00{i}") for i in (1, 2)}))
    w.sim.scheduler.drain_node(NodeName("node003"), "medic: test")
    w.sim.scheduler.release(job_id)
    assert w.job(job_id).state is JobState.PENDING  # only node004 is usable
    w.sim.scheduler.resume_node(NodeName("node003"), "medic: test")
    assert w.job(job_id).nodes == ("node003", "node004")


def test_requeue_resumes_from_the_last_checkpoint() -> None:
    w = world()
    job_id = w.submit(num_nodes=2)
    w.run(8.5)  # step 15; checkpoint at 10
    w.sim.scheduler.requeue_hold(job_id)
    job = w.job(job_id)
    assert job.state is JobState.PENDING and job.held and job.restart_count == 1
    assert job.nodes == () and job.start_time is None
    w.sim.scheduler.release(job_id)
    lines = w.run(2.0)
    assert len(of_kind(lines, "start of attempt")) == 2
    resume = [ln for ln in lines if "checkpoint from" in ln.text]
    assert [match("resume", ln.text) for ln in resume] == [{"job": job_id, "s": "10"}] * 2
    assert all(ln.rank == 0 and w.t(ln) == 9.0 for ln in resume)
    assert steps(lines) == [11, 12]


def test_a_requeue_before_the_first_checkpoint_prints_no_resume_lines() -> None:
    w = world()
    job_id = w.submit()
    w.run(3.0)
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.release(job_id)
    lines = w.run(2.0)
    assert not of_kind(lines, "resume")
    assert steps(lines) == [1, 2]


# --- faults ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "kernel", "victim"),
    [
        (FaultKind.GPU_FELL_OFF_BUS, "Xid 79", "Xid 79, victims"),
        (FaultKind.ECC_DBE, "ECC DBE", "ECC DBE, victims"),
    ],
)
def test_gpu_faults_kill_the_node_s_ranks_then_peers_time_out(
    kind: FaultKind, kernel: str, victim: str
) -> None:
    w = world(nccl_timeout_seconds=30.0)
    job_id, node, lines = after_fault(w, kind)
    k = of_kind(lines, kernel)
    assert len(k) == 1 and k[0].stream is LogStream.KERNEL
    assert (k[0].node, k[0].job_id, k[0].rank) == (node, None, None)
    v = of_kind(lines, victim)
    assert [(ln.node, ln.rank, ln.job_id) for ln in v] == [(node, r, job_id) for r in range(8, 16)]
    assert all(match(victim, ln.text) == {"r": str(ln.rank)} for ln in v)
    assert len(lines) == 9
    quiet = w.run(29.9)
    assert quiet == [] and w.job(job_id).state is JobState.RUNNING
    end = w.run(0.1)
    peers = of_kind(end, "peers of a dead rank")
    assert [(ln.node, ln.rank) for ln in peers] == [("node001", 0)]
    assert fields("peers of a dead rank", peers[0].text)["r"] == "0"
    job = w.job(job_id)
    assert job.state is JobState.FAILED and job.exit_code == 1
    record = w.sim.fault_injector.faults()[-1]
    assert (record.kind, record.job_id, record.node, record.step) == (kind, job_id, node, 12)
    assert record.time == w.sim.events.start.replace(second=7)


def test_ib_link_down_warns_on_the_node_s_local_rank_0() -> None:
    w = world()
    job_id, node, lines = after_fault(w, FaultKind.IB_LINK_DOWN)
    k = of_kind(lines, "IB link down")
    assert [(ln.node, ln.stream) for ln in k] == [(node, LogStream.KERNEL)]
    v = of_kind(lines, "IB link down, victims")
    assert [(ln.node, ln.rank, ln.job_id) for ln in v] == [(node, 8, job_id)]
    fields = match("IB link down, victims", v[0].text)
    assert fields is not None and fields["NNN"] == "002" and fields["gpu"] == "0"
    assert (fields["a"], fields["b"]) == ("0", "1")  # its peer node001 is 10.0.0.1
    w.run(30.0)
    assert w.job(job_id).state is JobState.FAILED


def test_node_failure_downs_the_node_and_ends_the_job_in_node_fail() -> None:
    w = world(node_repair_seconds=60.0)
    job_id, node, lines = after_fault(w, FaultKind.NODE_FAIL)
    assert lines == []
    assert (w.node(node).state, w.node(node).reason) == (NodeState.DOWN, "Not responding")
    assert w.job(job_id).state is JobState.RUNNING
    assert w.run(1.0) == []
    assert w.job(job_id).state is JobState.NODE_FAIL
    assert w.node("node001").state is NodeState.IDLE
    w.run(58.9)
    assert w.node(node).state is NodeState.DOWN
    w.run(0.1)
    assert (w.node(node).state, w.node(node).reason) == (NodeState.IDLE, None)


def test_a_hang_is_silent_until_the_600_s_watchdog() -> None:
    w = world(nccl_timeout_seconds=30.0)
    job_id, _node, lines = after_fault(w, FaultKind.HANG)
    assert lines == []
    assert w.run(599.0) == []
    assert w.job(job_id).state is JobState.RUNNING
    end = w.run(1.0)
    assert [(ln.node, ln.rank) for ln in of_kind(end, "peers of a dead rank")] == [("node001", 0)]
    assert len(end) == 1
    assert w.job(job_id).state is JobState.FAILED


def test_a_hang_in_a_one_node_job_is_reported_by_its_own_rank_0() -> None:
    w = world()
    job_id = w.submit(num_nodes=1)
    w.run(5.0)
    w.sim.fault_injector.inject(FaultKind.HANG, job_id)
    end = w.run(600.0)
    assert [(ln.node, ln.rank) for ln in of_kind(end, "peers of a dead rank")] == [("node001", 0)]


def test_a_straggler_slows_its_node_and_the_whole_job() -> None:
    w = world(iteration_seconds=0.5)
    job_id, node, _ = after_fault(w, FaultKind.STRAGGLER)
    lines = w.run(0.5 + 0.7 * 10)
    iters = [ln for ln in of_kind(lines, "each iteration") if "timing" not in ln.text]
    assert steps(iters) == list(range(13, 24))
    gaps = {round(w.t(b) - w.t(a), 6) for a, b in itertools.pairwise(iters)}
    assert gaps == {0.7}
    ms = [float(fields("each iteration", ln.text)["ms"]) for ln in iters[1:]]
    assert all(ms_ == pytest.approx(700, rel=0.03) for ms_ in ms)
    slow = [float(ln.text.split(": ")[-1][:-3]) for ln in lines if "[timing]" in ln.text]
    by_node: dict[str | None, list[float]] = {}
    for ln, value in zip([ln for ln in lines if "[timing]" in ln.text], slow, strict=True):
        by_node.setdefault(ln.node, []).append(value)
    ratio = sum(by_node[node]) / sum(by_node["node001"])
    assert ratio == pytest.approx(1.4, rel=0.03)
    assert w.job(job_id).state is JobState.RUNNING
    assert w.sim.fault_injector.faults()[-1].node == node


@pytest.mark.parametrize("kind", [FaultKind.APP_BUG, FaultKind.CUDA_OOM])
def test_application_faults_strike_at_the_same_step_on_every_attempt(kind: FaultKind) -> None:
    w = world()
    job_id = w.submit(num_nodes=2)
    w.run(7.25)  # step 12 done
    record = w.sim.fault_injector.inject(kind, job_id)
    assert (record.step, record.node) == (13, None)
    for attempt in range(2):
        lines = w.run(0.25)
        if kind is FaultKind.APP_BUG:
            trace = [ln for ln in lines if ln.text.endswith("KeyError: 'labels'")]
            assert [ln.rank for ln in trace] == list(range(16))
            assert len(lines) == 4 * 16
            assert all(
                match("application bug, at step s, on every attempt", ln.text) for ln in lines
            )
        else:
            oom = of_kind(lines, "CUDA OOM, at step s, on every attempt")
            assert [(ln.node, ln.rank) for ln in oom] == [("node001", 0), ("node002", 8)]
            assert len(lines) == 2
        assert steps(lines) == []
        assert w.job(job_id).state is JobState.RUNNING
        w.run(1.0)
        assert w.job(job_id).state is JobState.FAILED
        assert w.job(job_id).restart_count == attempt
        w.sim.scheduler.requeue_hold(job_id)
        w.sim.scheduler.release(job_id)
        lines = w.run(1.0 + 0.5 * 2 + 0.25)  # resume from 10, steps 11 and 12
        assert steps(lines) == [11, 12]
        assert [match("resume", ln.text) for ln in of_kind(lines, "resume")] == [
            {"job": job_id, "s": "10"}
        ] * 2


def test_a_broken_node_fails_new_attempts_at_start_until_repaired() -> None:
    w = world(node_repair_seconds=60.0, nccl_timeout_seconds=30.0, startup_seconds=1.0)
    job_id, node, _ = after_fault(w, FaultKind.GPU_FELL_OFF_BUS)
    w.run(30.0)
    assert w.job(job_id).state is JobState.FAILED
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.release(job_id)  # not excluded: lands on the same, idle-looking nodes
    assert w.job(job_id).nodes == ("node001", node)
    lines = w.run(1.0)
    assert of_kind(lines, "Xid 79")[0].node == node
    assert [ln.rank for ln in of_kind(lines, "Xid 79, victims")] == list(range(8, 16))
    assert steps(lines) == []
    w.run(30.0)
    assert w.job(job_id).state is JobState.FAILED
    w.run(1.0)  # t = 69: repaired at 67
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.release(job_id)
    lines = w.run(5.0)
    assert not of_kind(lines, "Xid 79") and steps(lines)[:2] == [11, 12]


def test_a_reboot_repairs_the_node_and_changes_its_boot_id() -> None:
    w = world(node_repair_seconds=3600.0)
    job_id, node, _ = after_fault(w, FaultKind.ECC_DBE)
    boot = w.sim.node_provider.boot_id(node)
    w.run(30.0)
    w.sim.node_provider.reboot(node, "medic: repair")
    assert (w.node(node).state, w.node(node).reason) == (NodeState.DOWN, "medic: repair")
    w.sim.node_provider.reboot(node, "medic: repair")  # already rebooting: nothing
    w.run(4.9)
    assert w.node(node).state is NodeState.DOWN
    w.run(0.1)
    assert (w.node(node).state, w.node(node).reason) == (NodeState.IDLE, None)
    assert w.sim.node_provider.boot_id(node) != boot
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.release(job_id)
    assert node in w.job(job_id).nodes
    lines = w.run(3.0)
    assert not of_kind(lines, "ECC DBE") and steps(lines) == [11, 12, 13, 14]


def test_rebooting_a_busy_node_fails_its_job_and_keeps_a_drain() -> None:
    w = world()
    job_id = w.submit()
    w.run(3.0)
    w.sim.scheduler.drain_node(NodeName("node002"), "medic: bad gpu")
    assert w.node("node002").state is NodeState.DRAINING
    w.sim.node_provider.reboot(NodeName("node002"), "medic: reboot")
    assert w.job(job_id).state is JobState.NODE_FAIL
    w.run(10.0)
    assert (w.node("node002").state, w.node("node002").reason) == (
        NodeState.DRAINED,
        "medic: bad gpu",
    )


def test_a_requeue_before_the_fatal_consequence_cancels_it() -> None:
    w = world(nccl_timeout_seconds=30.0)
    job_id, node, _ = after_fault(w, FaultKind.GPU_FELL_OFF_BUS)
    w.run(5.0)
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.set_excluded_nodes(job_id, frozenset({node}))
    w.sim.scheduler.release(job_id)
    lines = w.run(60.0)
    job = w.job(job_id)
    assert job.state is JobState.RUNNING and job.restart_count == 1 and node not in job.nodes
    assert not of_kind(lines, "peers of a dead rank")
    assert steps(lines)[0] == 11


def test_a_requeue_before_an_app_failure_ends_the_job_cancels_the_stale_end() -> None:
    w = world()
    job_id = w.submit()
    w.run(7.0)
    w.sim.fault_injector.inject(FaultKind.APP_BUG, job_id)
    w.run(0.6)  # traceback at 7.5, FAILED would come at 8.5
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.release(job_id)
    w.run(1.0)
    assert w.job(job_id).state is JobState.RUNNING


def test_injecting_needs_a_healthy_running_target() -> None:
    w = world()
    with pytest.raises(PermanentError):
        w.sim.fault_injector.inject(FaultKind.HANG)
    job_id = w.submit(num_nodes=1)
    with pytest.raises(PermanentError):
        w.sim.fault_injector.inject(FaultKind.HANG, job_id, NodeName("node002"))
    with pytest.raises(PermanentError):
        w.sim.fault_injector.inject(FaultKind.HANG, node=NodeName("node002"))
    with pytest.raises(NotFoundError):
        w.sim.fault_injector.inject(FaultKind.HANG, JobId("404"))
    record = w.sim.fault_injector.inject(FaultKind.HANG, node=NodeName("node001"))
    assert record.job_id == job_id
    with pytest.raises(PermanentError):  # already dying
        w.sim.fault_injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id)
    assert [f.id for f in w.sim.fault_injector.faults()] == [1]


# --- scheduler semantics -------------------------------------------------------------------------
def test_requeue_hold_semantics() -> None:
    w = world()
    job_id = w.submit(train_iters=3)
    w.sim.scheduler.requeue_hold(job_id)
    w.sim.scheduler.requeue_hold(job_id)
    assert w.job(job_id).restart_count == 1
    w.sim.scheduler.release(job_id)
    w.sim.scheduler.release(job_id)
    w.run(10.0)
    assert w.job(job_id).state is JobState.COMPLETED
    with pytest.raises(PermanentError):
        w.sim.scheduler.requeue_hold(job_id)
    pending = w.submit(num_nodes=4)
    blocker = w.submit(num_nodes=4)
    assert w.job(blocker).state is JobState.PENDING
    w.sim.scheduler.requeue_hold(blocker)  # pending: only held, no attempt stopped
    assert w.job(blocker).held and w.job(blocker).restart_count == 0
    w.sim.scheduler.cancel(blocker, "medic: test")
    assert w.job(blocker).state is JobState.CANCELLED
    w.sim.scheduler.cancel(pending, "medic: test")
    w.sim.scheduler.cancel(pending, "medic: test")
    assert w.job(pending).state is JobState.CANCELLED
    with pytest.raises(PermanentError):
        w.sim.scheduler.set_excluded_nodes(pending, frozenset())


def test_a_failed_job_can_be_requeued() -> None:
    w = world()
    job_id, _node, _ = after_fault(w, FaultKind.NODE_FAIL)
    w.run(2.0)
    assert w.job(job_id).state is JobState.NODE_FAIL
    w.sim.scheduler.requeue_hold(job_id)
    job = w.job(job_id)
    assert (job.state, job.held, job.restart_count, job.end_time) == (
        JobState.PENDING,
        True,
        1,
        None,
    )
    w.sim.scheduler.release(job_id)
    assert w.job(job_id).nodes == ("node001", "node003")  # node002 is down


def test_drain_reason_and_states() -> None:
    w = world()
    name = NodeName("node004")
    w.sim.scheduler.drain_node(name, "admin: fan")
    w.sim.scheduler.drain_node(name, "medic: xid")
    assert (w.node(name).state, w.node(name).reason) == (NodeState.DRAINED, "medic: xid")
    w.sim.scheduler.resume_node(name, "medic: ok")
    assert (w.node(name).state, w.node(name).reason) == (NodeState.IDLE, None)
    with pytest.raises(NotFoundError):
        w.sim.node_provider.reboot(NodeName("node999"), "x")


def test_read_new_returns_each_line_once_in_emission_order() -> None:
    w = world()
    w.submit(num_nodes=2)
    w.submit(num_nodes=4, partition="p1")
    lines = w.run(20.0)
    assert [ln.seq for ln in lines] == list(range(1, len(lines) + 1))
    assert [ln.time for ln in lines] == sorted(ln.time for ln in lines)
    assert w.sim.logs.read_new([]) == []
    assert w.run(0.5)[0].seq == len(lines) + 1


def test_every_emitted_line_is_documented() -> None:
    w = world(nodes=16, partitions=1)
    jobs = [w.submit(num_nodes=2) for _ in range(8)]
    w.run(7.0)
    for job_id, kind in zip(jobs, FaultKind, strict=True):
        w.sim.fault_injector.inject(kind, job_id)
    w.run(601.0)
    for job in w.sim.scheduler.list_jobs():
        if job.state.is_terminal:
            w.sim.scheduler.requeue_hold(job.id)
            w.sim.scheduler.release(job.id)
    w.run(30.0)
    undocumented = [ln.text for ln in w.seen if documented_kind(ln.text) is None]
    assert undocumented == []
    kinds = {documented_kind(ln.text) for ln in w.seen}
    assert kinds == set(TEMPLATES)


def test_every_line_of_the_production_profile_is_documented() -> None:
    w = world(nodes=40, partitions=1, log_profile=SimLogProfile.PRODUCTION)
    jobs = [w.submit(num_nodes=2) for _ in range(16)]  # half of them healthy throughout
    w.run(7.0)
    for job_id, kind in zip(jobs, FaultKind, strict=False):
        w.sim.fault_injector.inject(kind, job_id)
    w.run(200.0)
    both = {**TEMPLATES, **{f"production {k}": v for k, v in PRODUCTION.items()}}

    def kind_of(text: str) -> str | None:
        return next((k for k, ps in both.items() if any(p.fullmatch(text) for p in ps)), None)

    undocumented = [ln.text for ln in w.seen if kind_of(ln.text) is None]
    assert undocumented == []
    kinds = {kind_of(ln.text) for ln in w.seen}
    assert {f"production {k}" for k in PRODUCTION} <= kinds
    assert not any("[timing]" in ln.text for ln in w.seen)
    iteration = [ln for ln in w.seen if "iteration" in ln.text and "consumed samples" in ln.text]
    assert iteration and all(ln.rank == 15 and ln.text.startswith("[rank15]:") for ln in iteration)


# --- determinism and scale ------------------------------------------------------------------------
def _scenario(seed: int) -> tuple[list[tuple[Any, ...]], list[Job], list[FaultRecord]]:
    w = world(nodes=16, partitions=2, seed=seed)
    for size in (2, 3, 4, 1, 2, 4):
        w.submit(num_nodes=size, partition=f"p{size % 2}")
    for i, kind in enumerate(FaultKind):
        w.run(3.0 + i)
        with contextlib.suppress(PermanentError):  # every job may be dying already
            w.sim.fault_injector.inject(kind)
        for job in w.sim.scheduler.list_jobs():
            if job.state.is_terminal:
                w.sim.scheduler.requeue_hold(job.id)
                w.sim.scheduler.release(job.id)
    w.run(60.0)
    lines = [(ln.stream, ln.text, ln.time, ln.node, ln.job_id, ln.rank, ln.seq) for ln in w.seen]
    return lines, list(w.sim.scheduler.list_jobs()), list(w.sim.fault_injector.faults())


def test_the_same_seed_and_clock_readings_give_the_same_run() -> None:
    first = _scenario(11)
    assert first == _scenario(11)
    assert first[0] != _scenario(12)[0]


def test_a_long_jump_processes_every_event() -> None:
    w = world(nodes=32, partitions=2)
    for _ in range(4):
        w.submit(num_nodes=8, partition="p0")
    lines = w.run(60.0)
    assert len(steps(lines)) == 2 * 118  # two jobs fit in p0; steps at 1.5 .. 60.0
