"""Node health alerts: the intake of ``medic agent`` and bring-your-own detectors.

``POST /api/v1/alerts`` records one finding on one node, deduplicated by (cluster, node, key): a
firing alert is upserted (count + 1 and ``last_seen`` for a repeat; a resolved one fires again)
and answered 201 with the stored alert; ``state: resolved`` resolves the stored alert (200; 404
when there is none). ``GET /api/v1/alerts`` lists them; ``unmapped=true`` gives the alerts no
repair action is mapped to (recorded and listed, never repaired).

The source is ``agent`` for a ``detector`` named ``agent:...``, ``detector`` otherwise; times are
the API's clock, never the caller's. ``mapped_action`` is the lightest repair for the signal
(``medic.repair.rules.lightest.mapped_action``, the same mapping the repair engine applies), stored
so that ``unmapped=true`` lists exactly the alerts no repair will ever come from.

**Who posts**: a detector's token (or an admin's), and only as itself: ``detector`` must be the
token's name or a name under it (``<token name>:<part>``), so one token named ``agent`` serves
every node's ``agent:<node>``, and a token named ``agent:gpu-node-017`` that node only. Anything
else is a 403 ``forbidden`` (audited). Resolving an alert is allowed to whoever raised it (the
stored ``detector`` under the same name). Reading alerts needs a viewer's or operator's token.

``POST /api/v1/alerts/{id}/resolve`` is a person's resolve (an operator's or admin's token): after
fixing a node by hand, or to say a signal is no health problem. It is audited with the person as
the actor and the optional ``reason``; the next pass cancels the repair nobody started for it and
returns a node medic cordoned for it. An alert that is not firing is answered as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from medic.api.auth import READERS, require
from medic.api.openapi import problems
from medic.api.problems import Forbidden
from medic.api.schemas_alerts import AGENT_PREFIX, AlertIn, AlertOut
from medic.domain.auth import Principal, Role
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import Alert, AlertSource, AlertState
from medic.errors import NotFoundError
from medic.ports import RepairStore
from medic.repair.alerts import resolve_by_person
from medic.repair.rules.lightest import mapped_action
from medic.services import Services

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["alerts"], responses=problems(401, 403, 503))


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _existing(store: RepairStore, body: AlertIn) -> Alert | None:
    alerts = store.list_alerts(cluster=ClusterName(body.cluster), node=NodeName(body.node))
    return next((a for a in alerts if a.key == body.key), None)


def _speaks_for(principal: Principal, detector: str) -> bool:
    """True when ``detector`` is the principal's own name or a name under it."""
    return detector == principal.name or detector.startswith(principal.name + ":")


def _check_detector(principal: Principal, detector: str, verb: str) -> None:
    if not _speaks_for(principal, detector):
        raise Forbidden(
            f"{principal.label} may {verb} alerts only as itself ({principal.name} or "
            f"{principal.name}:<part>), not as {detector!r}",
            why=f"detector identity mismatch: {detector!r}",
            principal=principal.name,
            role=principal.role.value,
        )


@router.post(
    "/alerts",
    response_model=AlertOut,
    status_code=201,
    responses={
        200: {"model": AlertOut, "description": "Resolved (``state: resolved``)"},
        **problems(400, 404, 422),
    },
)
def post_alert(
    request: Request,
    response: Response,
    body: AlertIn,
    principal: Annotated[Principal, Depends(require(Role.DETECTOR))],
) -> AlertOut:
    """Record (``firing``) or clear (``resolved``) one alert, as the token's own detector."""
    _check_detector(principal, body.detector, "post")
    services = _services(request)
    store = services.repair_store
    now = services.clock.now()
    if body.state is AlertState.RESOLVED:
        existing = _existing(store, body)
        if existing is None or existing.id is None:
            raise NotFoundError(
                f"no alert {body.key!r} on {body.cluster}/{body.node} to resolve; "
                "list them at /api/v1/alerts"
            )
        if principal.role is not Role.ADMIN:
            _check_detector(principal, existing.detector, "resolve")
        response.status_code = 200
        if existing.state is AlertState.RESOLVED:
            return AlertOut.of(existing)
        return AlertOut.of(store.resolve_alert(existing.id, now))
    source = AlertSource.AGENT if body.detector.startswith(AGENT_PREFIX) else AlertSource.DETECTOR
    alert = Alert(
        cluster=ClusterName(body.cluster),
        node=NodeName(body.node),
        key=body.key,
        source=source,
        summary=body.summary,
        description=body.description,
        severity=body.severity,
        evidence=dict(body.evidence),
        detector=body.detector,
        mapped_action=None,
        xid=body.key_xid,
        state=AlertState.FIRING,
    )
    return AlertOut.of(store.upsert_alert(replace(alert, mapped_action=mapped_action(alert)), now))


class ResolveIn(BaseModel):
    """Why a person resolves the alert (recorded in the audit trail)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    reason: Annotated[str | None, Field(min_length=1, max_length=1000)] = None


@router.post(
    "/alerts/{alert_id}/resolve",
    response_model=AlertOut,
    responses=problems(400, 404, 422),
)
def resolve_alert(
    request: Request,
    alert_id: Annotated[int, Path(ge=1, le=2**31 - 1, description="Alert id")],
    principal: Annotated[Principal, Depends(require(Role.OPERATOR))],
    body: ResolveIn | None = None,
) -> AlertOut:
    """A person resolves a firing alert (audited as them, with the reason)."""
    services = _services(request)
    store = services.repair_store
    reason = body.reason if body else None
    who = f"user:{principal.name}"  # as a person's repair decisions are audited
    alert, _ = resolve_by_person(store, alert_id, who, reason, services.clock.now())
    return AlertOut.of(alert)


@router.get(
    "/alerts",
    response_model=list[AlertOut],
    dependencies=[Depends(require(*READERS))],
    responses=problems(422),
)
def list_alerts(
    request: Request,
    cluster: str | None = None,
    node: str | None = None,
    state: AlertState | None = None,
    unmapped: bool = False,
) -> list[AlertOut]:
    """Alerts matching every filter; ``unmapped=true``: only those without a repair action."""
    store = _services(request).repair_store
    alerts = store.list_alerts(
        cluster=ClusterName(cluster) if cluster else None,
        node=NodeName(node) if node else None,
        state=state,
        unmapped_only=unmapped,
    )
    return [AlertOut.of(a) for a in alerts]
