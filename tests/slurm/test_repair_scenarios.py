"""Node auto-repair's guardrail scenarios on the real local Slurm cluster
(``tests/slurm/conftest.py``), in wall-clock time: the same scenarios as the simulator's
(``tests/integration/test_repairs_guardrails.py``, ``test_repairs_lifecycle.py``,
``tests/api/test_repairs_api.py``), here with real ``scontrol`` commands, real reboots (the
cluster's ``RebootProgram`` restarts the node's slurmd) and real jobs:

- an Xid 79 storm trips the circuit breaker at once; its repairs wait for a person;
- the same fault after two reboots climbs to a reprovision, run by an operator hook;
- racing API calls with one request id make one repair, which then reboots the node;
- a busy node's repair waits for idle, times out and moves the job off through Slurm;
- an unmapped kernel line is stored, listed and counted, the node degraded, nothing repaired;
- a job medic does not watch, or one that started after the pass's listing, holds the repair.

medic is wired as ``medic serve`` wires it (:func:`medic.wiring.build`, Prometheus metrics); each
test drives the control loop pass by pass (``Medic.until``) with short policy timeouts. A real
reboot is counted from the ``RebootProgram``'s own log, so "nothing else was rebooted" is
measured, not assumed.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from api.auth_kit import bearer, grant
from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.dev.slurm import LocalSlurm, SlurmEnv
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.auth import Role
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.repairs import (
    AlertState,
    NodeHealth,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairState,
)
from medic.repair import decisions as repair_decisions
from medic.repair.engine import RepairEngine
from medic.services import Services
from medic.store import SqlStore
from medic.telemetry.metrics import PrometheusMetrics
from medic.testing import LiveServer
from medic.wiring import build

from .conftest import check, job, node, sbatch, wait_for

T = TypeVar("T")

CLUSTER = ClusterName("medic")
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
LINK_DOWN = "mlx5_core 0000:3b:00.0: mlx5_port_module_event:1168: Link down on port 1\n"
"""Catalogue signature ``mlx5.link_down``: no node action, no Xid: maps to no repair."""
S = RepairState
FINISHED = frozenset({S.DONE, S.FAILED, S.CANCELLED, S.REJECTED})
REBOOT_SECONDS = 60.0
"""Ample for one real reboot lifecycle here (about 5 s: RebootProgram restarts slurmd)."""
FAST = RepairPolicy(max_wait_seconds=5, cooldown_seconds=0, persistence_seconds=0)
"""Short timeouts for wall-clock tests; each test adds what it is about."""


# --------------------------------------------------------------------------------- the rig
@dataclass
class Medic:
    """medic built as ``medic serve`` builds it, on the session's Slurm cluster."""

    services: Services
    cluster: LocalSlurm
    slurm: SlurmEnv
    passes: int = 0
    reboots_at_start: dict[str, int] = field(default_factory=dict)

    @property
    def store(self) -> SqlStore:
        store = self.services.store
        assert isinstance(store, SqlStore)
        return store

    @property
    def engine(self) -> RepairEngine:
        assert self.services.repairs is not None, "repair.enabled is on by default"
        return self.services.repairs

    def run(self) -> None:
        """One control-loop pass."""
        self.services.loop.run_once()
        self.passes += 1

    def until(self, what: str, probe: Callable[[], T | None], timeout: float) -> T:
        """Run loop passes until ``probe`` answers something truthy; fail after ``timeout``."""

        def step() -> T | None:
            self.run()
            return probe()

        try:
            found: T = wait_for(what, step, timeout=timeout, every=0.2)
        except pytest.fail.Exception as exc:
            raise AssertionError(f"{exc}\n{self.trail()}") from None
        return found

    def trail(self) -> str:
        """The repairs and the audit trail, to say why a wait timed out."""
        lines = [
            f"repair {r.id} {r.node} {r.action} {r.state} {r.error or ''}" for r in self.repairs()
        ]
        for e in self.store.query_audit(cluster=CLUSTER, limit=10_000)[-60:]:
            said = {
                k: e.payload[k] for k in ("rule", "from", "to", "step", "key") if k in e.payload
            }
            lines.append(f"{e.time:%H:%M:%S.%f} {e.kind} {e.subject_id} {said}")
        lines += [f"{n}: {node(self.slurm, n).get('State')}" for n in self.slurm.nodes]
        jobs = self.services.scheduler.list_jobs()
        lines.append(f"jobs medic sees: {[(j.id, j.state.value, j.nodes) for j in jobs]}")
        return "\n".join(lines)

    def idle_for(self, seconds: float) -> None:
        """Keep the loop running for ``seconds`` (nothing is expected to happen)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.run()
            time.sleep(0.2)

    def kernel(self, node_name: str, line: str = XID79) -> None:
        """Append ``line`` to the node's kernel log (read by the next pass)."""
        with self.cluster.kernel_log(node_name).open("a") as kern:
            kern.write(line)

    def repairs(self, node_name: str | None = None) -> list[Repair]:
        found = self.store.list_repairs(
            cluster=CLUSTER, node=NodeName(node_name) if node_name else None
        )
        return sorted(found, key=lambda r: r.id)

    def finished(self, node_name: str | None = None) -> list[Repair]:
        return [r for r in self.repairs(node_name) if r.state in FINISHED]

    def finished_count(self, node_name: str, count: int) -> bool:
        return len(self.finished(node_name)) == count

    def events(self, kind: AuditKind, subject: str | None = None) -> list[AuditEvent]:
        return self.store.query_audit(cluster=CLUSTER, kind=kind, subject_id=subject, limit=10_000)

    def transitions(self, repair_id: int) -> list[tuple[str, str]]:
        return [
            (e.payload["from"], e.payload["to"])
            for e in self.events(AuditKind.REPAIR_TRANSITION)
            if e.payload["repair_id"] == repair_id
        ]

    def counter(self, name: str, **labels: str) -> float:
        metrics = self.services.metrics
        assert isinstance(metrics, PrometheusMetrics)
        value = metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def reboots(self, node_name: str) -> int:
        """Real reboots of the node since the rig was built (the RebootProgram's log lines)."""
        return _reboot_count(self.cluster, node_name) - self.reboots_at_start[node_name]

    def boot_time(self, node_name: str) -> str:
        return node(self.slurm, node_name)["BootTime"]

    def in_service(self, node_name: str) -> bool:
        """Idle, undrained, no reboot pending, in Slurm's own words."""
        info = node(self.slurm, node_name)
        return info.get("State") == "IDLE" and info.get("Reason", "") in ("", "(null)")


