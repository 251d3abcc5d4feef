"""What repair intake and people's decisions share: the store they need, how they audit, lookups.

:mod:`medic.repair.intake` (requests) and :mod:`medic.repair.decisions` and
:mod:`medic.repair.policy_changes` (people's decisions) write their audit events through
:func:`audit_event`: a request's as ``medic-engine`` (the intake decides whether and how it is
admitted; who asked is in the payload), a person's decision as that person (``user:NAME``, also
in the payload's ``by``), so the audit trail's actor is whoever decided. :func:`seen_recently`
keeps a request the engine re-reads every pass (a Slurm drain reason) from being audited every
pass. The repair API sizes the concurrency budget with :func:`node_pools`, as the engine does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import Node
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import Repair, RepairAction
from medic.errors import NotFoundError
from medic.ports import AuditQuery, RepairStore

__all__ = [
    "ENGINE_ACTOR",
    "HOUR",
    "IntakeStore",
    "audit_event",
    "detector_alert_key",
    "get_repair",
    "node_pools",
    "seen_recently",
]

ENGINE_ACTOR = "medic-engine"
HOUR = timedelta(hours=1)
_KEY_UNSAFE = re.compile(r"[^a-z0-9_.:-]+")


class IntakeStore(RepairStore, AuditQuery, Protocol):
    """What intake needs: the repair store and the audit trail (``SqlStore`` is both)."""

    def append_audit(self, event: AuditEvent) -> int: ...


def node_pools(nodes: Iterable[Node]) -> dict[NodeName, str]:
    """Each node's pool for the concurrency budget: its first partition (nodes without one have
    no pool limit). The engine uses the same, so the API and the engine count alike."""
    return {n.name: n.partitions[0] for n in nodes if n.partitions}


def detector_alert_key(detector: str, check: str) -> str:
    """``detector:<name>:<check>`` in the alert-key alphabet (lowercase, ``[a-z0-9_.:-]``)."""
    slug = _KEY_UNSAFE.sub("_", f"detector:{detector}:{check}".lower())
    return slug[:128]


def audit_event(
    kind: AuditKind,
    now: datetime,
    cluster: ClusterName,
    node: NodeName | None,
    payload: dict[str, Any],
    action: RepairAction | None = None,
    *,
    actor: str = ENGINE_ACTOR,
) -> AuditEvent:
    """An intake audit record: subject the node (the cluster without one), written as ``actor``
    (``medic-engine`` for the intake's own decisions, ``user:NAME`` for a person's)."""
    return AuditEvent(
        time=now,
        actor=actor,
        kind=kind,
        subject_type=SubjectType.NODE if node is not None else SubjectType.CLUSTER,
        subject_id=node if node is not None else cluster,
        cluster=cluster,
        action=action.value if action is not None else None,
        payload=payload,
    )


def seen_recently(
    store: IntakeStore,
    event: AuditEvent,
    window: timedelta | None,
    same: Sequence[str],
) -> bool:
    """True when an event of the same kind and subject with the same ``same`` payload fields was
    written within ``window`` (None: never deduplicate)."""
    if window is None:
        return False
    earlier = store.query_audit(
        cluster=ClusterName(event.cluster) if event.cluster else None,
        subject_type=event.subject_type.value,
        subject_id=event.subject_id,
        kind=event.kind,
        since=event.time - window,
        limit=1000,
    )
    return any(all(e.payload.get(f) == event.payload.get(f) for f in same) for e in earlier)


def get_repair(store: RepairStore, repair_id: int) -> Repair:
    """The repair ``repair_id``; ``NotFoundError`` when there is none."""
    repair = store.get_repair(repair_id)
    if repair is None:
        raise NotFoundError(f"repair {repair_id} does not exist; list them at /api/v1/repairs")
    return repair
