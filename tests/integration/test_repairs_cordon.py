"""In act mode a node with a critical alert leaves the pool at once, and comes back when the alert
clears (its window, its repair, a person); medic's own job exclusions for it are taken off then.

Issue 10 (deliver 4) and issue 11 (defect 1), on the simulated cluster in virtual time.
"""

from __future__ import annotations

from medic.config.settings import RepairSettings
from medic.domain.actions import ActionKind, ActionStatus
from medic.domain.audit import AuditKind
from medic.domain.cluster import JobState, Mode, NodeState
from medic.domain.faults import FaultKind
from medic.domain.ids import NodeName
from medic.domain.repairs import AlertState, RepairPolicy, RepairState
from medic.repair.alerts import resolve_by_person

from .conftest import MakeHarness
from .test_repairs_rig import Rig, rig

WINDOW = 60.0
"""The critical clear window of these tests (default: an hour)."""
PERSON_APPROVES = RepairPolicy(cooldown_seconds=0)
"""The default policy: a person approves every repair."""


def _rig(make_harness: MakeHarness, mode: Mode = Mode.ACT) -> Rig:
    settings = RepairSettings(rejoin_timeout_seconds=120, critical_alert_clear_seconds=WINDOW)
    return rig(make_harness, policy=PERSON_APPROVES, settings=settings, mode=mode)


def _cordon_reason(r: Rig, node: str) -> str | None:
    _, reason = r.node(node)
    return reason if reason and reason.startswith("medic: cordon alert") else None


def test_a_critical_alert_cordons_its_node_at_once_and_its_clear_window_returns_it(
    make_harness: MakeHarness,
) -> None:
    r = _rig(make_harness)
    r.kernel("node003")
    r.h.run(0.4)

    # out of the pool in the pass that read the line, while its repair waits for a person
    assert r.node("node003")[0] in (NodeState.DRAINED, NodeState.DRAINING)
    reason = _cordon_reason(r, "node003")
    assert reason is not None and "xid:79" in reason
    assert r.repair("node003").state is RepairState.PENDING_APPROVAL
    cordons = r.events(AuditKind.NODE_CORDONED)
    assert [e.payload["status"] for e in cordons] == ["started", "succeeded"]
    assert cordons[0].subject_id == "node003" and cordons[0].payload["key"] == "xid:79"

    # no new sighting for the window: the alert clears, the unstarted repair is cancelled and
    # the node returns; each once
    r.h.run(WINDOW + 2, step=1.0)
    assert r.firing("node003") == []
    (resolved,) = [e for e in r.events(AuditKind.ALERT_RESOLVED) if e.payload["key"] == "xid:79"]
    assert "clear window" in resolved.payload["why"]
    repair = r.repair("node003")
    assert repair.state is RepairState.CANCELLED
    assert r.transitions(repair.id)[-1] == ("pending_approval", "cancelled")
    assert r.node("node003") == (NodeState.IDLE, None)
    assert r.h.scheduler.names("node003") == ["drain_node", "resume_node"]
    returned = r.events(AuditKind.NODE_RETURNED)
    assert [e.payload["status"] for e in returned] == ["started", "succeeded"]
    assert r.engine.placement_exclusions() == frozenset()


def test_observe_mode_never_cordons(make_harness: MakeHarness) -> None:
    r = _rig(make_harness, mode=Mode.OBSERVE)
    r.kernel("node003")
    r.h.run(2.0)

    assert r.firing("node003") == ["xid:79"]
    assert r.node("node003") == (NodeState.IDLE, None)
    assert r.h.scheduler.names("node003") == []
    assert r.events(AuditKind.NODE_CORDONED) == []


def test_a_person_who_resumes_a_cordoned_node_has_the_last_word(make_harness: MakeHarness) -> None:
    r = _rig(make_harness)
    r.kernel("node003")
    r.h.run(0.4)
    assert _cordon_reason(r, "node003") is not None

    r.h.sim.scheduler.resume_node(NodeName("node003"), "fixed by hand")  # a person, not medic
    r.h.run(5.0)

    assert r.node("node003") == (NodeState.IDLE, None)
    assert r.h.scheduler.names("node003") == ["drain_node"]  # not drained a second time
    assert r.firing("node003") == ["xid:79"]  # the alert is theirs to resolve (or its window)


def test_a_persons_resolve_returns_the_node_and_is_audited_as_them(
    make_harness: MakeHarness,
) -> None:
    r = _rig(make_harness)
    r.kernel("node003")
    r.h.run(0.4)
    (alert,) = r.alerts("node003")
    assert alert.id is not None

    resolved, changed = resolve_by_person(
        r.h.store, alert.id, "alice", "GPU reseated", r.h.clock.now()
    )
    assert changed and resolved.state is AlertState.RESOLVED
    again, changed = resolve_by_person(r.h.store, alert.id, "alice", None, r.h.clock.now())
    assert not changed and again.state is AlertState.RESOLVED
    r.h.run(0.4)

    assert r.node("node003") == (NodeState.IDLE, None)
    assert r.repair("node003").state is RepairState.CANCELLED
    (event,) = r.events(AuditKind.ALERT_RESOLVED)
    assert event.actor == "alice" and event.payload["why"] == "resolved by alice: GPU reseated"


def test_medics_exclusion_of_a_node_is_taken_off_once_it_is_back_never_the_users(
    make_harness: MakeHarness,
) -> None:
    r = _rig(make_harness)
    h = r.h
    job = h.submit("train", num_nodes=2)
    users = NodeName("node008")
    h.sim.job(job).excluded = frozenset({users})  # the user's own (sbatch --exclude)
    h.run_until(lambda: h.job(job).state is JobState.RUNNING, within=10)
    h.run(3.0)
    bad = h.job(job).nodes[-1]
    h.inject(FaultKind.GPU_FELL_OFF_BUS, job, bad)
    h.run_until(
        lambda: h.job(job).restart_count == 1 and h.job(job).state is JobState.RUNNING, within=20
    )
    assert h.job(job).excluded_nodes == frozenset({bad, users})
    added = [(a.node, a.status) for a in h.actions(job) if a.node is not None]
    assert added == [(bad, ActionStatus.SUCCEEDED)]  # medic's only: never the user's
    assert _cordon_reason(r, bad) is not None

    # the alert clears and the node returns; the running job keeps its exclusion (Slurm changes
    # it only while pending) until its next requeue, which does not carry it into the attempt
    h.run(WINDOW + 2, step=1.0)
    assert r.node(bad) == (NodeState.IDLE, None)
    assert h.job(job).excluded_nodes == frozenset({bad, users})
    h.run(3.0)
    h.inject(FaultKind.HANG, job)
    h.run_until(
        lambda: h.job(job).restart_count == 2 and h.job(job).state is JobState.RUNNING,
        within=120,
        step=1.0,
    )

    assert h.job(job).excluded_nodes == frozenset({users})
    include = [a for a in h.actions(job) if a.kind is ActionKind.INCLUDE_NODES]
    assert [(a.node, a.status) for a in include] == [(bad, ActionStatus.SUCCEEDED)]
    events = h.audit(job, AuditKind.EXCLUSION_RETURNED)
    assert [(e.payload["status"], e.payload["nodes"]) for e in events] == [
        ("started", [bad]),
        ("succeeded", [bad]),
    ]
