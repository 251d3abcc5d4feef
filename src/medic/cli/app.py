"""The Typer application: global options and the command groups."""

from __future__ import annotations

from typing import Annotated

import typer

import medic
from medic.cli import (
    agent,
    alerts,
    config,
    controller,
    demo,
    dev,
    diagnose,
    query,
    repairs,
    serve,
    tokens,
    watchdog,
)
from medic.cli.common import State

__all__ = ["app"]

app = typer.Typer(
    name="medic",
    help="Keeps distributed GPU training running: detects failures, recovers jobs, audits it all.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _global(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option("--config", "-c", envvar="MEDIC_CONFIG", help="YAML configuration file."),
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning")] = "warning",
) -> None:
    ctx.obj = State(config_path=config, log_level=log_level)


@app.command()
def version() -> None:
    """Print medic's version."""
    typer.echo(medic.__version__)


serve.register(app)
demo.register(app)
query.register(app)
config.register(app)
controller.register(app)
watchdog.register(app)
diagnose.register(app)
dev.register(app)
agent.register(app)
tokens.register(app)
alerts.register(app)
repairs.register(app)
