"""Node health alerts for the repair engine, and what its modules share (store, metrics, audit).

:class:`AlertSources` turns what a loop pass read into stored alerts, each audited
(``alert-firing`` / ``alert-resolved``) and counted once when it starts firing (mapped or not):

- a catalogue signature on a node: a kernel line, or a job-log line that implicates its node
  (progress and noise lines never) -> :func:`~medic.repair.rules.lightest.alert_from_detection`,
  with the signature's ``node_action`` (the detection's field, else the catalogue's);
- the scheduler's node state: DOWN, NOT_RESPONDING, or drained by someone else -> ``slurm:*``
  alerts, observed and never overridden, resolved when the state clears; a node medic is
  restarting (executing, rejoining, validating) raises none;
- alerts others stored (the node agent, detectors, through the API) are noticed when they start
  firing (those that fired before this engine started are not announced again);
- an alert raised from a log line clears once its signal has been absent for its clear window
  (:mod:`medic.repair.rules.clearing`), audited with the window.

:func:`submit_drain_requests` hands repair requests written in Slurm drain reasons or node
comments (``medic-request:``) to :func:`medic.repair.intake.submit_repair`. Shared by the
repair modules: :class:`RepairStores`, :class:`RepairMetrics`, :class:`PassView`,
:func:`repair_event`.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Job, Node, NodeState, is_medic_reason
from medic.domain.diagnosis import Detection, Role, Severity
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    AlertState,
    Repair,
    RepairPolicy,
    RepairRequest,
    RepairState,
)
from medic.errors import InputError, MedicError, NotFoundError
from medic.ports import RepairStore, Store
from medic.repair import intake
from medic.repair.intake_common import IntakeStore
from medic.repair.rules.clearing import ClearWindows, expired
from medic.repair.rules.lightest import (
    SLURM_DOWN,
    SLURM_DRAIN,
    SLURM_NOT_RESPONDING,
    alert_from_detection,
    effective_action,
    mapped_action,
)

__all__ = [
    "ENGINE",
    "AlertSources",
    "NullRepairMetrics",
    "PassView",
    "RepairMetrics",
    "RepairStores",
    "repair_event",
    "resolve_by_person",
    "scheduler_alert",
    "submit_drain_requests",
]

ENGINE = "medic-engine"
_BUSY = frozenset({RepairState.EXECUTING, RepairState.REJOINING, RepairState.VALIDATING})
_IGNORED_ROLES = frozenset({Role.PROGRESS, Role.NOISE})
AlertIndex = dict[tuple[NodeName, str], Alert]
DrainRequests = Callable[[Node, ClusterName], RepairRequest | None]
"""Parses a node's drain reason or comment into a repair request (``medic-request:``, Slurm)."""
_DEDUPE = timedelta(hours=1)


class RepairStores(Store, RepairStore, Protocol):
    """The store the repair engine needs: repairs and alerts, audit, attempts (``SqlStore``)."""


class RepairMetrics(Protocol):
    """Where the repair engine reports (``PrometheusMetrics`` implements it)."""

    def alert_fired(self, cluster: ClusterName, key: str, mapped: bool) -> None: ...

    def repair_state(self, cluster: ClusterName, action: str, state: str) -> None: ...

    def recommendation_latency(self, seconds: float) -> None: ...


class NullRepairMetrics:
    def alert_fired(self, cluster: ClusterName, key: str, mapped: bool) -> None:
        """Ignore an alert."""

    def repair_state(self, cluster: ClusterName, action: str, state: str) -> None:
        """Ignore a repair state."""

    def recommendation_latency(self, seconds: float) -> None:
        """Ignore a latency."""


def repair_event(
    kind: AuditKind,
    now: datetime,
    cluster: ClusterName,
    node: NodeName | None,
    payload: dict[str, Any],
    action: str | None = None,
    job: JobId | None = None,
) -> AuditEvent:
    """A repair audit record: subject the node (the job for an interrupted job, the cluster
    without a node)."""
    subject, subject_id = (SubjectType.NODE, str(node)) if node else (SubjectType.CLUSTER, cluster)
    if job is not None:
        subject, subject_id = SubjectType.JOB, job
    return AuditEvent(
        time=now,
        actor=ENGINE,
        kind=kind,
        subject_type=subject,
        subject_id=subject_id,
        cluster=cluster,
        action=action,
        payload=payload,
    )


@dataclass(slots=True)
class PassView:
    """What one pass knows of the cluster; ``open_repairs`` is kept current as repairs move."""

    now: datetime
    policy: RepairPolicy
    nodes: Mapping[NodeName, Node]
    jobs: Sequence[Job]
    firing: Mapping[NodeName, list[Alert]]
    open_repairs: list[Repair]
    cluster_nodes: int
    pools: Mapping[NodeName, str]
    exclusions: frozenset[NodeName] = frozenset()
    validation_failed: frozenset[NodeName] = frozenset()
    moved: list[Repair] = field(default_factory=list)


