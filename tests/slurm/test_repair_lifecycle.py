"""Node auto-repair end to end on the real local Slurm cluster (``tests/slurm/conftest.py``): an
Xid 79 line appended to a node's kernel log becomes an alert, a reboot recommendation approved by
the policy, a drain with medic's reason, ``scontrol reboot`` (the cluster's RebootProgram restarts
that node's slurmd as after a reboot), the node's return with a new boot time, and its drain
lifted, in wall-clock time, with the whole trail in the audit log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from medic.config.settings import (
    RebootNextState,
    RepairSettings,
    SchedulerSettings,
    Settings,
    SlurmSettings,
)
from medic.control.loop import ControlLoop
from medic.detect.matcher import SignatureDiagnoser
from medic.dev.slurm import LocalSlurm, SlurmEnv
from medic.domain.audit import AuditKind
from medic.domain.cluster import Mode, NodeState
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import AlertState, RepairAction, RepairPolicy, RepairState
from medic.errors import MedicError
from medic.repair.engine import RepairEngine
from medic.schedulers.hooks import HookNodeProvider, run_command
from medic.schedulers.slurm import LocalRunner, SlurmLogSource, SlurmNodeProvider, SlurmScheduler
from medic.store import SqlStore, create_store
from medic.telemetry.metrics import NullMetrics

from .conftest import node, wait_for

CLUSTER = ClusterName("medic")
NODE = NodeName("node2")
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    found = create_store(f"sqlite:///{tmp_path}/medic.db")
    yield found
    found.close()


@pytest.fixture
def idle(slurm: SlurmEnv) -> Iterator[None]:
    """Start from, and leave, a cluster whose nodes are idle and undrained."""

    def all_idle() -> bool:
        return all(node(slurm, n).get("State") == "IDLE" for n in slurm.nodes)

    wait_for("every node idle before the test", all_idle, timeout=60)
    yield
    for name in slurm.nodes:
        if node(slurm, name).get("Reason", "").startswith("medic:"):
            slurm.run("scontrol", "update", f"NodeName={name}", "State=RESUME")


@pytest.mark.usefixtures("idle")
@pytest.mark.parametrize("nextstate", list(RebootNextState))
def test_an_xid_79_line_reboots_the_node_through_slurm(
    slurm_cluster: LocalSlurm, slurm: SlurmEnv, store: SqlStore, nextstate: RebootNextState
) -> None:
    """With ``nextstate=DOWN`` the node may come back DOWN and held for medic (with this
    cluster's ``ReturnToService=2`` slurmd may also bring it back first): either way medic
    sees it back and returns it to service itself."""
    template = str(slurm_cluster.kernel_log("node1").parent / "{node}.log")
    slurm_settings = SlurmSettings(
        slurm_conf=str(slurm.slurm_conf),
        command_timeout_seconds=30,
        kernel_log_template=template,
        reboot_nextstate=nextstate,
    )
    settings = Settings(
        scheduler=SchedulerSettings(kind="slurm", cluster=CLUSTER, mode=Mode.ACT),
        slurm=slurm_settings,
        repair=RepairSettings(rejoin_timeout_seconds=90),
    )
    clock = WallClock()
    runner = LocalRunner(slurm.env)
    scheduler = SlurmScheduler(runner, CLUSTER, slurm_settings)
    provider = HookNodeProvider.from_settings(
        SlurmNodeProvider(runner, slurm_settings), settings.repair
    )
    store.put_repair_policy(CLUSTER, RepairPolicy(auto_xids=frozenset({79})))
    engine = RepairEngine(
        store=store,
        scheduler=scheduler,
        provider=provider,
        clock=clock,
        settings=settings.repair,
        validation_runner=run_command,
    )
    loop = ControlLoop(
        scheduler=scheduler,
        logs=SlurmLogSource(store, slurm_settings, clock=clock),
        store=store,
        modes=store,
        diagnoser=SignatureDiagnoser(),
        clock=clock,
        metrics=NullMetrics(),
        settings=settings,
        repairs=engine,
    )
    loop.run_once()  # the kernel logs' history is skipped: only new lines count
    boot = provider.boot_id(NODE)
    with slurm_cluster.kernel_log(NODE).open("a") as kern:
        kern.write(XID79)

    seen: set[RepairState] = set()

    def repaired() -> bool:
        loop.run_once()
        repairs = store.list_repairs(cluster=CLUSTER, node=NODE)
        seen.update(r.state for r in repairs)
        return bool(repairs) and repairs[0].state in (RepairState.DONE, RepairState.FAILED)

    started = time.monotonic()
    wait_for("the repair to finish", repaired, timeout=120, every=0.5)
    (repair,) = store.list_repairs(cluster=CLUSTER, node=NODE)
    assert repair.state is RepairState.DONE, repair.error
    assert (repair.action, repair.rule, repair.approved_by) == (
        RepairAction.REBOOT,
        "auto:xid:79",
        "auto",
    )
    assert repair.boot_id == boot

    def rebooted() -> bool:  # slurmd may briefly report no BootTime right after a resume
        try:
            return provider.boot_id(NODE) != boot
        except MedicError:
            return False

    wait_for("node2 to report a new boot time", rebooted, timeout=30)  # it really rebooted
    assert RepairState.EXECUTING in seen or RepairState.REJOINING in seen

    # the node is back in service: idle, no drain, no reboot pending
    wait_for("node2 idle", lambda: node(slurm, NODE).get("State") == "IDLE", timeout=30)
    assert scheduler.list_nodes()[1].state is NodeState.IDLE
    assert node(slurm, NODE).get("Reason", "") in ("", "(null)")

    # the audit trail is complete
    events = store.query_audit(cluster=CLUSTER, subject_id=NODE, limit=1000)
    transitions = [
        (e.payload["from"], e.payload["to"])
        for e in events
        if e.kind is AuditKind.REPAIR_TRANSITION
    ]
    assert transitions == [
        ("approved", "cordoned"),
        ("cordoned", "waiting_for_idle"),
        ("waiting_for_idle", "draining"),
        ("draining", "executing"),
        ("executing", "rejoining"),
        ("rejoining", "done"),
    ]
    kinds = [e.kind for e in events]
    assert kinds[:2] == [AuditKind.ALERT_FIRING, AuditKind.REPAIR_RECOMMENDED]
    steps = [
        (e.kind, e.payload["step"])
        for e in events
        if e.kind in (AuditKind.REPAIR_STEP_STARTED, AuditKind.REPAIR_STEP_SUCCEEDED)
    ]
    assert steps == [
        (AuditKind.REPAIR_STEP_STARTED, "drain"),
        (AuditKind.REPAIR_STEP_SUCCEEDED, "drain"),
        (AuditKind.REPAIR_STEP_STARTED, "execute"),
        (AuditKind.REPAIR_STEP_SUCCEEDED, "execute"),
        (AuditKind.REPAIR_STEP_STARTED, "resume"),
        (AuditKind.REPAIR_STEP_SUCCEEDED, "resume"),
    ]
    assert AuditKind.ALERT_RESOLVED in kinds
    (alert,) = [a for a in store.list_alerts(cluster=CLUSTER, node=NODE) if a.key == "xid:79"]
    assert alert.state is AlertState.RESOLVED and alert.evidence["xid"] == 79
    assert time.monotonic() - started < 120
