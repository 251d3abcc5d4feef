"""Helpers shared by the CLI commands: loading settings once, printing tables or JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from medic.config.loading import load_settings
from medic.config.settings import Settings
from medic.errors import ConfigError
from medic.telemetry.logging import configure_logging

__all__ = ["State", "emit", "settings_of"]


@dataclass(slots=True)
class State:
    config_path: str | None
    log_level: str
    overrides: dict[str, object] = field(default_factory=dict)


def settings_of(ctx: typer.Context, **overrides: object) -> Settings:
    """Settings from defaults, the config file, ``MEDIC_*`` and the command's own options."""
    state: State = ctx.obj
    configure_logging(state.log_level)
    merged = {k: v for k, v in overrides.items() if v is not None}
    try:
        return load_settings(config_path=state.config_path, overrides=merged)
    except ConfigError as exc:
        typer.echo(f"medic: configuration error: {exc}", err=True)
        raise typer.Exit(2) from None


def emit(
    rows: Sequence[dict[str, Any]], *, columns: Sequence[str], title: str, as_json: bool
) -> None:
    """Print rows as JSON (for scripts) or as a rich table (for people)."""
    if as_json:
        json.dump(list(rows), sys.stdout, default=str, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title=title, show_lines=False)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    Console().print(table)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(v) for v in value) or "-"
    return str(value)
