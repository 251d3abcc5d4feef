"""``medic tokens``: API tokens, straight in the store (no server needed, so the first admin token
can be made before anything can sign in).

``medic tokens create --role admin --name alice`` prints the new token on stdout, alone on its
line, once: medic keeps only its hash. ``medic tokens list`` shows names, roles and who created
them (never a secret); ``medic tokens revoke NAME`` revokes one at once (its console sessions
end). Both changes are audited (``token-created``, ``token-revoked``) with ``cli:<os user>``.
"""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from medic.api.auth import issue_token, revoke_token
from medic.api.schemas_auth import (
    TokenOut,
)
from medic.cli.common import emit, settings_of
from medic.domain.auth import Role
from medic.errors import ConflictError, InputError, NotFoundError
from medic.wiring import SystemClock, open_store

__all__ = ["register", "who"]

tokens_app = typer.Typer(
    name="tokens",
    help="API tokens: create (shown once), list, revoke.",
    no_args_is_help=True,
)


def who() -> str:
    """The person at this terminal, as the audit trail names them: ``cli:<os user>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "cli:unknown"


@tokens_app.command("create")
def create(
    ctx: typer.Context,
    role: Annotated[
        Role,
        typer.Option("--role", help="viewer, operator, detector, controller or admin."),
    ],
    name: Annotated[
        str,
        typer.Option("--name", help="The identity the token acts as (a detector's name, a login)."),
    ],
) -> None:
    """Create a token and print it (once: only its hash is kept)."""
    store = open_store(settings_of(ctx))
    try:
        token, secret = issue_token(store, store, name, role, SystemClock().now(), who())
    except (InputError, ConflictError) as exc:
        typer.echo(f"medic: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        store.close()
    typer.echo(secret)
    typer.echo(
        f"token {token.name!r} (role {token.role.value}) created; it is shown this once only: "
        "send it as `Authorization: Bearer <token>`",
        err=True,
    )


@tokens_app.command("list")
def list_(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Every token (revoked ones too), without secrets."""
    store = open_store(settings_of(ctx), migrate=False)
    try:
        tokens = store.list_tokens()
    finally:
        store.close()
    rows = [TokenOut.of(t).model_dump(mode="json") for t in tokens]
    columns = ["name", "role", "active", "created_at", "created_by", "revoked_at"]
    emit(rows, columns=columns, title="API tokens", as_json=as_json)


@tokens_app.command("revoke")
def revoke(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The token's name.")],
) -> None:
    """Revoke a token now (its console sessions end too)."""
    store = open_store(settings_of(ctx))
    try:
        token = revoke_token(store, store, name, SystemClock().now(), who())
    except NotFoundError as exc:
        typer.echo(f"medic: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        store.close()
    typer.echo(f"token {token.name!r} revoked")


def register(app: typer.Typer) -> None:
    """Add ``medic tokens`` to ``app``."""
    app.add_typer(tokens_app)
