"""``medic serve``: the control loop and the HTTP API in one process."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from medic.api.app import create_app
from medic.cli.common import settings_of
from medic.wiring import build

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        ctx: typer.Context,
        host: Annotated[str | None, typer.Option("--host", help="Bind address.")] = None,
        port: Annotated[int | None, typer.Option("--port", min=1, max=65535)] = None,
        loop: Annotated[
            bool | None,
            typer.Option(
                "--loop/--no-loop",
                help="Run the control loop here (api.run_loop); --no-loop serves the API only.",
                show_default=False,
            ),
        ] = None,
    ) -> None:
        """Run the control loop and the HTTP API (127.0.0.1:8765 unless told otherwise).

        With no configuration it runs on the embedded default: a SQLite file and the simulated
        cluster, so it starts anywhere.
        """
        settings = settings_of(ctx, **{"api.host": host, "api.port": port, "api.run_loop": loop})
        services = build(settings, start_workload=settings.api.run_loop)
        try:
            uvicorn.run(
                create_app(services, run_loop=settings.api.run_loop),
                host=settings.api.host,
                port=settings.api.port,
                log_level="warning",
            )
        finally:
            services.close()
