"""``medic config show`` and ``medic config reference``."""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any

import typer

from medic.cli.common import State, emit
from medic.config.loading import load_settings_with_sources
from medic.config.reference import render_reference
from medic.errors import ConfigError

__all__ = ["register"]

_PASSWORD = re.compile(r"(://[^:/@]+:)[^@]+@")


def redact(value: object) -> object:
    """Hide a password inside a URL (``postgresql://u:secret@h`` -> ``postgresql://u:***@h``)."""
    return _PASSWORD.sub(r"\1***@", value) if isinstance(value, str) else value


def _flatten(obj: object, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect medic's configuration.", no_args_is_help=True)
    app.add_typer(group, name="config")

    @group.command()
    def show(
        ctx: typer.Context,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Effective settings and the layer each came from (default, file, env, override)."""
        state: State = ctx.obj
        try:
            settings, sources = load_settings_with_sources(config_path=state.config_path)
        except ConfigError as exc:
            typer.echo(f"medic: configuration error: {exc}", err=True)
            raise typer.Exit(2) from None
        rows = [
            {"setting": k, "value": redact(v), "source": sources.get(k, "default")}
            for k, v in _flatten(settings).items()
        ]
        emit(rows, columns=["setting", "value", "source"], title="Settings", as_json=as_json)

    @group.command()
    def reference() -> None:
        """Print the settings reference (docs/configuration.md)."""
        typer.echo(render_reference(), nl=False)
