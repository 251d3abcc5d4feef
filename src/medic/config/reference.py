"""Render ``docs/configuration.md`` from ``settings.py``: one table per section.

The descriptions are the attribute docstrings in ``settings.py``, read with :mod:`ast` from the
module's source; types, constraints, environment variables and defaults come from
:mod:`medic.config.specs`, so the page shows what the loader accepts. A test fails when a
setting has no docstring or the page is stale. Regenerate it with::

    python -m medic.config.reference > docs/configuration.md
"""

from __future__ import annotations

import ast
import enum
import inspect
import itertools
import typing
from collections.abc import Iterator, Mapping

from medic.config import settings as settings_module
from medic.config.loading import CONFIG_ENV, FILE_SUFFIX
from medic.config.specs import SettingSpec, setting_specs

__all__ = ["field_docstrings", "render_reference", "undocumented_settings"]

REGENERATE = "python -m medic.config.reference > docs/configuration.md"

_HEADER = f"""\
# Configuration reference

<!-- Generated from src/medic/config/settings.py; do not edit by hand.
     Regenerate: {REGENERATE} -->

medic builds its settings from four layers; a later layer wins:

1. the defaults listed below;
2. a YAML file, given on the command line (`--config PATH`) or named by `{CONFIG_ENV}`;
3. environment variables `MEDIC_<SECTION>_<SETTING>` in upper case, e.g.
   `MEDIC_LOOP_INTERVAL_SECONDS=0.5` (`MEDIC_DATABASE_URL` also sets `store.url`);
4. options given to a command (overrides such as `api.port`).

`medic config show` prints the effective values and the layer each one came from.

Values are parsed strictly and checked at startup: integers take no fractions, booleans are
`true`/`false`/`yes`/`no`/`1`/`0` (any case), choices must be one of the listed values, and
numbers must lie in the range given under *Type*. Unknown sections and settings in the file are
errors; unknown `MEDIC_<SECTION>_*` variables are logged and ignored.

Secrets stay out of the file: `<VARIABLE>{FILE_SUFFIX}=/path` (e.g.
`MEDIC_DATABASE_URL{FILE_SUFFIX}`) reads a variable's value from a file, and in the YAML file
`{{"$env": "NAME"}}` or `{{"$file": "path"}}` (relative to the file's folder) stand for a value.

The YAML file has one mapping per section; every key is optional:

```yaml
store:
  url: {{"$env": "DATABASE_URL"}}
scheduler:
  cluster: a100-east
  mode: observe
loop:
  interval_seconds: 0.5
api:
  host: 0.0.0.0
  port: 8765
```
"""


def field_docstrings(source: str | None = None) -> dict[str, str]:
    """Attribute docstrings of ``settings.py`` (or of ``source``), keyed by ``Class.field``."""
    tree = ast.parse(inspect.getsource(settings_module) if source is None else source)
    docs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for name, doc in _attribute_docstrings(node):
                docs[f"{node.name}.{name}"] = inspect.cleandoc(doc)
    return docs


def _attribute_docstrings(cls: ast.ClassDef) -> Iterator[tuple[str, str]]:
    """``(field, docstring)`` for each annotated field followed by a string literal."""
    for stmt, following in zip(cls.body, cls.body[1:], strict=False):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            yield stmt.target.id, following.value.value


def _doc_key(spec: SettingSpec) -> str:
    """``SectionClass.field``: the key of the setting's docstring in :func:`field_docstrings`."""
    section_type = typing.get_type_hints(settings_module.Settings)[spec.section]
    return f"{section_type.__name__}.{spec.name}"


def undocumented_settings(docs: Mapping[str, str] | None = None) -> list[str]:
    """Dotted names of the settings without a (non-blank) docstring in ``settings.py``.

    ``docs`` replaces :func:`field_docstrings` (tests check the check with it).
    """
    docs = field_docstrings() if docs is None else docs
    return [spec.dotted for spec in setting_specs() if not docs.get(_doc_key(spec), "").strip()]


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell: one line, RST literals as code, pipes escaped."""
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def _default(value: object) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value == "":
        return '`""`'
    if isinstance(value, tuple):
        return "`[" + ", ".join(map(str, value)) + "]`"
    return f"`{value}`"


def _row(spec: SettingSpec, doc: str) -> str:
    env = ", ".join(f"`{name}`" for name in spec.env)
    cells = [f"`{spec.dotted}`", env, spec.type_name(), _default(spec.default), doc]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def render_reference() -> str:
    """The whole Markdown page: the header, then one table per section of ``Settings``."""
    docs = field_docstrings()
    lines = [_HEADER]
    for section, specs in itertools.groupby(setting_specs(), key=lambda spec: spec.section):
        lines += [
            f"## `{section}`",
            "",
            "| Setting | Environment | Type | Default | Description |",
            "|---|---|---|---|---|",
            *(_row(spec, docs.get(_doc_key(spec), "")) for spec in specs),
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_reference(), end="")