def _reboot_count(cluster: LocalSlurm, node_name: str) -> int:
    log = cluster.layout.log / f"reboot-{node_name}.log"
    if not log.exists():
        return 0
    return sum("reboot of" in line for line in log.read_text().splitlines())


SETTLE_SECONDS = 5.0


def settled(slurm: SlurmEnv, name: str) -> bool:
    """The node's slurmd has been up for ``SETTLE_SECONDS``. Slurm 22.05 can lose a reboot asked
    for within a fraction of a second of a node's return from the last one: slurmd reboots, but
    the controller keeps the node ``IDLE+DRAIN+REBOOT_ISSUED`` until ``ResumeTimeout``, so the
    repair never sees it rejoin. The tests ask for a reboot only of a settled node."""
    started = node(slurm, name).get("SlurmdStartTime", "")
    try:
        since = datetime.now() - datetime.fromisoformat(started)  # scontrol: local time
    except ValueError:
        return False
    return since.total_seconds() >= SETTLE_SECONDS


def wait_settled(slurm: SlurmEnv, name: str) -> None:
    wait_for(f"{name}'s slurmd settled", lambda: settled(slurm, name), timeout=30, every=0.2)


@pytest.fixture
def idle(slurm: SlurmEnv) -> Iterator[None]:
    """Start from, and leave, a cluster whose nodes are idle, undrained and settled (a test's
    own jobs cancelled, medic's drains lifted)."""

    def all_idle() -> bool:
        return all(node(slurm, n).get("State") == "IDLE" and settled(slurm, n) for n in slurm.nodes)

    wait_for("every node idle before the test", all_idle, timeout=60)
    yield
    for name in slurm.nodes:
        info = node(slurm, name)
        if info.get("Reason", "").startswith("medic"):
            if "REBOOT" in info.get("State", ""):  # a failed test's reboot
                slurm.run("scontrol", "cancel_reboot", name)
            slurm.run("scontrol", "update", f"NodeName={name}", "State=RESUME")
    wait_for("every node idle after the test", all_idle, timeout=60)