class AlertSources:
    """Records the alerts of one cluster (see the module docstring)."""

    def __init__(
        self,
        store: IntakeStore,
        cluster: ClusterName,
        metrics: RepairMetrics,
        node_actions: Mapping[str, str],
        windows: ClearWindows | None = None,
    ) -> None:
        self._store = store
        self._cluster = cluster
        self._metrics = metrics
        self._node_actions = node_actions
        self._windows = windows or ClearWindows(default=0.0, critical=0.0)
        self._known: set[tuple[NodeName, str]] | None = None
        """Alerts seen firing (None until the first pass primed it from the store)."""
        self.fired_at: dict[tuple[NodeName, str], datetime] = {}
        """When this engine saw each alert start firing (alert -> recommendation latency)."""
        self._expected: set[NodeName] = set()
        """Nodes :meth:`observe` last found wanting a scheduler alert."""
        self._busy_before: set[NodeName] = set()
        """Nodes a repair held at the previous :meth:`observe`."""
        self._examine_all = True
        """The next :meth:`observe` examines every node (the first, and after one failed)."""

    def _fire(self, alert: Alert, alerts: AlertIndex, now: datetime) -> int:
        """Record a firing alert; 1 when it was not firing before (audited, counted)."""
        key = (alert.node, alert.key)
        before = alerts.get(key)
        alerts[key] = self._store.upsert_alert(alert, now)
        if before is not None and before.state is AlertState.FIRING:
            return 0
        self._announce(alerts[key], now)
        return 1

    def _announce(self, alert: Alert, now: datetime, fired_at: datetime | None = None) -> None:
        key = (alert.node, alert.key)
        if self._known is not None:
            self._known.add(key)
        self.fired_at[key] = fired_at or now
        action = effective_action(alert)
        self._metrics.alert_fired(self._cluster, alert.key, action is not None)
        payload: dict[str, Any] = {"key": alert.key, "source": alert.source.value}
        payload |= {"severity": alert.severity.value, "summary": alert.summary}
        payload |= {"mapped_action": action.value if action else None, "count": alert.count}
        payload |= {"detector": alert.detector, "evidence": alert.evidence}
        event = repair_event(AuditKind.ALERT_FIRING, now, self._cluster, alert.node, payload)
        self._store.append_audit(event)

    def _resolve(self, alert: Alert, now: datetime, why: str) -> Alert:
        assert alert.id is not None
        done = self._store.resolve_alert(alert.id, now)
        payload = {"key": alert.key, "source": alert.source.value, "why": why}
        event = repair_event(AuditKind.ALERT_RESOLVED, now, self._cluster, alert.node, payload)
        self._store.append_audit(event)
        return done

    def ingest(
        self,
        detections: Sequence[Detection],
        alerts: AlertIndex,
        now: datetime,
    ) -> int:
        found: dict[tuple[NodeName, str], Alert] = {}
        for d in detections:
            if d.node is None or d.role in _IGNORED_ROLES:
                continue
            if d.job_id is not None and not d.implicates_node:
                continue  # a job's own trouble, not its node's
            action = d.fields.get("node_action") or self._node_actions.get(d.signature_id)
            try:
                alert = alert_from_detection(d, action, now, cluster=self._cluster)
            except InputError:
                continue
            found.setdefault((alert.node, alert.key), alert)
        return sum(self._fire(a, alerts, now) for a in found.values())

    def observe(
        self,
        nodes: Sequence[Node],
        alerts: AlertIndex,
        repairs: Iterable[Repair],
        now: datetime,
        changed: frozenset[NodeName] | None = None,
    ) -> tuple[int, int]:
        """The scheduler's node states as ``slurm:*`` alerts (fired and resolved).

        ``changed``: the nodes whose scheduler state changed since the previous pass (None: all
        of them). Only those are examined, with every node that has or should have a scheduler
        alert and every node a repair holds or held last pass: any other node had nothing to
        fire or resolve last pass and still has not. A pass costs what changed."""
        busy = {r.node for r in repairs if r.state in _BUSY}
        current: dict[NodeName, list[Alert]] = defaultdict(list)
        for a in alerts.values():
            if a.source is AlertSource.SCHEDULER and a.state is AlertState.FIRING:
                current[a.node].append(a)
        examine = None
        if changed is not None and not self._examine_all:
            examine = changed | current.keys() | busy | self._busy_before | self._expected
        fired = resolved = 0
        self._examine_all = True  # until this pass is through: a failure must not hide a node
        for node in nodes:
            name = node.name
            if examine is not None and name not in examine:
                continue
            wanted = None if name in busy else scheduler_alert(node, self._cluster, now)
            present = current.get(name, [])
            if wanted is not None and wanted.key not in {a.key for a in present}:
                fired += self._fire(wanted, alerts, now)
            for a in present:
                if wanted is None or a.key != wanted.key:
                    alerts[(a.node, a.key)] = self._resolve(a, now, f"node is {node.state.value}")
                    resolved += 1
            if wanted is None:
                self._expected.discard(name)
            else:
                self._expected.add(name)
        self._busy_before = busy
        self._examine_all = False
        return fired, resolved

    def expire(self, alerts: AlertIndex, repairs: Iterable[Repair], now: datetime) -> int:
        """Resolve the alerts whose signal has been absent for their clear window
        (:func:`~medic.repair.rules.clearing.expired`); how many."""
        gone = expired(list(alerts.values()), self._windows, repairs, now)
        for alert, window in gone:
            why = f"no new {alert.key} signal for {window:g} s (its clear window)"
            alerts[(alert.node, alert.key)] = self._resolve(alert, now, why)
        return len(gone)

    def notice(self, alerts: AlertIndex, now: datetime) -> int:
        """Firing alerts others stored (agent, detectors) seen for the first time."""
        firing = {k for k, a in alerts.items() if a.state is AlertState.FIRING}
        if self._known is None:
            self._known = set(firing)  # first pass: what fired before this engine started
            return 0
        new = firing - self._known
        self._known = firing
        for key in sorted(new):
            self._announce(alerts[key], now, alerts[key].last_seen)
        return len(new)


