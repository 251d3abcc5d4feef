"""``medic agent``: the per-node health agent (NVML, filesystems, InfiniBand, kernel log).

``medic agent --api URL --cluster NAME`` runs on every GPU node and posts what changes to the
control plane. ``medic agent --once --json`` runs every check once and prints the findings, with
no control plane needed (exit status 1 when a check fails, as a health-check program). The same
agent runs as ``python -m medic.agent`` on nodes that have only its own dependencies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from medic.agent.main import AgentConfig, OptionError, execute
from medic.errors import ConfigError
from medic.telemetry.logging import configure_logging

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command()
    def agent(
        ctx: typer.Context,
        api: Annotated[
            str | None,
            typer.Option("--api", help="URL of the medic API, e.g. http://medic:8765."),
        ] = None,
        node: Annotated[
            str | None, typer.Option("--node", help="This node's scheduler name (default: host).")
        ] = None,
        cluster: Annotated[
            str | None, typer.Option("--cluster", help="Cluster the node belongs to.")
        ] = None,
        kernel: Annotated[
            str,
            typer.Option("--kernel", help="Kernel log: kmsg, journal, file:PATH or none."),
        ] = "kmsg",
        interval: Annotated[
            float, typer.Option("--interval", min=1.0, help="Seconds between check runs.")
        ] = 30.0,
        fs: Annotated[
            list[str] | None,
            typer.Option("--fs", help="Filesystem path to watch (repeat; default /)."),
        ] = None,
        once: Annotated[
            bool, typer.Option("--once", help="Run every check once, then exit.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print findings as JSON.")] = False,
        detector: Annotated[
            str | None, typer.Option("--detector", help="Detector name (default agent:<host>).")
        ] = None,
        token: Annotated[
            str | None,
            typer.Option(
                "--token",
                envvar="MEDIC_TOKEN",
                help="API token of role detector (prefer MEDIC_TOKEN or --token-file).",
                show_default=False,
            ),
        ] = None,
        token_file: Annotated[
            Path | None, typer.Option("--token-file", help="File holding the API token.")
        ] = None,
        gpus: Annotated[
            int | None, typer.Option("--gpus", min=0, help="GPUs this node should have.")
        ] = None,
        spool: Annotated[
            Path | None, typer.Option("--spool", help="Spool file for alerts not yet sent.")
        ] = None,
        refire: Annotated[
            float,
            typer.Option("--refire", min=1.0, help="Seconds between re-sends while failing."),
        ] = 300.0,
        timeout: Annotated[
            float, typer.Option("--timeout", min=0.1, help="Seconds per API request.")
        ] = 10.0,
        fs_full: Annotated[
            float, typer.Option("--fs-full-percent", min=1, max=100, help="Full above this %.")
        ] = 95.0,
        temperature_limit: Annotated[
            float | None,
            typer.Option("--temperature-limit", help="°C (default: the GPU's slowdown limit)."),
        ] = None,
        pcie_replays: Annotated[
            float, typer.Option("--pcie-replays-per-minute", min=0, help="Replay rate limit.")
        ] = 8.0,
        ib_root: Annotated[
            str, typer.Option("--ib-root", hidden=True, help="sysfs InfiniBand directory.")
        ] = "/sys/class/infiniband",
    ) -> None:
        """Watch this node's GPUs, filesystems, InfiniBand ports and kernel log; report alerts.

        Sends only changes: a check that starts failing (again every ``--refire`` seconds while
        it fails), one that recovers, and each kernel line the signature catalogue knows. Alerts
        wait in ``--spool`` while the API is unreachable. Stops on SIGINT/SIGTERM. ``--once``
        runs the checks once (no kernel log); without ``--api`` it only prints.
        """
        try:
            configure_logging(getattr(ctx.obj, "log_level", None) or "warning")
        except ConfigError as exc:
            typer.echo(f"medic: {exc}", err=True)
            raise typer.Exit(2) from None
        config = AgentConfig(
            api=api,
            cluster=cluster,
            node=node,
            detector=detector,
            kernel=kernel,
            interval=interval,
            fs=tuple(fs or ("/",)),
            once=once,
            gpus=gpus,
            spool=spool,
            refire=refire,
            timeout=timeout,
            fs_full_percent=fs_full,
            temperature_limit=temperature_limit,
            pcie_replays_per_minute=pcie_replays,
            ib_root=ib_root,
            token=token,
            token_file=token_file,
        )
        try:
            config.check()
        except OptionError as exc:
            raise typer.BadParameter(exc.message, param_hint=exc.option) from None
        code = execute(config, as_json)
        if code:
            raise typer.Exit(code)
