"""Guardrails of node auto-repair on the simulator, in virtual time: the circuit breaker in an
alert storm (and its reset), the escalation ladder through an operator hook, unmapped alerts,
auto-resolve, and the scheduler's own node states (observed, never overridden)."""

from __future__ import annotations

from medic.config.settings import SimSettings
from medic.domain.audit import AuditKind
from medic.domain.cluster import NodeState
from medic.domain.diagnosis import Severity
from medic.domain.ids import NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    NodeHealth,
    Repair,
    RepairAction,
    RepairPolicy,
    RepairState,
)
from medic.repair import policy_changes as repair_policy
from medic.schedulers.hooks import HookNodeProvider
from medic.schedulers.sim import SimCluster

from .conftest import CLUSTER, SIM, MakeHarness
from .test_repairs_rig import XID79, rig

STORM_SIM = SimSettings(
    nodes=100,
    partitions=10,
    jobs=0,
    nodes_per_job=2,
    seed=3,
    iteration_seconds=0.5,
    checkpoint_every=10,
    nccl_timeout_seconds=5.0,
    startup_seconds=1.0,
    node_repair_seconds=3600.0,
)


def _agent_alert(node: str, key: str, severity: Severity = Severity.WARNING) -> Alert:
    """An alert as the node agent posts it through the API (no mapping filled in)."""
    return Alert(
        cluster=CLUSTER,
        node=NodeName(node),
        key=key,
        source=AlertSource.AGENT,
        summary=key,
        description=f"{key} on {node}",
        severity=severity,
        evidence={"peak_celsius": 96, "throttle_count": 41},
        detector=f"agent:{node}",
    )


def test_an_alert_storm_trips_the_breaker_and_a_reset_re_enables_it(
    make_harness: MakeHarness,
) -> None:
    policy = RepairPolicy(auto_xids=frozenset({79}), cooldown_seconds=0)  # 10 % breaker
    r = rig(make_harness, policy=policy, sim=STORM_SIM)
    h = r.h
    storm = [f"node{i:03d}" for i in range(1, 101, 10)] + [f"node{i:03d}" for i in range(2, 101, 5)]
    storm = sorted(set(storm))[:30]
    assert len(storm) == 30  # 30% of the cluster at once
    for node in storm:
        r.kernel(node)
    h.run(60.0, step=0.5)

    breaker = h.store.get_breaker(CLUSTER)
    assert breaker.tripped and breaker.reason is not None and "30 node(s)" in breaker.reason
    (tripped,) = r.events(AuditKind.BREAKER_TRIPPED)
    # tripped on the nodes alerting, before any automatic repair started
    assert tripped.payload["auto_repairs"] == [] and tripped.payload["held"] == []
    repairs = r.repairs()
    assert len(repairs) == 30  # every alert got a recommendation: none dropped
    assert {rep.state for rep in repairs} == {RepairState.PENDING_APPROVAL}
    assert {rep.rule for rep in repairs} == {"breaker-tripped"}
    assert not [e for e in r.events(AuditKind.REPAIR_TRANSITION) if e.payload["to"] == "cordoned"]
    repair_drains = [
        c for c in h.scheduler.calls if c.name == "drain_node" and "repair" in c.args[1]
    ]
    assert repair_drains == [], "no node drained for a repair (cordoned for its alert only)"
    h.run(30.0, step=0.5)
    assert {rep.state for rep in r.repairs()} == {RepairState.PENDING_APPROVAL}  # still paused

    # an operator resets the breaker: automatic repair resumes for new alerts
    repair_policy.reset_breaker(h.store, CLUSTER, "alice", h.clock.now(), reason="bad driver push")
    assert not h.store.get_breaker(CLUSTER).tripped
    assert len(r.events(AuditKind.BREAKER_RESET)) == 1
    fresh = next(f"node{i:03d}" for i in range(100, 0, -1) if f"node{i:03d}" not in storm)
    r.kernel(fresh)
    done = r.run_until_state(fresh, RepairState.DONE, within=30)
    assert (done.approved_by, done.rule) == ("auto", "auto:xid:79")
    assert not h.store.get_breaker(CLUSTER).tripped