def resolve_by_person(
    store: RepairStores, alert_id: int, who: str, reason: str | None, now: datetime
) -> tuple[Alert, bool]:
    """A person resolves an alert (console, CLI, API): after fixing a node by hand, or to say a
    signal is no health problem. Audited with the person as the actor; the next pass cancels
    the repair nobody started for it and returns a cordoned node. A signal seen again fires
    again. Returns the alert and whether it was firing (False: nothing changed, nothing audited).
    Raises ``NotFoundError`` for an unknown id."""
    alert = store.get_alert(alert_id)
    if alert is None:
        raise NotFoundError(f"alert {alert_id} does not exist; list them at /api/v1/alerts")
    if alert.state is not AlertState.FIRING:
        return alert, False
    done = store.resolve_alert(alert_id, now)
    why = f"resolved by {who}" + (f": {reason}" if reason else "")
    payload = {"key": alert.key, "source": alert.source.value, "why": why, "alert_id": alert_id}
    event = repair_event(AuditKind.ALERT_RESOLVED, now, alert.cluster, alert.node, payload)
    store.append_audit(replace(event, actor=who))
    return done, True


def scheduler_alert(node: Node, cluster: ClusterName, now: datetime) -> Alert | None:
    """The alert the scheduler's view of ``node`` stands for (None: in service, or medic's)."""
    reason = node.reason or ""
    ours = is_medic_reason(reason)
    evidence: dict[str, Any] = {"state": node.state.value, "reason": reason}
    if node.state is NodeState.DOWN:
        unreachable = ours or "not responding" in reason.lower()
        key = SLURM_NOT_RESPONDING if unreachable else SLURM_DOWN
        evidence["reachable"] = not unreachable
        severity, summary = Severity.ERROR, f"node {node.state.value}: {reason or 'no reason'}"
    elif node.state in (NodeState.DRAINED, NodeState.DRAINING) and not ours:
        key, severity, summary = SLURM_DRAIN, Severity.WARNING, f"drained: {reason or '-'}"
    else:
        return None
    alert = Alert(
        cluster=cluster,
        node=node.name,
        key=key,
        source=AlertSource.SCHEDULER,
        summary=summary,
        description=f"the scheduler reports {node.name} {node.state.value} ({reason or '-'})",
        severity=severity,
        evidence=evidence,
        detector="scheduler",
        first_seen=now,
        last_seen=now,
    )
    return replace(alert, mapped_action=mapped_action(alert))


def _answered(store: RepairStores, request: RepairRequest) -> bool:
    """The request names a repair that has ended: a node comment left in place after its repair
    is that same request, not a new one, and is not audited again every hour."""
    if not request.request_id:
        return False
    found = store.find_repair(request.cluster, request.requested_by, request.request_id)
    return found is not None and found.state.is_terminal


def submit_drain_requests(
    store: RepairStores,
    parse: DrainRequests,
    cluster: ClusterName,
    nodes: Sequence[Node],
    view: PassView,
) -> None:
    """Repair requests in Slurm drain reasons and node comments (``medic-request:``), through
    intake."""
    busy = {r.node for r in view.open_repairs}
    for node in nodes:
        if node.name in busy:
            continue
        try:
            request = parse(node, cluster)
        except InputError as exc:
            intake.record_invalid_request(store, cluster, node.name, exc, view.now)
            continue
        if request is None or _answered(store, request):
            continue
        with contextlib.suppress(MedicError):  # a refusal is audited by intake
            intake.submit_repair(
                store,
                request,
                view.now,
                cluster_nodes=view.cluster_nodes,
                node_pools=view.pools,
                dedupe_window=_DEDUPE,
            )