MakeMedic = Callable[..., Medic]


@pytest.fixture
def make_medic(
    slurm_cluster: LocalSlurm,
    slurm: SlurmEnv,
    tmp_path: Path,
    idle: None,
) -> Iterator[MakeMedic]:
    """``make_medic(policy, **settings)``: medic on the cluster with a fresh SQLite store, the
    policy stored, and a first pass made (the kernel logs' history is skipped)."""
    built: list[Services] = []

    def make(policy: RepairPolicy, **overrides: object) -> Medic:
        template = str(slurm_cluster.kernel_log(slurm.nodes[0]).parent / "{node}.log")
        values: dict[str, object] = {
            "store.url": f"sqlite:///{tmp_path / 'medic.db'}",
            "scheduler.kind": "slurm",
            "scheduler.cluster": CLUSTER,
            "scheduler.mode": "observe",
            "slurm.slurm_conf": str(slurm.slurm_conf),
            "slurm.kernel_log_template": template,
            "slurm.command_timeout_seconds": 30,
            "slurm.snapshot_seconds": 0.2,
            "repair.rejoin_timeout_seconds": 60,
            "repair.hook_timeout_seconds": 30,
        }
        services = build(load_settings(env={}, overrides=values | overrides))
        built.append(services)
        medic = Medic(services, slurm_cluster, slurm)
        medic.reboots_at_start = {n: _reboot_count(slurm_cluster, n) for n in slurm.nodes}
        medic.store.put_repair_policy(CLUSTER, policy)
        medic.run()
        return medic

    yield make
    for services in built:
        services.close()


def _no_loop_errors(medic: Medic) -> None:
    """Every repair pass ran to its end (the loop swallows, logs and counts a pass that raised)."""
    assert medic.counter("medic_loop_errors_total", stage="repair") == 0


# --------------------------------------------------------------------------------- scenarios
def test_an_xid_79_storm_trips_the_breaker_at_once_and_a_persons_approval_still_repairs(
    make_medic: MakeMedic, slurm: SlurmEnv
) -> None:
    # every node of the cluster alerting within 10 minutes: max(2, ceil(0.5 x 2 nodes)) = 2 nodes
    # failing trip the breaker before any automatic repair starts, however few the budget admits
    policy = RepairPolicy(
        auto_xids=frozenset({79}),
        max_wait_seconds=5,
        cooldown_seconds=0,
        breaker_fraction=0.5,
        breaker_window_seconds=600,
    )
    medic = make_medic(policy)
    nodes = list(slurm.nodes)
    boots = {n: medic.boot_time(n) for n in nodes}
    for name in nodes:  # the storm: every node of the cluster at once
        medic.kernel(name)

    medic.run()  # every alert is stored at once, then the breaker is evaluated
    firing = medic.store.list_alerts(cluster=CLUSTER, state=AlertState.FIRING)
    assert sorted((a.node, a.key) for a in firing) == [(NodeName(n), "xid:79") for n in nodes]
    breaker = medic.store.get_breaker(CLUSTER)
    assert breaker.tripped, "the storm must trip the breaker"
    assert breaker.reason is not None and "2 node(s) failing" in breaker.reason, breaker.reason
    (tripped,) = medic.events(AuditKind.BREAKER_TRIPPED)
    assert tripped.payload["auto_repairs"] == [], "before any automatic repair"
    held = sorted(medic.repairs(), key=lambda r: r.node)
    assert [(r.node, r.state, r.rule, r.approved_by) for r in held] == [
        (NodeName(n), S.PENDING_APPROVAL, "breaker-tripped", None) for n in nodes
    ]

    # nothing happens to the nodes while nobody approves: no drain, no reboot
    medic.idle_for(3.0)
    assert [r.state for r in medic.repairs()] == [S.PENDING_APPROVAL] * 2
    assert {n: medic.reboots(n) for n in nodes} == dict.fromkeys(nodes, 0)
    assert all(medic.in_service(n) for n in nodes)

    # a person approves both: the breaker never holds a person's decision; one at a time
    # (the budget is 1 here), each node really reboots once
    for repair in held:
        repair_decisions.approve_repair(medic.store, repair.id, "alice", datetime.now(UTC))
    medic.until(
        "the approved repairs to finish", lambda: len(medic.finished()) == 2, 2 * REBOOT_SECONDS
    )
    assert [r.state for r in medic.repairs()] == [S.DONE, S.DONE], medic.trail()
    assert {n: medic.reboots(n) for n in nodes} == dict.fromkeys(nodes, 1)
    assert all(medic.boot_time(n) != boots[n] for n in nodes)
    assert len(medic.events(AuditKind.BREAKER_TRIPPED)) == 1
    assert medic.store.get_breaker(CLUSTER).tripped
    _no_loop_errors(medic)


