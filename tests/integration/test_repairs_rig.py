"""The node-repair test rig: the control loop with a repair engine on the simulated cluster and a
SQLite store, in virtual time (``conftest.Harness`` plus the engine), and its own smoke test.

The other ``test_repairs_*`` modules import :func:`rig` and the helpers from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from medic.config.settings import RepairSettings, Settings, SimSettings, StoreSettings
from medic.control.loop import ControlLoop
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.cluster import Mode, NodeState
from medic.domain.ids import NodeName
from medic.domain.repairs import (
    Alert,
    AlertState,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairState,
)
from medic.ports import NodeProvider
from medic.repair.engine import RepairEngine
from medic.schedulers.hooks import HookNodeProvider, run_command
from medic.schedulers.sim import SimCluster
from medic.telemetry.metrics import PrometheusMetrics
from medic.wiring import build

from .conftest import CLUSTER, SIM, Harness, MakeHarness

__all__ = ["LIFECYCLE", "XID79", "Rig", "replace_engine", "rig"]

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
LIFECYCLE = [
    ("approved", "cordoned"),
    ("cordoned", "waiting_for_idle"),
    ("waiting_for_idle", "draining"),
    ("draining", "executing"),
    ("executing", "rejoining"),
    ("rejoining", "done"),
]
"""The transitions of a reboot that needs no revalidation, in order."""


@dataclass
class Rig:
    """A harness whose loop runs ``engine`` once per pass."""

    h: Harness
    engine: RepairEngine
    metrics: PrometheusMetrics
    engines: list[RepairEngine] = field(default_factory=list)

    # --- cluster --------------------------------------------------------------------------
    def kernel(self, node: str, text: str = XID79) -> None:
        """Append a line to ``node``'s kernel log (read by the loop's next pass)."""
        self.h.sim.advance()
        self.h.sim.lines.kernel(NodeName(node), text)

    def node(self, name: str) -> tuple[NodeState, str | None]:
        found = next(n for n in self.h.sim.scheduler.list_nodes() if n.name == name)
        return found.state, found.reason

    # --- store ----------------------------------------------------------------------------
    def repairs(self, node: str | None = None) -> list[Repair]:
        return self.h.store.list_repairs(cluster=CLUSTER, node=NodeName(node) if node else None)

    def repair(self, node: str) -> Repair:
        found = self.repairs(node)
        assert len(found) == 1, found
        return found[0]

    def alerts(self, node: str | None = None) -> list[Alert]:
        return self.h.store.list_alerts(cluster=CLUSTER, node=NodeName(node) if node else None)

    def firing(self, node: str) -> list[str]:
        return [a.key for a in self.alerts(node) if a.state is AlertState.FIRING]

    def events(self, kind: AuditKind | None = None) -> list[AuditEvent]:
        return self.h.audit(kind=kind)

    def transitions(self, repair_id: int) -> list[tuple[str, str]]:
        return [
            (e.payload["from"], e.payload["to"])
            for e in self.events(AuditKind.REPAIR_TRANSITION)
            if e.payload["repair_id"] == repair_id
        ]

    def run_until_state(self, node: str, *states: RepairState, within: float = 120.0) -> Repair:
        def reached() -> bool:
            return any(r.state in states for r in self.repairs(node))

        self.h.run_until(reached, within=within, step=0.5)
        return next(r for r in self.repairs(node) if r.state in states)

    def counter(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def rig(
    make_harness: MakeHarness,
    *,
    policy: RepairPolicy | None = None,
    settings: RepairSettings | None = None,
    sim: SimSettings = SIM,
    provider: Callable[[SimCluster], NodeProvider] | None = None,
    mode: Mode = Mode.ACT,
) -> Rig:
    """A harness in ``mode`` whose loop runs a repair engine; ``policy`` is stored for the
    cluster (default: auto-approve Xid 79, 60 s max wait, no cooldown); ``provider`` builds the
    node provider from the simulator (default: its own)."""
    h = make_harness(mode=mode, sim=sim)
    h.store.put_repair_policy(
        CLUSTER,
        policy or RepairPolicy(auto_xids=frozenset({79}), max_wait_seconds=60, cooldown_seconds=0),
    )
    metrics = PrometheusMetrics()
    engine = RepairEngine(
        store=h.store,
        scheduler=h.scheduler,
        provider=provider(h.sim) if provider else h.sim.node_provider,
        clock=h.clock,
        settings=settings or RepairSettings(rejoin_timeout_seconds=120),
        metrics=metrics,
        validation_runner=run_command,
    )
    h.loop = ControlLoop(
        scheduler=h.scheduler,
        logs=h.logs,
        store=h.store,
        modes=h.store,
        diagnoser=SignatureDiagnoser(),
        clock=h.clock,
        metrics=metrics,
        settings=h.settings,
        repairs=engine,
    )
    return Rig(h, engine, metrics)


def replace_engine(r: Rig, engine: RepairEngine) -> ControlLoop:
    """A restarted medic: a fresh loop around ``engine`` (nothing kept in memory)."""
    r.engine = engine
    return ControlLoop(
        scheduler=r.h.scheduler,
        logs=r.h.logs,
        store=r.h.store,
        modes=r.h.store,
        diagnoser=SignatureDiagnoser(),
        clock=r.h.clock,
        metrics=r.metrics,
        settings=r.h.settings,
        repairs=engine,
    )


def test_an_xid_79_on_an_idle_node_is_repaired_by_a_reboot(make_harness: MakeHarness) -> None:
    r = rig(make_harness)
    boot = r.h.sim.node_provider.boot_id(NodeName("node003"))
    r.kernel("node003")
    repair = r.run_until_state("node003", RepairState.DONE, within=30)

    assert (repair.action, repair.rule, repair.approved_by) == (
        RepairAction.REBOOT,
        "auto:xid:79",
        "auto",
    )
    assert repair.alert_keys == ("xid:79",) and repair.boot_id == boot
    assert r.transitions(repair.id) == LIFECYCLE
    assert [(n, a) for n, a, *_ in r.h.sim.repairs] == [("node003", RepairAction.REBOOT)]
    assert r.h.sim.node_provider.boot_id(NodeName("node003")) != boot
    assert r.node("node003") == (NodeState.IDLE, None)
    assert r.firing("node003") == []  # the reboot fixed it: the alert is resolved
    assert r.engine.placement_exclusions() == frozenset()
    assert r.h.scheduler.names("node003") == ["drain_node", "resume_node"]
    assert r.counter("medic_alerts_total", cluster=CLUSTER, key="xid:79") == 1
    done = r.counter("medic_repairs_total", cluster=CLUSTER, action="reboot", state="done")
    assert done == 1
    latency = r.metrics.registry.get_sample_value(
        "medic_alert_recommendation_latency_seconds_count"
    )
    assert latency == 1
    # recommended within the pass that read the line
    rec = r.events(AuditKind.REPAIR_RECOMMENDED)[0]
    alert = r.events(AuditKind.ALERT_FIRING)[0]
    assert rec.time - alert.time <= timedelta(seconds=0)


def test_the_composition_root_wires_the_engine_unless_disabled(tmp_path: Path) -> None:
    store = StoreSettings(url=f"sqlite:///{tmp_path}/medic.db")
    default = build(Settings(store=store))
    try:
        assert isinstance(default.repairs, RepairEngine), "node repair is on by default"
    finally:
        default.close()
    off = build(Settings(store=store, repair=RepairSettings(enabled=False)))
    try:
        assert off.repairs is None
    finally:
        off.close()
    hooks = RepairSettings(reprovision_command="true")
    on = build(Settings(store=store, repair=hooks), start_workload=False)
    try:
        assert isinstance(on.repairs, RepairEngine)
        provider = on.repairs.lifecycle._provider
        assert isinstance(provider, HookNodeProvider)
        assert provider.commands == {RepairAction.REPROVISION: "true"}
        on.loop.run_once()
        assert on.repairs.health() == {}
    finally:
        on.close()
