"""Alert storms on a 64-node cluster in two partitions, with the default budget and breaker
(5 %: 3 repairs at work, 2 per partition; 10 %: 7 nodes failing within 10 minutes).

Three quarters of the cluster alerting trips the breaker at once, whatever the budget let start,
and no repair drains a node. A storm of a tenth of it starts several repairs in both partitions,
and the repairs that wait for busy nodes do not keep the idle ones from being repaired.
"""

from __future__ import annotations

from medic.config.settings import SimSettings
from medic.domain.audit import AuditKind
from medic.domain.cluster import JobState, Mode
from medic.domain.ids import NodeName
from medic.domain.repairs import RepairPolicy, RepairState
from medic.repair.rules.guards import budget_limit, pool_limit

from .conftest import CLUSTER, SIM, MakeHarness
from .test_repairs_rig import rig

SIM64 = SimSettings(
    nodes=64,
    partitions=2,
    jobs=0,
    nodes_per_job=1,
    seed=5,
    iteration_seconds=SIM.iteration_seconds,
    checkpoint_every=SIM.checkpoint_every,
    nccl_timeout_seconds=SIM.nccl_timeout_seconds,
    startup_seconds=SIM.startup_seconds,
    node_repair_seconds=3600.0,
)
"""node001-node032 in p0, node033-node064 in p1."""
POLICY = RepairPolicy(auto_xids=frozenset({79}), cooldown_seconds=0)
"""The default budget, breaker and wait for idle (2 h); Xid 79 repaired automatically."""
AT_WORK = frozenset(
    {
        RepairState.CORDONED,
        RepairState.DRAINING,
        RepairState.EXECUTING,
        RepairState.REJOINING,
        RepairState.VALIDATING,
    }
)


def _node(i: int) -> str:
    return f"node{i:03d}"


def test_three_quarters_of_two_partitions_alerting_trips_the_breaker_and_holds_every_repair(
    make_harness: MakeHarness,
) -> None:
    assert (budget_limit(64, POLICY), pool_limit(32, POLICY)) == (3, 2)
    r = rig(make_harness, policy=POLICY, sim=SIM64)
    h = r.h
    storm = [_node(i) for i in [*range(1, 25), *range(33, 57)]]  # 24 in each partition
    for node in storm:
        r.kernel(node)
    h.run(5.0, step=0.5)

    breaker = h.store.get_breaker(CLUSTER)
    assert breaker.tripped and breaker.reason is not None
    assert "48 node(s) failing" in breaker.reason and "(10% of 64 nodes)" in breaker.reason
    (tripped,) = r.events(AuditKind.BREAKER_TRIPPED)
    assert tripped.payload["rule"] == "breaker" and tripped.payload["auto_repairs"] == []
    repairs = r.repairs()
    assert sorted(rep.node for rep in repairs) == storm, "every alert has its repair"
    assert {(rep.state, rep.rule) for rep in repairs} == {
        (RepairState.PENDING_APPROVAL, "breaker-tripped")
    }, "held for a person"
    drains = [c for c in h.scheduler.calls if c.name == "drain_node" and "repair" in c.args[1]]
    assert drains == [] and h.sim.repairs == [], "no repair drained or touched a node"


def test_a_tenth_of_the_cluster_alerting_starts_several_repairs_past_the_busy_nodes(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness, policy=POLICY, sim=SIM64, mode=Mode.OBSERVE)  # jobs stay put
    h = r.h
    jobs = [h.submit("pretrain", partition=p, num_nodes=1) for p in ("p0", "p1")]
    h.run_until(lambda: all(h.job(j).state is JobState.RUNNING for j in jobs), within=10)
    busy = [h.job(j).nodes[0] for j in jobs]
    idle = [n for n in (_node(i) for i in [1, 2, 3, 33, 34, 35]) if n not in busy][:4]
    assert len(idle) == 4 and {n <= "node032" for n in idle} == {True, False}
    for node in busy:  # the busy nodes' alerts are the oldest: their repairs come first
        r.kernel(node)
    h.run(0.5, step=0.5)
    for node in idle:
        r.kernel(node)

    at_work_most = 0
    for _ in range(120):  # one minute
        h.run(0.5, step=0.5)
        states = [rep.state for rep in r.repairs()]
        at_work_most = max(at_work_most, sum(s in AT_WORK for s in states))
    assert at_work_most == 3, "several at once (the whole budget), never more"
    for node in idle:
        assert r.repair(node).state is RepairState.DONE, node
    for node, job in zip(busy, jobs, strict=True):
        waiting = r.repair(node)
        assert waiting.state is RepairState.WAITING_FOR_IDLE, "waits for its job, for 2 h"
        assert h.job(job).state is JobState.RUNNING and NodeName(node) in h.job(job).nodes
    assert not h.store.get_breaker(CLUSTER).tripped