def test_the_same_fault_after_two_reboots_climbs_to_a_reprovision_hook(
    make_medic: MakeMedic, slurm: SlurmEnv, tmp_path: Path
) -> None:
    record = tmp_path / "reprovisioned.txt"
    hook = tmp_path / "reprovision.sh"
    hook.write_text(
        "#!/bin/sh\n"
        f'echo "$1 $2 $MEDIC_NODE $MEDIC_REPAIR_ID $MEDIC_ACTION" >> {shlex.quote(str(record))}\n'
        "exit 0\n"
    )
    hook.chmod(0o755)
    policy = RepairPolicy(
        auto_actions=frozenset({RepairAction.REBOOT, RepairAction.REPROVISION}),
        max_wait_seconds=5,
        cooldown_seconds=0,
    )
    medic = make_medic(policy, **{"repair.reprovision_command": f"{hook} {{node}} {{repair_id}}"})
    target = slurm.nodes[-1]
    boots: list[str] = []
    for round_ in range(1, 4):  # the same Xid on the same node, each after the last repair
        wait_settled(slurm, target)
        boots.append(medic.boot_time(target))
        medic.kernel(target)
        medic.until(
            f"repair {round_} to finish",
            partial(medic.finished_count, target, round_),
            REBOOT_SECONDS,
        )
    done = medic.finished(target)
    assert [r.state for r in done] == [S.DONE] * 3, [r.error for r in done]
    reboot, reprovision = RepairAction.REBOOT, RepairAction.REPROVISION
    assert [r.action for r in done] == [reboot, reboot, reprovision]
    third = done[-1]
    assert third.escalated_from is RepairAction.REBOOT
    assert third.evidence["escalated_from"] == "reboot"
    assert third.rule == "auto:action:reprovision" and third.approved_by == "auto"
    (recommended,) = [
        e for e in medic.events(AuditKind.REPAIR_RECOMMENDED) if e.payload["repair_id"] == third.id
    ]
    trace = [[rule, why.split(": ", 1)[-1]] for rule, why in recommended.payload["trace"]]
    assert ["escalation", "reboot ran 2x -> reprovision"] in trace

    # the two reboots went through scontrol reboot; the reprovision through the hook only
    assert boots[0] != boots[1] != boots[2]
    wait_for(f"{target} back in service", lambda: medic.in_service(target), timeout=30)
    assert medic.reboots(target) == 2, "the hook reprovisioned: Slurm did not reboot the node"
    assert record.read_text().split("\n") == [
        f"{target} {third.id} {target} {third.id} reprovision",
        "",
    ]
    assert medic.transitions(third.id) == [
        ("approved", "cordoned"),
        ("cordoned", "waiting_for_idle"),
        ("waiting_for_idle", "draining"),
        ("draining", "executing"),
        ("executing", "rejoining"),
        ("rejoining", "done"),
    ]
    assert medic.reboots(slurm.nodes[0]) == 0
    _no_loop_errors(medic)


@pytest.fixture
def serve() -> Iterator[Callable[[Services], str]]:
    """``serve(services)``: the HTTP API over ``services`` on a free port; its base URL."""
    running: list[LiveServer] = []

    def start(services: Services) -> str:
        running.append(LiveServer(create_app(services)).start())
        return running[-1].url

    yield start
    for server in running:
        server.stop()


RACERS = 4


