"""medic's exclusions on a job taken off again once their node is back in service.

When job recovery requeues a job away from a node it writes one ledger row per node it added to
the job's exclusions (``exclude_nodes`` with the node;
:func:`medic.control.exclusion_ledger.note_added`, called by the controller's exclude step); nodes
the job excluded itself are never recorded, so never touched. :class:`ExclusionReturns` runs in each
repair pass:

1. a node that **came back** to the pool since the last pass (it was cordoned, under repair, out
   of service or had a critical alert, and is none of these now) gets an intent row
   (``include_nodes``, started) on every unfinished job medic excluded it from (an exclusion
   medic added after it last took one off);
2. a **pending** job with an intent for a node it still excludes has those nodes taken off
   (Slurm changes ``ExcNodeList`` only while a job is pending: a running job keeps it until its
   next requeue or Slurm's own; the embedded controller takes them off right before it releases
   a job it requeued), audited (``exclusion-returned``), the intents finished.

A pending job with nothing to return is read from the ledger once per attempt, not every pass.
Limit: a node that came back while no medic ran is not seen coming back (a later cordon, repair
or alert and its return are).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from medic.control.exclusion_ledger import medic_exclusions
from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, JobState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.errors import MedicError
from medic.ports import ActionLedger, Scheduler
from medic.repair.alerts import repair_event

__all__ = ["ExclusionReturns"]

logger = logging.getLogger(__name__)


class ExclusionReturns:
    """Takes medic's exclusions off one cluster's jobs (see the module docstring)."""

    def __init__(self, *, store: ActionLedger, scheduler: Scheduler) -> None:
        self._store = store
        self._scheduler = scheduler
        self._cluster: ClusterName = scheduler.cluster
        self._out: frozenset[NodeName] | None = None
        """Nodes out of the pool at the last pass (None before the first)."""
        self._checked: dict[JobId, int] = {}
        """Pending jobs found with nothing to return, with the attempt they were checked in."""

    def run(self, jobs: Sequence[Job], out: frozenset[NodeName], now: datetime) -> int:
        """One pass; ``out``: the nodes out of the pool now. How many exclusions were taken off."""
        back = frozenset() if self._out is None else self._out - out
        self._out = out
        returned = 0
        live: set[JobId] = set()
        for job in jobs:
            if job.state.is_terminal or not job.excluded_nodes:
                continue
            live.add(job.id)
            if back & job.excluded_nodes:
                self._intend(job, back & job.excluded_nodes, now)
                self._checked.pop(job.id, None)
            if job.state is JobState.PENDING and self._checked.get(job.id) != job.restart_count:
                returned += self.carry_out(job, now)
        self._checked = {j: a for j, a in self._checked.items() if j in live}
        return returned

    def _intend(self, job: Job, nodes: frozenset[NodeName], now: datetime) -> None:
        ours = medic_exclusions(self._store.list_actions(cluster=self._cluster, job_id=job.id))
        for node in sorted(nodes & ours.keys()):
            self._store.begin_action(
                ActionRecord(
                    key=f"include/{ours[node].key}",
                    cluster=self._cluster,
                    kind=ActionKind.INCLUDE_NODES,
                    status=ActionStatus.STARTED,
                    job_id=job.id,
                    node=node,
                    advice_id=ours[node].advice_id,
                    started_at=now,
                )
            )

    def carry_out(self, job: Job, now: datetime) -> int:
        """Take off the exclusions due on ``job`` (pending); how many. Also run by the embedded
        controller right before it releases a job it requeued, so a requeue never carries a
        returned node's exclusion into the next attempt."""
        records = self._store.list_actions(cluster=self._cluster, job_id=job.id)
        intents = [
            r
            for r in records
            if r.kind is ActionKind.INCLUDE_NODES and r.status is ActionStatus.STARTED and r.node
        ]
        ours = medic_exclusions(records)
        valid = []
        for r in intents:
            current = ours.get(r.node) if r.node is not None else None
            if r.node in job.excluded_nodes and current and r.key == f"include/{current.key}":
                valid.append(r)
            else:  # someone took it off already, or medic excluded the node again since
                self._store.finish_action(r.key, ActionStatus.SKIPPED, now)
        intents = valid
        if not intents:
            self._checked[job.id] = job.restart_count
            return 0
        nodes = frozenset(r.node for r in intents if r.node is not None)
        payload: dict[str, object] = {"nodes": sorted(nodes), "keys": [r.key for r in intents]}
        self._audit(job, {**payload, "status": "started"}, now)
        try:
            self._scheduler.set_excluded_nodes(job.id, job.excluded_nodes - nodes)
        except MedicError as exc:  # it started meanwhile: at its next requeue
            self._audit(job, {**payload, "status": "failed", "error": str(exc)}, now)
            logger.info("job %s: cannot return %s yet: %s", job.id, sorted(nodes), exc)
            return 0
        for r in intents:
            self._store.finish_action(r.key, ActionStatus.SUCCEEDED, now)
        self._audit(job, {**payload, "status": "succeeded"}, now)
        return len(nodes)

    def _audit(self, job: Job, payload: dict[str, object], now: datetime) -> None:
        event = repair_event(
            AuditKind.EXCLUSION_RETURNED, now, self._cluster, None, dict(payload), job=job.id
        )
        self._store.append_audit(event)
