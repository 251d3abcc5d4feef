"""Leases over HTTP: how a remote controller (``medic controller``) takes the lease of its
cluster's control work from the same table as the replicas of ``medic serve``.

``PUT /api/v1/leases/{name}`` takes or renews a lease for the body's holder and answers the lease
as it stands (the caller holds it when ``holder`` is its own); ``DELETE`` gives it up; ``GET``
lists them (the console's "who acts" view). Times are the API's clock, like every other write.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from medic.api.auth import READERS, require
from medic.api.openapi import problems
from medic.api.schemas_controller import Holder, LeaseIn, LeaseOut
from medic.domain.auth import Role
from medic.errors import NotFoundError
from medic.services import Services

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["controller"], responses=problems(401, 403, 503))

NamePath = Annotated[
    str, Path(min_length=1, max_length=255, pattern=r"^[\w.:@+/-]+$", description="Lease")
]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


@router.get(
    "/leases",
    response_model=list[LeaseOut],
    dependencies=[Depends(require(*READERS, Role.CONTROLLER))],
)
def list_leases(request: Request) -> list[LeaseOut]:
    """Every lease: who does which control work, and until when."""
    return [LeaseOut.of(lease) for lease in _services(request).store.list_leases()]


@router.put(
    "/leases/{name:path}",
    response_model=LeaseOut,
    dependencies=[Depends(require(Role.CONTROLLER))],
    responses=problems(400, 422),
)
def acquire_lease(request: Request, name: NamePath, body: LeaseIn) -> LeaseOut:
    """Take or renew ``name`` for ``body.holder``: the lease afterwards (another live holder's,
    unchanged, when it is not free)."""
    services = _services(request)
    lease = services.store.acquire_lease(name, body.holder, services.clock.now(), body.ttl_seconds)
    return LeaseOut.of(lease)


@router.delete(
    "/leases/{name:path}",
    status_code=204,
    dependencies=[Depends(require(Role.CONTROLLER))],
    responses=problems(404, 422),
)
def release_lease(request: Request, name: NamePath, holder: Annotated[Holder, Query()]) -> Response:
    """Let ``holder``'s lease run out now (404 when ``holder`` does not hold it)."""
    services = _services(request)
    if not services.store.release_lease(name, holder, services.clock.now()):
        raise NotFoundError(f"{holder} holds no live lease {name!r}")
    return Response(status_code=204)
