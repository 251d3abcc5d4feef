"""The repair API: bring-your-own-detector and people's repair requests, decisions on repairs, the
repair policy and the circuit breaker.

=======  ==================================  =====================================================
POST     /api/v1/repairs                     ask for one repair of one node: 201 with the new
                                             repair, 200 with the existing one for a repeated
                                             (requested_by, request_id); ``Location`` either way
GET      /api/v1/repairs                     ``?cluster=&node=&state=`` (state repeatable)
GET      /api/v1/repairs/{id}                one repair with its validation results
POST     /api/v1/repairs/{id}/approve        a person approves (optionally another ``action``)
POST     /api/v1/repairs/{id}/reject         a person rejects a pending repair
POST     /api/v1/repairs/{id}/cancel         a person cancels, until the repair executes
PUT      /api/v1/repairs/{id}/action         a person changes a pending repair's action
GET/PUT  /api/v1/policy/repair?cluster=      the cluster's repair policy (PUT: validated, whole)
GET      /api/v1/breaker?cluster=            the cluster's circuit breaker
POST     /api/v1/breaker/reset               a person closes a tripped breaker (audited)
=======  ==================================  =====================================================

The rules live in :mod:`medic.repair.intake`; this module maps HTTP onto it. Errors are medic
errors turned into problem+json by ``medic.api.problems``: a guardrail (budget, detector cap,
cooldown, breaker) is ``SafetyBudgetExceeded`` (409 ``budget_exceeded``), an open repair on the
node a ``ConflictError`` (409), a detector acting as a person ``PolicyViolation`` (403
``policy_violation``), a request without a firing alert as evidence and a malformed body 422.
Times are the API's clock, never the caller's.

**Who acts** is the request's principal (``medic.api.auth``): a detector's token acts as
``detector:<token name>``, a person's (operator, admin) as ``user:<token name>``. Requests need a
detector's, operator's or admin's token (a person's request waits for approval like before);
decisions and the breaker reset an operator's, the repair policy an admin's, reads a viewer's.
A detector's request is approved automatically only when the repair policy trusts its token's
name (``trusted_detectors``); otherwise it waits for a person (``medic.repair.rules.approval``).
The body's ``requested_by``/``requester_kind`` (a request) and ``actor``/``actor_kind`` (a
decision) are optional; when given they must name the principal (a bare name takes the
principal's kind), else 403 ``forbidden``, audited as ``access-denied``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from medic.api.auth import READERS, require
from medic.api.openapi import problems
from medic.api.problems import Forbidden
from medic.api.schemas_repairs import (
    ActionChangeIn,
    ApproveIn,
    BreakerOut,
    BreakerResetIn,
    DecisionIn,
    RepairDetailOut,
    RepairIn,
    RepairOut,
    RepairPolicyIn,
    RepairPolicyOut,
)
from medic.domain.auth import Principal, Role
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Repair,
    RepairRequest,
    RepairState,
    RequestChannel,
    RequesterKind,
)
from medic.errors import InputError, NotFoundError, PolicyViolation
from medic.repair.actors import Actor, EvidenceRequired
from medic.repair.decisions import (
    approve_repair,
    cancel_repair,
    change_action,
    reject_repair,
)
from medic.repair.intake import submit_repair
from medic.repair.intake_common import IntakeStore, node_pools
from medic.repair.policy_changes import put_policy, reset_breaker
from medic.services import Services

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["repairs"], responses=problems(401, 403, 503))

RepairPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="Repair id")]
"""Repair ids are 32-bit in the database: a larger one can name no repair (422, not a 503)."""
_Readers = Depends(require(*READERS))
Requester = Annotated[Principal, Depends(require(Role.DETECTOR, Role.OPERATOR))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]
ClusterQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:@+-]*$"),
]
"""A cluster to write to (default: the one this medic watches); it must fit the database."""


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _actor(principal: Principal, name: str | None, kind: str | None) -> Actor:
    """The principal as an :class:`Actor`, after checking the body's optional claim of who acts
    (``name``, ``kind``) against it: any other identity is a 403."""
    own = RequesterKind.DETECTOR if principal.role is Role.DETECTOR else RequesterKind.USER
    actor = Actor.parse(principal.name, own)
    claimed: Actor | None = actor
    if kind is not None and RequesterKind(kind) is not own:
        claimed = None
    elif name is not None:
        try:
            claimed = Actor.parse(name, own)
        except (InputError, PolicyViolation):
            claimed = None  # malformed, reserved or of the other kind: not the principal
    if claimed != actor:
        said = ":".join(part for part in (kind, name) if part)
        raise Forbidden(
            f"you act as {actor} (your token); the body names {said!r}: a request acts only "
            "as its own token's identity",
            why=f"identity mismatch: body names {said!r}",
            principal=principal.name,
            role=principal.role.value,
        )
    return actor


def _cluster(services: Services, cluster: str | None) -> ClusterName:
    return ClusterName(cluster) if cluster else services.cluster


def _location(response: Response, repair_id: int) -> None:
    response.headers["Location"] = f"/api/v1/repairs/{repair_id}"


# --- repairs -------------------------------------------------------------------------------------
@router.post(
    "/repairs",
    response_model=RepairOut,
    status_code=201,
    responses={
        200: {"model": RepairOut, "description": "A repeated request: the repair it made first"},
        **problems(400, 409, 422),
    },
)
def post_repair(
    request: Request, response: Response, body: RepairIn, principal: Requester
) -> RepairOut:
    """Ask for one repair of one node (see :func:`medic.repair.intake.submit_repair`)."""
    actor = _actor(principal, body.requested_by, body.requester_kind)
    services = _services(request)
    store = services.repair_store
    cluster = ClusterName(body.cluster)
    nodes = services.store.list_nodes(cluster)
    if not nodes:
        raise InputError("cluster", f"medic knows no node of cluster {cluster!r}")
    if not any(n.name == body.node for n in nodes):
        raise InputError("node", f"{body.node!r} is not a node of cluster {cluster}")
    evidence = dict(body.evidence)
    if body.check is not None:
        evidence["check"] = body.check
    if body.severity is not None:
        evidence["severity"] = body.severity.value
    repair_request = RepairRequest(
        cluster=cluster,
        node=NodeName(body.node),
        action=body.action,
        requested_by=actor.name,
        requester_kind=actor.kind,
        reason=body.reason,
        alert_keys=tuple(dict.fromkeys(body.alert_keys)),
        request_id=body.request_id,
        xid=body.xid,
        evidence=evidence,
        channel=RequestChannel.API,  # the requester is the token's principal: authenticated
    )
    try:
        repair, created, _ = submit_repair(
            store,
            repair_request,
            services.clock.now(),
            cluster_nodes=len(nodes),
            node_pools=node_pools(nodes),
        )
    except EvidenceRequired as exc:
        raise InputError("alert_keys", exc.reason) from exc
    response.status_code = 201 if created else 200
    _location(response, repair.id)
    return _counted(services, repair, None if created else repair)


def _decided(
    services: Services, repair_id: int, decide: Callable[[IntakeStore, datetime], Repair]
) -> RepairOut:
    """A person's decision on ``repair_id``, its answer counted like a request's."""
    store = services.repair_store
    before = store.get_repair(repair_id)
    return _counted(services, decide(store, services.clock.now()), before)


def _counted(services: Services, repair: Repair, before: Repair | None) -> RepairOut:
    """The answer; a repair that entered a new state is counted in ``medic_repairs_total`` as
    the engine's own moves are (a repeated decision changes nothing and is not counted)."""
    if before is None or before.state is not repair.state or before.action is not repair.action:
        services.metrics.repair_state(repair.cluster, repair.action.value, repair.state.value)
    return RepairOut.of(repair)


