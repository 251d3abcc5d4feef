"""The advisor API: what a controller outside the medic process needs to carry out advice.

A remote controller (``medic controller`` next to the scheduler) reads the advice feed
(``GET /api/v1/advice?active=true`` in ``routes``), keeps the same idempotent step ledger and audit
trail as the embedded controller through these endpoints, and reports how each generation of
advice went. Every write is idempotent or guarded: a step's key is begun once, a reconciliation
report names the generation it observed, and a report on a superseded generation is refused (409)
so a slow controller can never overwrite the outcome of a newer decision.

Times are stamped here, by the API's clock, never taken from the caller. Writes need a
controller's (or admin's) token, reads also a viewer's or operator's. An audit event is written as
``controller:<token name>``, so a remote caller can never write as the engine or as another
controller; the body's ``actor`` names the part of the controller that writes (``medic-controller``,
the watchdog's ``medic-watchdog``) and is kept in the payload as ``component`` when it is not the
token's name.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response

from medic.api.auth import READERS, require
from medic.api.openapi import problems
from medic.api.schemas import (
    AdviceOut,
    AuditOut,
)
from medic.api.schemas_controller import (
    ActionBeginIn,
    ActionFinishIn,
    ActionRecordOut,
    AuditIn,
    ReconciliationIn,
)
from medic.domain.actions import ActionRecord, ActionStatus
from medic.domain.advice import Advice
from medic.domain.audit import AuditEvent
from medic.domain.auth import Principal, Role
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.domain.leases import Fence
from medic.errors import ConflictError, InputError, NotFoundError
from medic.services import Services

__all__ = ["CONTROLLER_PREFIX", "router"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1", tags=["controller"], responses=problems(401, 403, 503))

CONTROLLER_PREFIX = "controller:"

MAX_ID = 2**31 - 1
AdvicePath = Annotated[int, Path(ge=1, le=MAX_ID, description="Advice id")]
KeyPath = Annotated[str, Path(min_length=1, max_length=256, description="Idempotency key")]
_Controller = Depends(require(Role.CONTROLLER))
_Readers = Depends(require(*READERS, Role.CONTROLLER))


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _advice(services: Services, advice_id: int) -> Advice:
    # Advice ids are 32-bit in the database: a larger one names nothing (and must not reach it).
    advice = None if advice_id > MAX_ID else services.store.get_advice(AdviceId(advice_id))
    if advice is None:
        raise NotFoundError(f"advice {advice_id} does not exist; list it at /api/v1/advice")
    return advice


@router.get(
    "/advice/{advice_id}",
    response_model=AdviceOut,
    dependencies=[_Readers],
    responses=problems(404, 422),
)
def get_advice(request: Request, advice_id: AdvicePath) -> AdviceOut:
    """One advice, as a controller re-reads it before acting or reporting."""
    return AdviceOut.of(_advice(_services(request), advice_id))


@router.put(
    "/advice/{advice_id}/reconciliation",
    response_model=AdviceOut,
    dependencies=[_Controller],
    responses=problems(400, 404, 409, 422),
)
def report_reconciliation(
    request: Request, advice_id: AdvicePath, body: ReconciliationIn
) -> AdviceOut:
    """Record how the observed generation went. The same report twice changes nothing; a report
    on a superseded generation is a 409 whose detail names the current generation."""
    services = _services(request)
    current = _advice(services, advice_id)
    if current.observed_generation == body.observed_generation == current.generation and (
        current.status is body.status
    ):
        return AdviceOut.of(current)  # already recorded: leave updated_at alone
    try:
        stored = services.store.report_reconciliation(
            current.id, body.observed_generation, body.status, body.reason, services.clock.now()
        )
    except ConflictError:
        latest = _advice(services, advice_id)
        raise ConflictError(
            f"advice {advice_id}: generation {body.observed_generation} is superseded; the"
            f" current generation is {latest.generation}: re-read the advice and reconcile it"
        ) from None
    # The store keeps no reason (the controller's audit event carries it): log it at least.
    logger.info(
        "advice %s g%s reported %s: %s",
        advice_id,
        body.observed_generation,
        body.status.value,
        body.reason,
    )
    return AdviceOut.of(stored)


@router.get(
    "/actions/{key:path}",
    response_model=ActionRecordOut,
    dependencies=[_Readers],
    responses=problems(404, 422),
)
def get_action(request: Request, key: KeyPath) -> ActionRecordOut:
    """One step of the ledger by its idempotency key."""
    record = _services(request).store.get_action(key)
    if record is None:
        raise NotFoundError(f"scheduler action {key!r} was never begun")
    return ActionRecordOut.of(record)


@router.post(
    "/actions",
    response_model=ActionRecordOut,
    status_code=201,
    dependencies=[_Controller],
    responses={
        200: {"model": ActionRecordOut, "description": "Begun before: the record holding the key"},
        **problems(400, 404, 409, 422),
    },
)
def begin_action(request: Request, response: Response, body: ActionBeginIn) -> ActionRecordOut:
    """Begin a step under its idempotency key: 201 with the new record, or 200 with the record
    that already holds the key (another run began it; the caller decides from the scheduler).

    Fenced (``fence``): 409 unless that is the lease's holder and token
    and the lease has not run out, checked in the transaction that records the step; a step
    whose last try failed is begun again (201)."""
    services = _services(request)
    if body.advice_id is not None:
        advice = _advice(services, body.advice_id)
        if advice.cluster != body.cluster or body.job_id not in (None, advice.job_id):
            raise InputError(
                "advice_id",
                f"advice {advice.id} is for job {advice.job_id} in {advice.cluster}, not"
                f" {body.job_id} in {body.cluster}",
            )
    record = ActionRecord(
        key=body.key,
        cluster=ClusterName(body.cluster),
        kind=body.kind,
        status=ActionStatus.STARTED,
        job_id=JobId(body.job_id) if body.job_id else None,
        node=NodeName(body.node) if body.node else None,
        advice_id=AdviceId(body.advice_id) if body.advice_id else None,
        started_at=services.clock.now(),
    )
    fence = None if body.fence is None else Fence(**body.fence.model_dump())
    if not services.store.begin_action(record, fence):
        response.status_code = 200
    stored = services.store.get_action(body.key)
    if stored is None:  # begun a moment ago: only a database that lost the write gets here
        raise ConflictError(f"scheduler action {body.key!r} vanished after it was begun")
    return ActionRecordOut.of(stored)


@router.put(
    "/actions/{key:path}",
    response_model=ActionRecordOut,
    dependencies=[_Controller],
    responses=problems(400, 404, 409, 422),
)
def finish_action(request: Request, key: KeyPath, body: ActionFinishIn) -> ActionRecordOut:
    """Record a step's outcome (404 when the key was never begun; with ``begun_by``, 409 when
    that try is no longer the one recorded)."""
    services = _services(request)
    begun_by = None if body.begun_by is None else (body.begun_by.holder, body.begun_by.token)
    services.store.finish_action(key, body.status, services.clock.now(), body.error, begun_by)
    stored = services.store.get_action(key)
    if stored is None:
        raise NotFoundError(f"scheduler action {key!r} was never begun")
    return ActionRecordOut.of(stored)


@router.post("/audit", response_model=AuditOut, status_code=201, responses=problems(400, 422))
def append_audit(
    request: Request,
    body: AuditIn,
    principal: Annotated[Principal, Depends(require(Role.CONTROLLER))],
) -> AuditOut:
    """Append one controller event to the audit trail (append-only, like every other), as
    ``controller:<token name>``."""
    services = _services(request)
    component = body.actor.removeprefix(CONTROLLER_PREFIX)
    payload = dict(body.payload)
    if component != principal.name:
        payload["component"] = component
    event = AuditEvent(
        time=services.clock.now(),
        actor=CONTROLLER_PREFIX + principal.name,
        kind=body.kind,
        subject_type=body.subject_type,
        subject_id=body.subject_id,
        cluster=body.cluster,
        action=body.action,
        mode=body.mode,
        payload=payload,
    )
    event_id = services.store.append_audit(event)
    return AuditOut.of(dataclasses.replace(event, id=event_id))
