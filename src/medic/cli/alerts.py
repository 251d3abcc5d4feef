"""``medic alerts``: node health alerts, straight in the store (no server needed).

``medic alerts list`` shows them (``--state firing``, ``--node``, ``--unmapped``, ``--json``, the
same fields as ``GET /api/v1/alerts``); ``medic alerts resolve ID --reason "..."`` is a person's
resolve after fixing a node by hand: audited as ``cli:<os user>`` with the reason, and the next
pass cancels the repair nobody started for it and returns a node medic cordoned for it (the same
as the console's button and ``POST /api/v1/alerts/{id}/resolve``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from medic.api.schemas_alerts import AlertOut
from medic.cli.common import emit, settings_of
from medic.cli.tokens import who
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import AlertState
from medic.errors import NotFoundError
from medic.repair.alerts import resolve_by_person
from medic.wiring import SystemClock, open_store

__all__ = ["register"]

alerts_app = typer.Typer(
    name="alerts",
    help="Node health alerts: list them, resolve one after fixing its node by hand.",
    no_args_is_help=True,
)
_COLUMNS = ["id", "node", "key", "severity", "state", "source", "last_seen", "count", "summary"]


@alerts_app.command("list")
def list_alerts(
    ctx: typer.Context,
    state: Annotated[AlertState | None, typer.Option("--state", help="firing or resolved.")] = None,
    node: Annotated[str | None, typer.Option("--node", help="Only this node.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster.")] = None,
    unmapped: Annotated[
        bool, typer.Option("--unmapped", help="Only those no repair is mapped to.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """The alerts, oldest first."""
    store = open_store(settings_of(ctx), migrate=False)
    found = store.list_alerts(
        cluster=ClusterName(cluster) if cluster else None,
        node=NodeName(node) if node else None,
        state=state,
        unmapped_only=unmapped,
    )
    rows = [AlertOut.of(a).model_dump(mode="json") for a in found]
    emit(rows, columns=_COLUMNS, title="Alerts", as_json=as_json)


@alerts_app.command("resolve")
def resolve(
    ctx: typer.Context,
    alert_id: Annotated[int, typer.Argument(help="The alert's id (medic alerts list).", min=1)],
    reason: Annotated[
        str | None, typer.Option("--reason", help="What was done (kept in the audit trail).")
    ] = None,
) -> None:
    """Resolve a firing alert, as a person (audited as cli:<os user>)."""
    store = open_store(settings_of(ctx))
    try:
        alert, changed = resolve_by_person(store, alert_id, who(), reason, SystemClock().now())
    except NotFoundError as exc:
        typer.echo(f"medic: {exc}", err=True)
        raise typer.Exit(1) from None
    said = "resolved" if changed else f"was not firing ({alert.state.value}); nothing changed"
    typer.echo(f"alert {alert_id} {alert.key} on {alert.node}: {said}")


def register(app: typer.Typer) -> None:
    app.add_typer(alerts_app)