def test_racing_api_calls_with_one_request_id_make_one_repair_that_reboots_the_node(
    make_medic: MakeMedic, slurm: SlurmEnv, serve: Callable[[Services], str]
) -> None:
    # the first pass told the store the cluster's nodes; the policy trusts the detector
    medic = make_medic(replace(FAST, trusted_detectors=frozenset({"nvsentinel"})))
    url = serve(medic.services)
    token = grant(medic.store, Role.DETECTOR, "nvsentinel")
    target = slurm.nodes[0]
    boot = medic.boot_time(target)
    body = {
        "cluster": CLUSTER,
        "node": target,
        "action": "reboot",
        "request_id": "nvs-race-1",
        "reason": "dcgmi diag -r 2 failed on GPU 3 (memory test)",
        "check": "dcgm_diag",
        "severity": "critical",
        "evidence": {"log": "https://logs.example.com/nvsentinel/race-1", "gpu": 3},
    }
    barrier = threading.Barrier(RACERS)
    answers: list[httpx.Response] = []
    failures: list[BaseException] = []

    def send() -> None:
        try:
            with httpx.Client(base_url=url, timeout=20.0, headers=bearer(token)) as client:
                barrier.wait(10)
                answers.append(client.post("/api/v1/repairs", json=body))
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=send) for _ in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures, failures
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200] * (RACERS - 1) + [201], [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == 1
    assert len({r.headers["Location"] for r in answers}) == 1
    (repair,) = medic.repairs()
    assert (repair.request_id, repair.requested_by, repair.approved_by) == (
        "nvs-race-1",
        "nvsentinel",
        "auto",
    )
    assert repair.state is S.APPROVED and repair.rule == "auto:detector:nvsentinel"
    assert len(medic.events(AuditKind.REPAIR_REQUESTED)) == 1
    assert len(medic.events(AuditKind.REPAIR_REQUEST_REPEATED)) == RACERS - 1

    # the one repair runs on the real node
    medic.until("the repair to finish", lambda: medic.finished(target), REBOOT_SECONDS)
    (done,) = medic.repairs()
    assert done.state is S.DONE, done.error
    assert medic.reboots(target) == 1 and medic.boot_time(target) != boot
    assert medic.reboots(slurm.nodes[-1]) == 0
    wait_for(f"{target} back in service", lambda: medic.in_service(target), timeout=30)

    # the detector keeps reporting the same fault: the finished repair answers, no second one
    with httpx.Client(base_url=url, timeout=20.0, headers=bearer(token)) as client:
        again = client.post("/api/v1/repairs", json=body)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == done.id and again.json()["state"] == "done"
    medic.idle_for(1.0)
    assert [r.id for r in medic.repairs()] == [done.id]
    assert medic.reboots(target) == 1
    _no_loop_errors(medic)


OPTED_IN = json.dumps({"medic": {"mode": "observe"}})


def test_a_busy_node_waits_for_idle_then_its_job_is_moved_off_through_slurm(
    make_medic: MakeMedic, slurm: SlurmEnv
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=5, cooldown_seconds=0)
    medic = make_medic(policy)
    out = slurm.shared_dir / "busy-%j.out"
    job_id = sbatch(
        slurm,
        "--job-name=busy",
        "--nodes=1",
        "--requeue",
        f"--comment={OPTED_IN}",
        f"--output={out}",
        "--wrap=sleep 600",
    )
    try:
        wait_for(
            "the job to run", lambda: job(slurm, job_id).get("JobState") == "RUNNING", timeout=30
        )
        busy = job(slurm, job_id)["NodeList"]
        other = next(n for n in slurm.nodes if n != busy)
        boot = medic.boot_time(busy)
        # medic's listing of the jobs (cached for slurm.snapshot_seconds) has it: see
        # test_a_job_medic_does_not_watch_holds_the_repair_until_the_deadline for what happens
        # to a job medic does not see
        medic.until(
            "medic to see the job",
            lambda: any(str(j.id) == job_id for j in medic.services.scheduler.list_jobs()),
            10,
        )
        medic.kernel(busy)

        # the repair cordons the node and waits: the job keeps running meanwhile
        cordoned = medic.until(
            "the node cordoned",
            lambda: next((r for r in medic.repairs(busy) if r.state is S.WAITING_FOR_IDLE), None),
            30,
        )
        assert node(slurm, busy)["Reason"].startswith("medic:")
        medic.idle_for(2.0)
        assert medic.repairs(busy)[0].state is S.WAITING_FOR_IDLE
        assert job(slurm, job_id)["JobState"] == "RUNNING"

        medic.until("the repair to finish", lambda: medic.finished(busy), REBOOT_SECONDS)
        (repair,) = medic.repairs(busy)
        assert repair.state is S.DONE, repair.error
        assert repair.interrupted_jobs == (job_id,)

        # the wait timed out after max_wait_seconds, recorded with the job it interrupted
        (waited,) = [
            e
            for e in medic.events(AuditKind.REPAIR_TRANSITION)
            if e.payload["repair_id"] == cordoned.id and e.payload["from"] == "waiting_for_idle"
        ]
        assert waited.payload["to"] == "draining"
        assert waited.payload["timed_out"] is True
        assert waited.payload["interrupted_jobs"] == [job_id]
        (start,) = [
            e
            for e in medic.events(AuditKind.REPAIR_TRANSITION)
            if e.payload["repair_id"] == cordoned.id and e.payload["to"] == "cordoned"
        ]
        assert (waited.time - start.time).total_seconds() >= 5
        (interrupted,) = medic.events(AuditKind.REPAIR_JOB_INTERRUPTED)
        assert interrupted.subject_id == job_id and interrupted.payload["timed_out"] is True
        assert interrupted.payload["repair_id"] == repair.id

        # moved off through scontrol by job recovery's controller, carrying out the repair's
        # advice: requeued held, the node excluded, released (its ledger); the repair's own
        # steps are the node's
        steps = [
            (e.payload["step"], e.payload.get("job"))
            for e in medic.events(AuditKind.REPAIR_STEP_SUCCEEDED)
            if e.payload["repair_id"] == repair.id
        ]
        assert steps == [("drain", None), ("execute", None), ("resume", None)], steps
        advice = medic.store.advice_for_job(CLUSTER, JobId(job_id))
        assert advice is not None and advice.repair_id == repair.id, advice
        assert advice.rule == "repair-evacuation" and busy in advice.exclude_nodes
        ledger = [
            (a.kind.value, a.status.value)
            for a in medic.store.list_actions(CLUSTER, JobId(job_id))
            if a.node is None and a.advice_id == advice.id
        ]
        assert ledger == [
            ("requeue_hold", "succeeded"),
            ("exclude_nodes", "succeeded"),
            ("release", "succeeded"),
        ], ledger

        # the node really rebooted, and the job runs again: on the other node, or on the
        # repaired one when it was still queued once that was back (the exclusion is medic's,
        # recorded by the controller, so it is taken off then: exclusion-returned)
        assert medic.reboots(busy) == 1 and medic.boot_time(busy) != boot
        assert medic.reboots(other) == 0
        again = wait_for(
            "the job running again",
            lambda: (i := job(slurm, job_id)).get("JobState") == "RUNNING" and i,
            timeout=60,
        )
        returned = [
            e
            for e in medic.events(AuditKind.EXCLUSION_RETURNED)
            if e.subject_id == job_id and e.payload["status"] == "succeeded"
        ]
        if again["NodeList"] == busy:
            assert [e.payload["nodes"] for e in returned] == [[busy]], returned
        else:
            assert again["NodeList"] == other
            assert returned or busy in again["ExcNodeList"].split(","), again
        assert int(again["Restarts"]) >= 1

        def serving() -> bool:  # undrained: idle, or running the job again
            info = node(slurm, busy)
            ran = again["NodeList"] == busy and info.get("State") in ("ALLOCATED", "MIXED")
            return medic.in_service(busy) or (ran and info.get("Reason", "") in ("", "(null)"))

        wait_for(f"{busy} back in service", serving, timeout=30)
        _no_loop_errors(medic)
    finally:
        check(slurm, "scancel", job_id)


def test_an_unmapped_kernel_line_is_listed_counted_and_degrades_the_node_without_a_repair(
    make_medic: MakeMedic, slurm: SlurmEnv
) -> None:
    medic = make_medic(RepairPolicy(auto_xids=frozenset({79}), cooldown_seconds=0))
    target = slurm.nodes[0]
    medic.kernel(target, LINK_DOWN)

    alert = medic.until(
        "the alert",
        lambda: next(iter(medic.store.list_alerts(cluster=CLUSTER, node=NodeName(target))), None),
        15,
    )
    medic.idle_for(2.0)  # passes enough for a recommendation, had there been one

    assert (alert.key, alert.state, alert.mapped_action) == (
        "sig:mlx5.link_down",
        AlertState.FIRING,
        None,
    )
    assert alert.evidence["line"] == LINK_DOWN.strip()
    unmapped = medic.store.list_alerts(cluster=CLUSTER, unmapped_only=True)
    assert [(a.node, a.key, a.state) for a in unmapped] == [
        (NodeName(target), "sig:mlx5.link_down", AlertState.FIRING)
    ]
    assert medic.counter("medic_alerts_unmapped_total", cluster=CLUSTER, key=alert.key) == 1
    assert medic.counter("medic_alerts_total", cluster=CLUSTER, key=alert.key) == 1
    (fired,) = medic.events(AuditKind.ALERT_FIRING)
    assert fired.subject_id == target and fired.payload["mapped_action"] is None
    (skipped,) = medic.events(AuditKind.REPAIR_SKIPPED)
    assert (skipped.payload["rule"], skipped.payload["unmapped"]) == ("unmapped", [alert.key])

    assert medic.engine.health() == {NodeName(target): NodeHealth.DEGRADED}
    assert medic.engine.placement_exclusions() == frozenset()  # an error, not critical
    assert medic.repairs() == []
    assert medic.in_service(target)
    assert Counter(medic.reboots(n) for n in slurm.nodes) == Counter({0: len(slurm.nodes)})
    _no_loop_errors(medic)


def test_a_job_medic_does_not_watch_holds_the_repair_until_the_deadline(
    make_medic: MakeMedic, slurm: SlurmEnv
) -> None:
    """docs/node-repair.md, *Wait for idle*: "Jobs that Slurm shows on the node but medic does
    not watch (not opted in) hold the repair like visible ones until the deadline"."""
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=60, cooldown_seconds=0)
    medic = make_medic(policy)
    out = slurm.shared_dir / "unwatched-%j.out"
    job_id = sbatch(
        slurm, "--job-name=unwatched", "--nodes=1", f"--output={out}", "--wrap=sleep 600"
    )
    try:
        wait_for(
            "the job to run", lambda: job(slurm, job_id).get("JobState") == "RUNNING", timeout=30
        )
        busy = job(slurm, job_id)["NodeList"]
        medic.until("medic's snapshot of the busy node", lambda: _busy(medic, busy), 10)
        medic.kernel(busy)
        medic.until("the repair", lambda: medic.repairs(busy), 10)
        medic.idle_for(2.0)

        (repair,) = medic.repairs(busy)
        assert repair.state is S.WAITING_FOR_IDLE, medic.trail()
        assert "REBOOT" not in node(slurm, busy)["State"]
        assert medic.reboots(busy) == 0
    finally:
        check(slurm, "scancel", job_id)


