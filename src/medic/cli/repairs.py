"""``medic repairs``: node repairs, straight in the store (no server needed).

``medic repairs list`` shows them (``--state`` repeatable, ``--node``, ``--open``, ``--json``: the
fields of ``GET /api/v1/repairs``), ``medic repairs show ID`` one with its validations.
``approve`` (``--action`` to approve another one), ``reject`` and ``cancel`` are a person's
decisions, audited as the person ``user:cli:<os user>`` with ``--reason``: the same rules as the
console's buttons and ``POST /api/v1/repairs/{id}/approve|reject|cancel`` (a repeated decision
changes nothing; a repair that is no longer pending is refused with what it is now, exit code 1).
Without a signed-in token the shell's user is who decides: whoever can open the database can.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from medic.api.schemas_repairs import RepairDetailOut, RepairOut
from medic.cli.common import emit, settings_of
from medic.cli.tokens import who
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import TERMINAL_STATES, Repair, RepairAction, RepairState
from medic.errors import ConflictError, InputError, NotFoundError, PolicyViolation
from medic.repair.decisions import approve_repair, cancel_repair, reject_repair
from medic.repair.intake_common import IntakeStore
from medic.wiring import SystemClock, open_store

__all__ = ["register"]

repairs_app = typer.Typer(
    name="repairs",
    help="Node repairs: list and show them, approve, reject or cancel one as a person.",
    no_args_is_help=True,
)
_COLUMNS = ["id", "node", "action", "state", "requested_by", "approved_by", "created_at", "reason"]
_Reason = Annotated[str | None, typer.Option("--reason", help="Why (kept in the audit trail).")]
_Id = Annotated[int, typer.Argument(help="The repair's id (medic repairs list).", min=1)]


@repairs_app.command("list")
def list_repairs(
    ctx: typer.Context,
    state: Annotated[
        list[RepairState] | None, typer.Option("--state", help="Only these states (repeat).")
    ] = None,
    open_only: Annotated[bool, typer.Option("--open", help="Only unfinished repairs.")] = False,
    node: Annotated[str | None, typer.Option("--node", help="Only this node.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """The repairs, oldest first."""
    states = set(state or RepairState)
    if open_only:
        states -= TERMINAL_STATES
    store = open_store(settings_of(ctx), migrate=False)
    found = store.list_repairs(
        cluster=ClusterName(cluster) if cluster else None,
        node=NodeName(node) if node else None,
        states=frozenset(states) if state or open_only else None,
    )
    rows = [RepairOut.of(r).model_dump(mode="json") for r in found]
    emit(rows, columns=_COLUMNS, title="Repairs", as_json=as_json)


@repairs_app.command("show")
def show(
    ctx: typer.Context,
    repair_id: _Id,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """One repair with its evidence and validations."""
    store = open_store(settings_of(ctx), migrate=False)
    repair = store.get_repair(repair_id)
    if repair is None:
        typer.echo(
            f"medic: repair {repair_id} does not exist; list them: medic repairs list", err=True
        )
        raise typer.Exit(1)
    detail = RepairDetailOut.with_validations(repair, store.list_validations(repair_id))
    row = detail.model_dump(mode="json")
    if as_json:
        emit([row], columns=[], title="", as_json=True)
        return
    for key, value in row.items():
        typer.echo(f"{key:>17}: {value if value not in (None, [], {}) else '-'}")


def _decide(
    ctx: typer.Context, repair_id: int, verb: str, decide: Callable[[IntakeStore], Repair]
) -> None:
    store = open_store(settings_of(ctx))
    before = store.get_repair(repair_id)
    try:
        repair = decide(store)
    except (NotFoundError, ConflictError, InputError, PolicyViolation) as exc:
        typer.echo(f"medic: cannot {verb} repair {repair_id}: {exc}", err=True)
        raise typer.Exit(1) from None
    same = before is not None and (before.state, before.action) == (repair.state, repair.action)
    said = "nothing changed (already so)" if same else f"now {repair.state.value}"
    typer.echo(f"repair {repair_id} {repair.action.value} on {repair.node}: {said}")


@repairs_app.command("approve")
def approve(
    ctx: typer.Context,
    repair_id: _Id,
    action: Annotated[
        RepairAction | None, typer.Option("--action", help="Approve this action instead.")
    ] = None,
    reason: _Reason = None,
) -> None:
    """Approve a pending repair, as a person (audited as user:cli:<os user>)."""
    now = SystemClock().now()
    _decide(
        ctx,
        repair_id,
        "approve",
        lambda store: approve_repair(store, repair_id, who(), now, action, reason=reason),
    )


@repairs_app.command("reject")
def reject(ctx: typer.Context, repair_id: _Id, reason: _Reason = None) -> None:
    """Reject a pending repair, as a person."""
    now = SystemClock().now()
    _decide(
        ctx,
        repair_id,
        "reject",
        lambda store: reject_repair(store, repair_id, who(), now, reason=reason),
    )


@repairs_app.command("cancel")
def cancel(ctx: typer.Context, repair_id: _Id, reason: _Reason = None) -> None:
    """Cancel a repair that has not started executing, as a person."""
    now = SystemClock().now()
    _decide(
        ctx,
        repair_id,
        "cancel",
        lambda store: cancel_repair(store, repair_id, who(), now, reason=reason),
    )


def register(app: typer.Typer) -> None:
    app.add_typer(repairs_app)
