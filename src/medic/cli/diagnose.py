"""``medic diagnose PATH``: offline root-cause diagnosis of one attempt's log directory;
``medic diagnose --job ID [--attempt N]``: the same on an attempt stored by the control loop
(:mod:`medic.cli.diagnose_stored`).

No configuration, database or server is involved: the command reads the directory, runs the same
matcher and attribution as the control loop (:func:`medic.diagnose.diagnose_directory`) and prints
the verdict. A missing directory, or one without log files, exits with code 2 and one line on
stderr.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from medic.attribute import DEFAULT_GPUS_PER_NODE
from medic.cli.common import settings_of
from medic.cli.diagnose_stored import diagnose_stored
from medic.diagnose import Diagnosis, diagnose_directory, natural_key
from medic.errors import MedicError
from medic.wiring import open_store

__all__ = ["register", "render"]

_TEXT_CHARS = 160


def render(diagnosis: Diagnosis, console: Console) -> None:
    """The readable report: the verdict, then its evidence lines with file and line number."""
    v = diagnosis.verdict
    nodes = ", ".join(sorted(v.implicated_nodes, key=natural_key)) or "none"
    console.print(f"[bold]Diagnosis of {escape(diagnosis.path)}[/bold]")
    console.print(
        f"  {len(diagnosis.files)} file(s), {diagnosis.lines} line(s),"
        f" {diagnosis.detections} detection(s), node(s): {len(diagnosis.nodes)}"
    )
    console.print(f"  domain:           [bold]{v.domain.value}[/bold]")
    console.print(f"  action:           [bold]{v.action.value}[/bold]")
    console.print(f"  implicated nodes: {escape(nodes)}")
    if diagnosis.node_action is not None:
        console.print(f"  node action:      {diagnosis.node_action}")
    console.print(f"  root signature:   {escape(v.root_signature or '-')}")
    console.print(f"  confidence:       {v.confidence:.2f}")
    console.print(f"  summary:          {escape(v.summary)}")
    if not diagnosis.evidence:
        return
    table = Table(title="Evidence", show_lines=False)
    for column in ("file:line", "node", "signature", "text"):
        table.add_column(column, overflow="fold")
    for e in diagnosis.evidence:
        text = " ".join(e.text.split())
        text = text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "…"
        where = f"{e.file}:{e.line}" if e.line else "(derived)"
        table.add_row(where, e.node or "-", e.signature, escape(text))
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``diagnose`` to ``app``."""

    @app.command()
    def diagnose(
        ctx: typer.Context,
        path: Annotated[
            str | None,
            typer.Argument(help="Directory with <node>.log files and optionally job.out."),
        ] = None,
        job: Annotated[
            str | None, typer.Option("--job", help="Rediagnose this job's stored attempt.")
        ] = None,
        attempt: Annotated[
            int | None,
            typer.Option("--attempt", min=0, help="With --job: the attempt (default: latest)."),
        ] = None,
        cluster: Annotated[
            str | None, typer.Option("--cluster", help="With --job: the job's cluster.")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        gpus_per_node: Annotated[
            int,
            typer.Option(
                "--gpus-per-node",
                min=1,
                help="Ranks per node, to place [rankN]: lines of job.out on their node.",
            ),
        ] = DEFAULT_GPUS_PER_NODE,
    ) -> None:
        """Diagnose a failed attempt offline from its log directory, or a stored one (--job)."""
        if (path is None) == (job is None):
            typer.echo("medic: give a log directory or --job ID (one of them)", err=True)
            raise typer.Exit(2)
        recorded = None
        try:
            if job is not None:
                settings = settings_of(ctx)
                found = diagnose_stored(
                    open_store(settings, migrate=False),
                    settings,
                    job,
                    attempt=attempt,
                    cluster=cluster,
                )
                diagnosis, recorded = found.diagnosis, found.recorded
            else:
                diagnosis = diagnose_directory(path or "", gpus_per_node=gpus_per_node)
        except MedicError as exc:
            typer.echo(f"medic: {exc}", err=True)
            raise typer.Exit(2) from None
        if as_json:
            doc = diagnosis.to_json()
            if job is not None:
                doc["recorded"] = (
                    None
                    if recorded is None
                    else {
                        "domain": recorded.domain.value,
                        "action": recorded.action.value,
                        "implicated_nodes": sorted(recorded.implicated_nodes, key=natural_key),
                        "summary": recorded.summary,
                    }
                )
            # ASCII escapes: replacement characters from undecodable bytes print on any terminal.
            typer.echo(json.dumps(doc, indent=2))
            return
        render(diagnosis, Console())
        if recorded is not None:
            Console().print(
                f"  recorded verdict: {recorded.domain.value}/{recorded.action.value}"
                f" on {escape(', '.join(sorted(recorded.implicated_nodes)) or 'none')}"
            )
