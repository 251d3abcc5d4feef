"""medic's own exclusions in the ledger: what the controller added to a job, per node.

The controller's exclude step records one ledger row (``exclude_nodes`` with the node) for each
node it added to a job's exclusions, never for a node the job excluded itself; node repair
(:mod:`medic.repair.exclusions`) reads them back and takes off, once their node is back in
service, only these (``include_nodes`` rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from medic.domain.actions import ActionKind, ActionRecord, ActionStatus, idempotency_key
from medic.domain.advice import Advice
from medic.domain.ids import NodeName
from medic.ports import ControllerLedger

__all__ = ["medic_exclusions", "note_added"]


def note_added(
    ledger: ControllerLedger, advice: Advice, nodes: frozenset[NodeName], now: datetime
) -> None:
    """Record, one ledger row per node, the exclusions ``advice`` added to its job (those the
    job did not have already): only these are ever taken off again."""
    for node in sorted(nodes):
        key = idempotency_key(advice.id, advice.generation, ActionKind.EXCLUDE_NODES, node)
        added = ActionRecord(
            key=key,
            cluster=advice.cluster,
            kind=ActionKind.EXCLUDE_NODES,
            status=ActionStatus.STARTED,
            job_id=advice.job_id,
            node=node,
            advice_id=advice.id,
            started_at=now,
        )
        if ledger.begin_action(added):
            ledger.finish_action(key, ActionStatus.SUCCEEDED, now)


def medic_exclusions(records: Iterable[ActionRecord]) -> dict[NodeName, ActionRecord]:
    """The exclusions medic added and has not taken off, by node, from one job's ledger rows."""
    added: dict[NodeName, ActionRecord] = {}
    taken: dict[NodeName, datetime] = {}
    for r in records:
        if r.node is None or r.status is not ActionStatus.SUCCEEDED:
            continue
        if r.kind is ActionKind.EXCLUDE_NODES:
            if r.node not in added or added[r.node].started_at <= r.started_at:
                added[r.node] = r
        elif r.kind is ActionKind.INCLUDE_NODES:
            taken[r.node] = max(taken.get(r.node, r.started_at), r.started_at)
    return {n: r for n, r in added.items() if n not in taken or taken[n] < r.started_at}