def test_the_same_fault_after_two_reboots_climbs_to_a_reprovision_hook(
    make_harness: MakeHarness,
) -> None:
    def hooked(sim: SimCluster) -> HookNodeProvider:
        commands = {RepairAction.REPROVISION: "true {node} {repair_id}"}
        return HookNodeProvider(sim.node_provider, commands, timeout=30)

    policy = RepairPolicy(
        auto_actions=frozenset({RepairAction.REBOOT, RepairAction.REPROVISION}),
        cooldown_seconds=0,
    )
    r = rig(make_harness, policy=policy, provider=hooked)

    def finished() -> list[Repair]:
        return [x for x in r.repairs("node007") if x.state is RepairState.DONE]

    for round_ in range(1, 4):  # the same fault three times, each after the last repair
        r.kernel("node007", XID79)
        r.h.run_until(lambda n=round_: len(finished()) == n, within=30, step=0.5)
    done = finished()
    actions = [x.action for x in done]
    assert actions == [RepairAction.REBOOT, RepairAction.REBOOT, RepairAction.REPROVISION]
    third = done[-1]
    assert third.escalated_from is RepairAction.REBOOT
    assert third.evidence["escalated_from"] == "reboot"
    assert third.rule == "auto:action:reprovision"
    # the two reboots ran in the simulator; the reprovision ran the operator's command
    assert [(n, a) for n, a, *_ in r.h.sim.repairs] == [("node007", RepairAction.REBOOT)] * 2
    executed = [
        e.payload
        for e in r.events(AuditKind.REPAIR_STEP_SUCCEEDED)
        if e.payload["step"] == "execute" and e.payload["repair_id"] == third.id
    ]
    assert len(executed) == 1
    assert r.transitions(third.id)[-1] == ("rejoining", "done")
    recommended = [
        e for e in r.events(AuditKind.REPAIR_RECOMMENDED) if e.payload["repair_id"] == third.id
    ]
    assert ["escalation", "reboot ran 2x -> reprovision"] in [
        [rule, why.split(": ", 1)[-1]] for rule, why in recommended[0].payload["trace"]
    ]


def test_an_unmapped_alert_is_listed_counted_and_degrades_the_node_without_a_repair(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness)
    h = r.h
    h.run(1.0)  # the engine has seen the store once
    h.store.upsert_alert(_agent_alert("node008", "agent:thermal"), h.clock.now())
    h.run(5.0)

    assert r.repairs() == []  # a reboot does not cool a GPU
    assert [a.key for a in h.store.list_alerts(cluster=CLUSTER, unmapped_only=True)] == [
        "agent:thermal"
    ]
    assert r.engine.health() == {NodeName("node008"): NodeHealth.DEGRADED}
    assert r.engine.placement_exclusions() == frozenset()  # a warning, not critical
    assert r.counter("medic_alerts_unmapped_total", cluster=CLUSTER, key="agent:thermal") == 1
    (fired,) = r.events(AuditKind.ALERT_FIRING)
    assert fired.payload["mapped_action"] is None and fired.subject_id == "node008"
    (skipped,) = r.events(AuditKind.REPAIR_SKIPPED)
    assert skipped.payload["rule"] == "unmapped"
    assert skipped.payload["unmapped"] == ["agent:thermal"]
    assert r.node("node008") == (NodeState.IDLE, None)

    # a mapped agent alert on the same node does create one (pending: approve before repair)
    h.store.upsert_alert(_agent_alert("node008", "agent:pcie_replay"), h.clock.now())
    h.run(2.0)
    (repair,) = r.repairs("node008")
    assert repair.state is RepairState.PENDING_APPROVAL and repair.action is RepairAction.REBOOT
    assert repair.alert_keys == ("agent:pcie_replay",)


def test_a_pending_recommendation_is_cancelled_when_its_alert_clears(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness, policy=RepairPolicy(cooldown_seconds=0))
    h = r.h
    h.store.upsert_alert(_agent_alert("node009", "agent:ib_port_down"), h.clock.now())
    h.run(2.0)
    (pending,) = r.repairs("node009")
    assert pending.state is RepairState.PENDING_APPROVAL
    alert = next(a for a in r.alerts("node009") if a.key == "agent:ib_port_down")
    assert alert.id is not None
    h.store.resolve_alert(alert.id, h.clock.now())
    h.run(1.0)
    (cancelled,) = r.repairs("node009")
    assert cancelled.state is RepairState.CANCELLED
    assert r.transitions(cancelled.id) == [("pending_approval", "cancelled")]
    event = next(e for e in r.events(AuditKind.REPAIR_TRANSITION))
    assert event.payload["rule"] == "alert-cleared"
    assert r.engine.health() == {}


def test_someone_elses_drain_is_observed_and_never_overridden(make_harness: MakeHarness) -> None:
    r = rig(make_harness, sim=SIM)
    h = r.h
    h.sim.scheduler.drain_node(NodeName("node010"), "NHC: bad disk")
    h.run(2.0)
    assert r.firing("node010") == ["slurm:drain"]
    (alert,) = r.alerts("node010")
    assert alert.source is AlertSource.SCHEDULER and alert.mapped_action is None
    assert r.repairs() == [] and r.node("node010") == (NodeState.DRAINED, "NHC: bad disk")
    assert r.h.scheduler.names("node010") == []  # medic sent nothing to the node

    # the same node reports an Xid 79: the repair cannot take a node someone else drained
    r.kernel("node010")
    failed = r.run_until_state("node010", RepairState.FAILED, within=10)
    assert failed.error is not None and failed.error.startswith("cannot drain")
    assert r.node("node010") == (NodeState.DRAINED, "NHC: bad disk")

    h.sim.scheduler.resume_node(NodeName("node010"), "NHC: disk replaced")
    h.run(1.0)
    assert "slurm:drain" not in r.firing("node010")
    assert r.events(AuditKind.ALERT_RESOLVED)[-1].payload["key"] == "slurm:drain"
