"""Read commands over the store: ``medic jobs``, ``nodes``, ``advice``, ``audit``.

They read the database directly (no server needed), through the same schemas the API returns, so
``--json`` output and ``/api/v1`` agree field for field.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from medic.api.schemas import (
    AdviceOut,
    AuditOut,
    JobOut,
    NodeOut,
)
from medic.cli.common import emit, settings_of
from medic.domain.audit import AuditKind
from medic.domain.ids import ClusterName, JobId
from medic.domain.repairs import NodeHealth
from medic.wiring import open_store

__all__ = ["parse_since", "register"]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="Only this cluster.")]

_RELATIVE = re.compile(r"^(\d+)\s*([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(value: str, now: datetime) -> datetime:
    """``30m``, ``2h``, ``1d`` (ago) or an ISO-8601 time (UTC when no offset is given)."""
    match = _RELATIVE.match(value.strip())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is neither a duration like 30m, 2h, 1d nor an ISO time like "
            "2026-11-30T08:00:00Z"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def register(app: typer.Typer) -> None:
    @app.command()
    def jobs(ctx: typer.Context, cluster: ClusterOpt = None, as_json: JsonOpt = False) -> None:
        """Jobs medic watches, with their current advice."""
        store = open_store(settings_of(ctx), migrate=False)
        name = ClusterName(cluster) if cluster else None
        advice = {(a.cluster, a.job_id): a for a in store.list_advice(cluster=name)}
        rows = [
            JobOut.of(j, advice.get((j.cluster, j.id))).model_dump(mode="json")
            for j in store.list_jobs(name)
        ]
        for row in rows:
            adv = row.get("advice") or {}
            row["advice_action"] = adv.get("action")
            row["advice_status"] = adv.get("status")
        cols = ["cluster", "id", "name", "state", "restart_count", "nodes", "excluded_nodes"]
        emit(rows, columns=[*cols, "advice_action", "advice_status"], title="Jobs", as_json=as_json)

    @app.command()
    def nodes(
        ctx: typer.Context,
        cluster: ClusterOpt = None,
        health: Annotated[
            NodeHealth | None, typer.Option("--health", help="Only nodes in this health.")
        ] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Nodes: their scheduler state and medic's health of them."""
        settings = settings_of(ctx)
        name = ClusterName(cluster or settings.scheduler.cluster)
        store = open_store(settings, migrate=False)
        found = NodeOut.listing(store, store, name)
        rows = [n.model_dump(mode="json") for n in found if health is None or n.health is health]
        cols = ["cluster", "name", "state", "health", "partitions", "gpus", "reason"]
        emit(rows, columns=cols, title="Nodes", as_json=as_json)

    @app.command()
    def advice(
        ctx: typer.Context,
        active: Annotated[bool, typer.Option("--active", help="Only unreconciled advice.")] = False,
        cluster: ClusterOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """medic's recommendations per job, with their reconciliation status."""
        store = open_store(settings_of(ctx), migrate=False)
        name = ClusterName(cluster) if cluster else None
        rows = [
            AdviceOut.of(a).model_dump(mode="json")
            for a in store.list_advice(cluster=name, active_only=active)
        ]
        cols = ["id", "cluster", "job_id", "generation", "action", "exclude_nodes", "mode"]
        emit(rows, columns=[*cols, "status", "rule"], title="Advice", as_json=as_json)

    @app.command()
    def audit(
        ctx: typer.Context,
        job: Annotated[str | None, typer.Option("--job", help="Only this job.")] = None,
        since: Annotated[
            str | None, typer.Option("--since", help="30m, 2h, 1d or an ISO time.")
        ] = None,
        kind: Annotated[AuditKind | None, typer.Option("--kind", help="Only this kind.")] = None,
        limit: Annotated[int, typer.Option("--limit", min=1, max=100_000)] = 200,
        cluster: ClusterOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The audit trail: every detection, verdict, advice and action, oldest first."""
        store = open_store(settings_of(ctx), migrate=False)
        start = parse_since(since, datetime.now(UTC)) if since else None
        events = store.query_audit(
            cluster=ClusterName(cluster) if cluster else None,
            job_id=JobId(job) if job else None,
            kind=kind,
            since=start,
            limit=limit,
        )
        rows = [AuditOut.of(e).model_dump(mode="json") for e in events]
        cols = ["id", "time", "actor", "kind", "subject_id", "signature_id", "action", "verdict"]
        emit(rows, columns=[*cols, "mode"], title="Audit trail", as_json=as_json)