@router.get(
    "/repairs", response_model=list[RepairOut], dependencies=[_Readers], responses=problems(422)
)
def list_repairs(
    request: Request,
    cluster: str | None = None,
    node: str | None = None,
    state: Annotated[list[RepairState] | None, Query()] = None,
) -> list[RepairOut]:
    """Repairs matching every filter, oldest first."""
    store = _services(request).repair_store
    repairs = store.list_repairs(
        cluster=ClusterName(cluster) if cluster else None,
        node=NodeName(node) if node else None,
        states=frozenset(state) if state else None,
    )
    return [RepairOut.of(r) for r in repairs]


@router.get(
    "/repairs/{repair_id}",
    response_model=RepairDetailOut,
    dependencies=[_Readers],
    responses=problems(404, 422),
)
def get_repair(request: Request, repair_id: RepairPath) -> RepairDetailOut:
    """One repair with its validation results."""
    store = _services(request).repair_store
    repair = store.get_repair(repair_id)
    if repair is None:
        raise NotFoundError(f"repair {repair_id} does not exist; list them at /api/v1/repairs")
    return RepairDetailOut.with_validations(repair, store.list_validations(repair_id))


@router.post(
    "/repairs/{repair_id}/approve", response_model=RepairOut, responses=problems(400, 404, 409, 422)
)
def approve(
    request: Request, repair_id: RepairPath, principal: Operator, body: ApproveIn | None = None
) -> RepairOut:
    """A person approves a pending repair, optionally with another action."""
    services = _services(request)
    body = body or ApproveIn()
    actor = _actor(principal, body.actor, body.actor_kind)
    return _decided(
        services,
        repair_id,
        lambda store, now: approve_repair(
            store, repair_id, actor, now, body.action, reason=body.reason
        ),
    )


