"""``medic watchdog``: the fail-open watchdog on its own, beside the scheduler.

It needs the scheduler's CLI (``scheduler.kind: slurm``, ``slurm.runner: local|ssh``) and a
state directory for its journal, nothing else: no database, no API, no other medic process. A
job medic holds (marked when it was held, :mod:`medic.domain.holds`) is released with its
original excluded nodes after ``controller.watchdog_timeout_seconds`` without convergence, even
when every other medic process is dead. See :mod:`medic.control.fail_open`.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import platformdirs
import typer

from medic.cli.common import settings_of
from medic.control.fail_open import FailOpen
from medic.domain.cluster import Mode
from medic.errors import MedicError
from medic.wiring import SystemClock, build_scheduler

__all__ = ["register"]

logger = logging.getLogger(__name__)


def register(app: typer.Typer) -> None:
    @app.command()
    def watchdog(
        ctx: typer.Context,
        once: Annotated[bool, typer.Option("--once", help="One poll, then exit.")] = False,
        state_dir: Annotated[
            Path | None,
            typer.Option("--state-dir", help="Where the watchdog's journal lives."),
        ] = None,
        mode: Annotated[
            Mode | None,
            typer.Option("--mode", help="observe: only log; act: release the jobs."),
        ] = None,
    ) -> None:
        """Release jobs medic left held, with their original excluded nodes, after
        ``controller.watchdog_timeout_seconds``: the fail-open guarantee with no other medic
        process alive. Polls every ``controller.poll_seconds``; ``--mode`` defaults to
        ``scheduler.mode`` (observe unless configured)."""
        settings = settings_of(ctx)
        directory = state_dir or Path(platformdirs.user_state_dir("medic")) / "watchdog"
        cluster = settings.scheduler.cluster
        dog = FailOpen(
            scheduler=build_scheduler(settings),
            clock=SystemClock(),
            timeout_seconds=settings.controller.watchdog_timeout_seconds,
            mode=mode or settings.scheduler.mode,
            journal=directory / f"watchdog-{cluster}.jsonl",
        )
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                try:
                    released = dog.check()
                except MedicError as exc:  # the scheduler did not answer: the next poll
                    if once:
                        typer.echo(f"medic: {exc}", err=True)
                        raise typer.Exit(1) from None
                    logger.warning("watchdog poll failed: %s", exc)
                    released = []
                if once:
                    typer.echo(f"released {len(released)} job(s): {' '.join(released) or '-'}")
                    return
                if stop.wait(settings.controller.poll_seconds):
                    return
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
