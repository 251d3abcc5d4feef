"""``medic controller``: the remote controller process, next to the scheduler.

It carries out the act-mode advice that a medic control plane publishes, through the advice API
(``--api``), on the scheduler configured here (``scheduler.kind: slurm``, ``slurm.runner:
local|ssh``), and runs the fail-open watchdog. One per cluster; its journal lives in
``--state-dir``.
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import platformdirs
import typer

from medic.cli.common import settings_of
from medic.control.remote import run_controller
from medic.domain.cluster import Mode
from medic.errors import ConfigError
from medic.remote import MedicApiClient
from medic.wiring import SystemClock, build_scheduler

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command()
    def controller(
        ctx: typer.Context,
        api: Annotated[
            str, typer.Option("--api", help="URL of the medic API, e.g. http://medic:8765.")
        ],
        cluster: Annotated[
            str, typer.Option("--cluster", help="Cluster whose advice to carry out.")
        ],
        once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
        state_dir: Annotated[
            Path | None,
            typer.Option("--state-dir", help="Where the watchdog journal lives."),
        ] = None,
        mode: Annotated[
            Mode | None,
            typer.Option("--mode", help="observe: only log; act: issue scheduler commands."),
        ] = None,
        timeout: Annotated[
            float, typer.Option("--timeout", min=0.1, help="Seconds per API request.")
        ] = 10.0,
        token: Annotated[
            str | None,
            typer.Option(
                "--token",
                envvar="MEDIC_TOKEN",
                help="API token of role controller (prefer MEDIC_TOKEN: a command line is public).",
                show_default=False,
            ),
        ] = None,
    ) -> None:
        """Carry out medic's advice on this cluster's scheduler, with the fail-open watchdog.

        Polls the advice feed every ``controller.poll_seconds``; a job it holds is released with
        its original excluded nodes when no convergence comes within
        ``controller.watchdog_timeout_seconds``, even while the API is unreachable. Stops on
        SIGINT/SIGTERM once the advice in flight is done. ``--mode`` defaults to
        ``scheduler.mode`` (observe unless configured).
        """
        if not re.fullmatch(r"[\w.-]+", cluster):
            raise typer.BadParameter(
                "letters, digits, '.', '_' and '-' only", param_hint="--cluster"
            )
        if not token or not token.strip():
            raise typer.BadParameter(
                "an API token of role controller is required (or set MEDIC_TOKEN)",
                param_hint="--token",
            )
        settings = settings_of(ctx, **{"scheduler.cluster": cluster})
        directory = state_dir or Path(platformdirs.user_state_dir("medic")) / "controller"
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            # Only ask: the advice in flight finishes, so no step is left half-recorded.
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        client = MedicApiClient(api, timeout, token=token)
        try:
            run_controller(
                scheduler=build_scheduler(settings),
                ledger=client,
                clock=SystemClock(),
                stop=stop,
                settings=settings.controller,
                mode=mode or settings.scheduler.mode,
                journal_path=directory / f"journal-{cluster}.json",
                once=once,
            )
        except ConfigError as exc:
            typer.echo(f"medic: {exc}", err=True)
            raise typer.Exit(2) from None
        finally:
            client.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