@router.post(
    "/repairs/{repair_id}/reject", response_model=RepairOut, responses=problems(400, 404, 409, 422)
)
def reject(
    request: Request, repair_id: RepairPath, principal: Operator, body: DecisionIn | None = None
) -> RepairOut:
    """A person rejects a pending repair."""
    services = _services(request)
    body = body or DecisionIn()
    actor = _actor(principal, body.actor, body.actor_kind)
    return _decided(
        services,
        repair_id,
        lambda store, now: reject_repair(store, repair_id, actor, now, reason=body.reason),
    )


@router.post(
    "/repairs/{repair_id}/cancel", response_model=RepairOut, responses=problems(400, 404, 409, 422)
)
def cancel(
    request: Request, repair_id: RepairPath, principal: Operator, body: DecisionIn | None = None
) -> RepairOut:
    """A person cancels a repair that has not started executing."""
    services = _services(request)
    body = body or DecisionIn()
    actor = _actor(principal, body.actor, body.actor_kind)
    return _decided(
        services,
        repair_id,
        lambda store, now: cancel_repair(store, repair_id, actor, now, reason=body.reason),
    )


@router.put(
    "/repairs/{repair_id}/action", response_model=RepairOut, responses=problems(400, 404, 409, 422)
)
def put_action(
    request: Request, repair_id: RepairPath, body: ActionChangeIn, principal: Operator
) -> RepairOut:
    """A person changes the action of a pending repair without approving it."""
    services = _services(request)
    actor = _actor(principal, body.actor, body.actor_kind)
    return _decided(
        services,
        repair_id,
        lambda store, now: change_action(
            store, repair_id, actor, body.action, now, reason=body.reason
        ),
    )


# --- policy and breaker --------------------------------------------------------------------------
@router.get("/policy/repair", response_model=RepairPolicyOut, dependencies=[_Readers])
def get_policy(request: Request, cluster: str | None = None) -> RepairPolicyOut:
    """The cluster's repair policy (the defaults when none was stored)."""
    services = _services(request)
    name = _cluster(services, cluster)
    return RepairPolicyOut.of(name, services.repair_store.get_repair_policy(name))


@router.put("/policy/repair", response_model=RepairPolicyOut, responses=problems(400, 422))
def put_policy_route(
    request: Request, body: RepairPolicyIn, principal: Admin, cluster: ClusterQuery = None
) -> RepairPolicyOut:
    """Replace the cluster's repair policy (a field left out takes its default)."""
    services = _services(request)
    name = _cluster(services, cluster)
    actor = _actor(principal, body.actor, body.actor_kind)
    stored = put_policy(services.repair_store, name, body.to_policy(), actor, services.clock.now())
    return RepairPolicyOut.of(name, stored)


@router.get("/breaker", response_model=BreakerOut, dependencies=[_Readers])
def get_breaker(request: Request, cluster: str | None = None) -> BreakerOut:
    """The cluster's circuit breaker."""
    services = _services(request)
    return BreakerOut.of(services.repair_store.get_breaker(_cluster(services, cluster)))


@router.post("/breaker/reset", response_model=BreakerOut, responses=problems(400, 422))
def post_breaker_reset(
    request: Request, principal: Operator, body: BreakerResetIn | None = None
) -> BreakerOut:
    """A person closes a tripped breaker (a closed one is returned unchanged)."""
    services = _services(request)
    body = body or BreakerResetIn()
    actor = _actor(principal, body.actor, body.actor_kind)
    breaker, _ = reset_breaker(
        services.repair_store,
        _cluster(services, body.cluster),
        actor,
        services.clock.now(),
        reason=body.reason,
    )
    return BreakerOut.of(breaker)
