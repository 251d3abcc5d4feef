"""Run-time observe/act modes, per cluster and per partition.

=======  ==================================  =====================================================
GET      /api/v1/policy/modes?cluster=       the stored modes, the settings' default and the
                                             resulting cluster mode (viewer, operator)
PUT      /api/v1/policy/modes?cluster=       replace them (operator): ``{"mode": "act"|"observe"|
                                             null, "partitions": {"p0": "observe"}}``
=======  ==================================  =====================================================

The control loop reads them every pass: a job's mode is its comment's ``medic.mode`` if set, else
its partition's stored mode, else the cluster's stored mode, else ``scheduler.mode``. A change is
audited (``mode-changed``, written as the operator, ``user:NAME``: who, the old and the new
modes); a PUT that changes nothing is not.
The cluster defaults to the one this medic watches.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from medic.api.auth import READERS, require
from medic.api.openapi import problems
from medic.api.schemas_auth import (
    ModesIn,
    ModesOut,
)
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import Principal, Role
from medic.domain.ids import ClusterName
from medic.domain.modes import ClusterModes
from medic.services import Services

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["policy"], responses=problems(401, 403, 503))

ClusterQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:@+-]*$"),
]
"""Default: the cluster this medic watches."""


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _cluster(services: Services, cluster: str | None) -> ClusterName:
    return ClusterName(cluster) if cluster else services.cluster


@router.get("/policy/modes", response_model=ModesOut, responses=problems(422))
def get_modes(
    request: Request,
    _: Annotated[Principal, Depends(require(*READERS))],
    cluster: ClusterQuery = None,
) -> ModesOut:
    """The cluster's run-time modes."""
    services = _services(request)
    stored = services.modes.get_modes(_cluster(services, cluster))
    return ModesOut.of(stored, services.settings.scheduler.mode)


@router.put("/policy/modes", response_model=ModesOut, responses=problems(400, 422))
def put_modes(
    request: Request,
    body: ModesIn,
    principal: Annotated[Principal, Depends(require(Role.OPERATOR))],
    cluster: ClusterQuery = None,
) -> ModesOut:
    """Replace the cluster's run-time modes (a partition left out follows the cluster)."""
    services = _services(request)
    name = _cluster(services, cluster)
    new = ClusterModes(cluster=name, mode=body.mode, partitions=dict(body.partitions))
    now = services.clock.now()
    old = services.modes.put_modes(new, now, principal.label)
    if old.to_json() != new.to_json():
        services.store.append_audit(
            AuditEvent(
                time=now,
                actor=principal.label,  # the operator decided, not the engine
                kind=AuditKind.MODE_CHANGED,
                subject_type=SubjectType.CLUSTER,
                subject_id=name,
                cluster=name,
                mode=new.mode,
                payload={"by": principal.label, "old": old.to_json(), "new": new.to_json()},
            )
        )
    return ModesOut.of(new, services.settings.scheduler.mode)
