"""Read routes of API v1: jobs, job timelines, nodes, advice and the audit trail.

Thin handlers over the store port; every value is converted to an API schema on the way out.
Every route needs a viewer's (or operator's, or admin's) token; the advice feed also a
controller's. The audit trail pages oldest first (default) or newest first (``order=desc``), as
JSON (default) or CSV (``format=csv``: a header row, then one row per event, the payload as JSON;
the next page's cursor in the ``X-Next-After-Id`` header, newest first ``X-Next-Before-Id``). A
cell that a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, tab or
carriage return) is prefixed with ``'``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BeforeValidator

from medic.api.auth import READERS, require
from medic.api.openapi import problems
from medic.api.schemas import (
    ActionOut,
    AdviceOut,
    AttemptOut,
    AuditOut,
    AuditPage,
    DetectionOut,
    JobOut,
    NodeOut,
    TimelineOut,
    VerdictOut,
)
from medic.domain.audit import AuditEvent, AuditKind, AuditOrder, SubjectType
from medic.domain.auth import Role
from medic.domain.cluster import Job
from medic.domain.ids import ClusterName, JobId
from medic.errors import InputError, NotFoundError
from medic.services import Services

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", responses=problems(401, 403, 503))

MAX_PAGE = 1000
MAX_ID = 2**63 - 1
NEXT_HEADER = "X-Next-After-Id"
NEXT_BEFORE_HEADER = "X-Next-Before-Id"
CSV_COLUMNS = (
    "id",
    "time",
    "actor",
    "kind",
    "subject_type",
    "subject_id",
    "cluster",
    "signature_id",
    "action",
    "verdict",
    "mode",
    "payload",
)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_Readers = Depends(require(*READERS))
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _iso_time(value: object) -> object:
    """Only ISO 8601 (``format: date-time``): pydantic would read a number as a Unix time."""
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        raise ValueError("a time is ISO 8601 (2026-03-04T05:06:07Z), not a number")
    return value


Time = Annotated[datetime | None, BeforeValidator(_iso_time)]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _find_job(services: Services, job_id: str, cluster: str | None) -> Job:
    """The job by its key: one lookup per cluster the store knows (without ``cluster``), never
    a scan of every job (the console asks for a timeline every few seconds)."""
    store = services.store
    names = [ClusterName(cluster)] if cluster else list(store.list_clusters())
    found = (store.get_job(name, JobId(job_id)) for name in names)
    jobs = [j for j in found if j is not None]
    if not jobs:
        raise NotFoundError(f"job {job_id!r} is not known to medic; list jobs at /api/v1/jobs")
    if len(jobs) > 1:
        where = ", ".join(sorted(j.cluster for j in jobs))
        raise InputError("cluster", f"job {job_id!r} exists in clusters {where}; pass ?cluster=")
    return jobs[0]


def _all_events(services: Services, cluster: ClusterName, job_id: JobId) -> list[AuditEvent]:
    events: list[AuditEvent] = []
    while True:
        after = events[-1].id if events else None
        page = services.store.query_audit(
            cluster=cluster, job_id=job_id, after_id=after, limit=MAX_PAGE
        )
        events.extend(page)
        if len(page) < MAX_PAGE:
            return events


def _aware(when: datetime | None) -> datetime | None:
    """A time without an offset is UTC (as in ``medic audit --since``)."""
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


@router.get("/jobs", response_model=list[JobOut], dependencies=[_Readers])
def list_jobs(request: Request, cluster: str | None = None) -> list[JobOut]:
    services = _services(request)
    name = ClusterName(cluster) if cluster else None
    advice = {(a.cluster, a.job_id): a for a in services.store.list_advice(cluster=name)}
    return [JobOut.of(j, advice.get((j.cluster, j.id))) for j in services.store.list_jobs(name)]


@router.get(
    "/jobs/{job_id}/timeline",
    response_model=TimelineOut,
    dependencies=[_Readers],
    responses=problems(404, 422),
)
def job_timeline(request: Request, job_id: str, cluster: str | None = None) -> TimelineOut:
    """Everything medic saw and did for one job, oldest first."""
    services = _services(request)
    job = _find_job(services, job_id, cluster)
    store, jid = services.store, JobId(job.id)
    events = _all_events(services, job.cluster, jid)
    return TimelineOut(
        job=JobOut.of(job, store.advice_for_job(job.cluster, jid)),
        attempts=[AttemptOut.of(a) for a in store.list_attempts(job.cluster, jid)],
        detections=[DetectionOut.of(d) for d in store.list_detections(job.cluster, jid)],
        verdicts=[VerdictOut.of(v) for v in store.list_verdicts(job.cluster, jid)],
        actions=[ActionOut.of(a) for a in store.list_actions(job.cluster, jid)],
        events=[AuditOut.of(e) for e in events],
    )


@router.get("/nodes", response_model=list[NodeOut], dependencies=[_Readers])
def list_nodes(request: Request, cluster: str | None = None) -> list[NodeOut]:
    services = _services(request)
    name = ClusterName(cluster) if cluster else services.cluster
    return NodeOut.listing(services.store, services.repair_store, name)


@router.get(
    "/advice",
    response_model=list[AdviceOut],
    dependencies=[Depends(require(*READERS, Role.CONTROLLER))],
    responses=problems(422),
)
def list_advice(
    request: Request, active: bool = False, cluster: str | None = None
) -> list[AdviceOut]:
    """The advice feed; ``active=true`` gives what a controller still has to reconcile."""
    services = _services(request)
    name = ClusterName(cluster) if cluster else None
    return [AdviceOut.of(a) for a in services.store.list_advice(cluster=name, active_only=active)]


@router.get(
    "/audit",
    response_model=AuditPage,
    dependencies=[_Readers],
    responses={
        200: {
            "content": {"text/csv": {"schema": {"type": "string"}}},
            "headers": {
                NEXT_HEADER: {
                    "description": "CSV: the next page's ``after_id`` (``order=asc``)",
                    "schema": {"type": "integer"},
                },
                NEXT_BEFORE_HEADER: {
                    "description": "CSV: the next page's ``before_id`` (``order=desc``)",
                    "schema": {"type": "integer"},
                },
            },
        },
        **problems(422),
    },
)
def query_audit(
    request: Request,
    job: str | None = None,
    node: str | None = None,
    cluster: str | None = None,
    kind: AuditKind | None = None,
    actor: str | None = None,
    since: Time = None,
    until: Time = None,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    before_id: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    order: AuditOrder = "asc",
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    format: Literal["json", "csv"] = "json",
) -> AuditPage | Response:
    """Audit events matching every filter, a page at a time: the oldest first (``order=asc``,
    the default; the next page is ``after_id=next_after_id``) or the newest first
    (``order=desc``; the next page is ``before_id=next_before_id``). ``after_id`` and
    ``before_id`` bound the ids in either order. ``node``: the events whose subject is that node
    (repairs, alerts); ``job``: whose subject is that job."""
    job, node = job or None, node or None
    if job is not None and node is not None:
        raise InputError("node", "filter by job or by node, not both (an event has one subject)")
    services = _services(request)
    events = services.store.query_audit(
        cluster=ClusterName(cluster) if cluster else None,
        job_id=JobId(job) if job is not None else None,
        subject_type=SubjectType.NODE.value if node is not None else None,
        subject_id=node,
        kind=kind,
        actor=actor,
        since=_aware(since),
        until=_aware(until),
        after_id=after_id,
        before_id=before_id,
        order=order,
        limit=limit + 1,
    )
    page = events[:limit]
    cursor = page[-1].id if len(events) > limit and page else None
    next_after_id = cursor if order == "asc" else None
    next_before_id = cursor if order == "desc" else None
    if format == "csv":
        headers = {"Content-Disposition": 'attachment; filename="medic-audit.csv"'}
        if cursor is not None:
            headers[NEXT_HEADER if order == "asc" else NEXT_BEFORE_HEADER] = str(cursor)
        return Response(_csv(page), media_type="text/csv; charset=utf-8", headers=headers)
    return AuditPage(
        events=[AuditOut.of(e) for e in page],
        next_after_id=next_after_id,
        next_before_id=next_before_id,
    )


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def _csv(events: list[AuditEvent]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for e in events:
        row = AuditOut.of(e).model_dump(mode="json")
        row["payload"] = json.dumps(row["payload"], sort_keys=True, separators=(",", ":"))
        writer.writerow([_cell(row[column]) for column in CSV_COLUMNS])
    return out.getvalue()
