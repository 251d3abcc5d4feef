"""Developer commands: ``medic dev slurm up|status|down``, a real local Slurm cluster.

``up`` prints the environment on stdout (``eval "$(medic dev slurm up)"``) and its progress on
stderr. ``status`` exits 0 when every daemon runs, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from medic.dev.slurm import DevClusterError, LocalSlurm, default_state_dir

__all__ = ["register"]

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        envvar="MEDIC_DEV_SLURM_STATE_DIR",
        help=f"Where the cluster's files live (default {default_state_dir()}).",
    ),
]


def _say(message: str) -> None:
    typer.echo(f"medic dev slurm: {message}", err=True)


def _fail(exc: DevClusterError) -> typer.Exit:
    _say(f"error: {exc}")
    return typer.Exit(1)


def register(app: typer.Typer) -> None:
    dev = typer.Typer(name="dev", help="Developer tools.", no_args_is_help=True)
    slurm = typer.Typer(
        name="slurm",
        help="A real local Slurm 22.05 cluster: virtual nodes node[1-N] with 8 GPUs each.",
        no_args_is_help=True,
    )
    dev.add_typer(slurm)
    app.add_typer(dev)

    @slurm.command()
    def up(
        nodes: Annotated[int, typer.Option("--nodes", min=1, max=64, help="Virtual nodes.")] = 2,
        state_dir: StateDirOpt = None,
        accounting: Annotated[
            bool,
            typer.Option(
                "--accounting/--no-accounting",
                help="slurmdbd on the local MariaDB (127.0.0.1:3306, root) when it answers.",
            ),
        ] = True,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait.")] = 120.0,
    ) -> None:
        """Start the cluster, or what of it is not running, and wait for its nodes.

        Installs slurm-wlm, munge and slurmdbd with apt when missing (as root). Prints
        ``export SLURM_CONF=...`` on stdout: ``eval "$(medic dev slurm up)"``.
        """
        cluster = LocalSlurm(state_dir, nodes, accounting=accounting, say=_say)
        started = time.monotonic()
        try:
            env = cluster.up(timeout)
        except DevClusterError as exc:
            raise _fail(exc) from None
        status = cluster.status()
        states = ", ".join(f"{n['name']} {n['state']}" for n in status.nodes)
        _say(f"up in {time.monotonic() - started:.1f} s: {states}")
        _say(f"accounting {status.accounting_note}")
        for key, value in env.env.items():
            typer.echo(f"export {key}={value}")

    @slurm.command()
    def status(
        state_dir: StateDirOpt = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Daemons (up/down, pid), nodes and their states, accounting, SLURM_CONF.

        Exits 0 when every daemon runs, 1 otherwise.
        """
        report = LocalSlurm(state_dir).status()
        if as_json:
            json.dump(report.to_dict(), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            _print_status(report.to_dict())
        if not all(pid is not None for pid in report.daemons.values()):
            raise typer.Exit(1)

    @slurm.command()
    def down(
        state_dir: StateDirOpt = None,
        purge: Annotated[
            bool,
            typer.Option("--purge", help="Also delete saved Slurm state and accounting database."),
        ] = False,
    ) -> None:
        """Stop everything up started: job processes, slurmd, slurmctld, slurmdbd, munged."""
        try:
            stopped = LocalSlurm(state_dir).down(purge=purge)
        except DevClusterError as exc:
            raise _fail(exc) from None
        _say(f"stopped {len(stopped)} processes" + (" and purged the state" if purge else ""))


def _print_status(data: dict[str, object]) -> None:
    console = Console()
    daemons = Table(title=f"Slurm dev cluster in {data['state_dir']}")
    daemons.add_column("daemon")
    daemons.add_column("status")
    daemons.add_column("pid")
    entries = data["daemons"]
    assert isinstance(entries, dict)
    for name, entry in entries.items():
        daemons.add_row(name, "up" if entry["up"] else "down", str(entry["pid"] or "-"))
    console.print(daemons)
    nodes = Table(title="Nodes")
    for col in ("name", "state", "flags", "gres", "reason"):
        nodes.add_column(col)
    node_rows = data["nodes"]
    assert isinstance(node_rows, list)
    for node in node_rows:
        flags = ",".join(node["flags"]) or "-"
        nodes.add_row(node["name"], node["state"], flags, node["gres"], node["reason"] or "-")
    console.print(nodes)
    console.print(f"accounting: {data['accounting_note']}")
    console.print(f"SLURM_CONF={data['slurm_conf']}")
