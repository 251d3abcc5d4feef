"""Cordons: in act mode, a node with direct evidence of a fault leaves the pool at once.

Each repair pass, after the alerts are read and the repairs moved (:mod:`medic.repair.engine`):

- **cordon** (:func:`~medic.repair.rules.clearing.cordon_nodes`): a node in act mode, in service,
  with direct evidence of a fault firing (:func:`~medic.repair.rules.clearing.is_cordon_alert`) and
  no repair past approval on it is drained with ``medic: cordon alert <id> <key>: <summary>``.
  Slurm's drain lets the running jobs finish: no job is killed. Once per firing episode of that
  alert: the step's ledger key names the alert and the episode, so a person who resumes the
  node by hand while the alert still fires has the last word (the node is not drained again
  until the alert clears and fires anew);
- **return** (:func:`~medic.repair.rules.clearing.cordon_lifts`): a cordoned node on which no such
  alert fires any more (it cleared, its repair resolved it, a person resolved it) is resumed. A
  repair that starts replaces the cordon by its own drain and lifts that when it is done.

Each drain and resume is written to the ledger (``drain_node`` / ``resume_node``, node-scoped)
and audited before and after (``node-cordoned`` / ``node-returned`` with the outcome). A failing
command is logged and tried again at the next pass; it never stops the repair pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.audit import AuditKind
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import Alert
from medic.errors import MedicError
from medic.ports import ActionLedger, Scheduler
from medic.repair.alerts import PassView, repair_event
from medic.repair.rules.clearing import cordon_alert_id, cordon_lifts, cordon_nodes, cordon_reason

__all__ = ["Cordons"]

logger = logging.getLogger(__name__)


class Cordons:
    """Cordons and returns the nodes of one cluster (see the module docstring)."""

    def __init__(self, *, store: ActionLedger, scheduler: Scheduler) -> None:
        self._store = store
        self._scheduler = scheduler
        self._cluster: ClusterName = scheduler.cluster
        self._done: set[str] = set()
        """Ledger keys of cordons known to be taken (saves a store read per pass and node)."""

    def run(self, view: PassView, acting: frozenset[NodeName]) -> None:
        """Cordon what must leave the pool, return what may come back."""
        busy = {r.node for r in view.open_repairs if r.state.is_active}
        for name, alert in cordon_nodes(view.nodes, view.firing, busy, acting).items():
            self._cordon(name, alert, view.now)
        for name in cordon_lifts(view.nodes, view.firing, busy):
            self._return(name, cordon_alert_id(view.nodes[name].reason), view.now)

    def _cordon(self, node: NodeName, alert: Alert, now: datetime) -> None:
        episode = alert.firing_since or alert.first_seen or alert.last_seen
        stamp = episode.isoformat() if episode is not None else "-"
        key = f"cordon/{self._cluster}/{node}/alert{alert.id}/{stamp}"
        existing = None if key in self._done else self._store.get_action(key)
        if key in self._done or (
            existing is not None and existing.status is ActionStatus.SUCCEEDED
        ):
            # Taken in this episode already: the node is back in service because a person
            # resumed it, and that is their call until the alert clears and fires again.
            self._done.add(key)
            return
        reason = cordon_reason(alert)
        payload: dict[str, object] = {"alert_id": alert.id, "key": alert.key, "reason": reason}
        if self._step(
            key,
            ActionKind.DRAIN_NODE,
            node,
            (AuditKind.NODE_CORDONED, payload),
            now,
            lambda: self._scheduler.drain_node(node, reason),
            retry=existing is not None,
        ):
            self._done.add(key)

    def _return(self, node: NodeName, alert_id: int | None, now: datetime) -> None:
        key = f"return/{self._cluster}/{node}/alert{alert_id}/{now.isoformat()}"
        why = f"medic: cordon lifted, alert {alert_id} no longer firing"
        payload: dict[str, object] = {"alert_id": alert_id, "reason": why}
        self._step(
            key,
            ActionKind.RESUME_NODE,
            node,
            (AuditKind.NODE_RETURNED, payload),
            now,
            lambda: self._scheduler.resume_node(node, why),
        )

    def _step(
        self,
        key: str,
        kind: ActionKind,
        node: NodeName,
        audit: tuple[AuditKind, dict[str, object]],
        now: datetime,
        issue: Callable[[], None],
        *,
        retry: bool = False,
    ) -> bool:
        """Ledger and audit before, the command, ledger and audit after; False when it failed
        (logged; tried again at the next pass: a cordon under the same key, ``retry``)."""
        record = ActionRecord(
            key=key,
            cluster=self._cluster,
            kind=kind,
            status=ActionStatus.STARTED,
            job_id=None,
            node=node,
            advice_id=None,
            started_at=now,
        )
        if not retry and not self._store.begin_action(record):
            return True  # another engine took this very step
        event, payload = audit
        self._audit(event, node, {**payload, "ledger_key": key, "status": "started"}, now)
        try:
            issue()
        except MedicError as exc:
            self._store.finish_action(key, ActionStatus.FAILED, now, str(exc))
            failed = {**payload, "ledger_key": key, "status": "failed", "error": str(exc)}
            self._audit(event, node, failed, now)
            logger.warning("%s %s failed, will retry: %s", kind.value, node, exc)
            return False
        self._store.finish_action(key, ActionStatus.SUCCEEDED, now)
        self._audit(event, node, {**payload, "ledger_key": key, "status": "succeeded"}, now)
        return True

    def _audit(
        self, kind: AuditKind, node: NodeName, payload: dict[str, object], now: datetime
    ) -> None:
        self._store.append_audit(repair_event(kind, now, self._cluster, node, dict(payload)))