def test_a_job_started_since_the_last_listing_holds_the_repair(
    make_medic: MakeMedic, slurm: SlurmEnv
) -> None:
    """The window is ``slurm.snapshot_seconds`` (1 s by default, stretched to 30 s here to make
    it deterministic): the pass that cordons stops at waiting_for_idle, and the next one decides
    on a listing read after the drain (which dropped the cached ones)."""
    policy = RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=60, cooldown_seconds=0)
    medic = make_medic(policy, **{"slurm.snapshot_seconds": 30})  # listed: no job anywhere
    out = slurm.shared_dir / "fresh-%j.out"
    job_id = sbatch(
        slurm,
        "--job-name=fresh",
        "--nodes=1",
        f"--comment={OPTED_IN}",
        f"--output={out}",
        "--wrap=sleep 600",
    )
    try:
        wait_for(
            "the job to run", lambda: job(slurm, job_id).get("JobState") == "RUNNING", timeout=30
        )
        busy = job(slurm, job_id)["NodeList"]
        medic.kernel(busy)
        medic.until("the repair", lambda: medic.repairs(busy), 10)
        medic.idle_for(2.0)

        (repair,) = medic.repairs(busy)
        assert repair.state is S.WAITING_FOR_IDLE, medic.trail()
        assert "REBOOT" not in node(slurm, busy)["State"]
    finally:
        check(slurm, "scancel", job_id)


def _busy(medic: Medic, name: str) -> bool:
    """medic's cached listing shows the node running a job."""
    found = [n for n in medic.services.scheduler.list_nodes() if n.name == name]
    return bool(found) and found[0].state.value in ("allocated", "mixed")
