"""Build :class:`~medic.config.settings.Settings` from its layers, strictly and with sources.

Precedence, lowest first: the dataclass defaults < a YAML file (``config_path``, else the file
named by ``MEDIC_CONFIG``) < environment variables ``MEDIC_<SECTION>_<FIELD>`` (plus aliases such
as ``MEDIC_DATABASE_URL``; ``<NAME>_FILE`` reads the value from a file) < overrides with dotted
keys (``"api.port"``), which is what the CLI passes.

Every value of every layer is parsed and checked by :mod:`medic.config.specs` (the type annotated
in ``settings.py`` and the range in :data:`~medic.config.specs.CONSTRAINTS`). Any problem raises
:class:`~medic.errors.ConfigError` whose ``setting`` names the dotted setting and where the value
came from, and whose message says what is allowed; unknown keys and overrides get a "did you
mean" hint. The sources map records, for each dotted setting, the layer its value came from.

Nothing is read at import time: the environment and the file are read when
:func:`load_settings` is called.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from medic.config.settings import Settings
from medic.config.specs import (
    ENV_PREFIX,
    convert,
    section_types,
    setting_specs,
    specs_by_dotted,
)
from medic.errors import ConfigError

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_SOURCE",
    "FILE_SUFFIX",
    "OVERRIDE_SOURCE",
    "load_settings",
    "load_settings_with_sources",
]

logger = logging.getLogger(__name__)

CONFIG_ENV = "MEDIC_CONFIG"
"""Environment variable naming the YAML file when no path is passed."""
FILE_SUFFIX = "_FILE"
"""``MEDIC_X_FILE=/path`` sets ``MEDIC_X`` to the file's content (secrets)."""
DEFAULT_SOURCE = "default"
OVERRIDE_SOURCE = "override"


@dataclass(frozen=True, slots=True)
class _Value:
    """A parsed value of one layer and the source recorded for it."""

    value: object
    source: str


def _suggest(name: str, allowed: Iterable[str]) -> str:
    """``did you mean "x"? `` (when one is close) followed by the allowed names."""
    allowed = list(allowed)
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f'did you mean "{close[0]}"? ' if close else ""
    return f"{hint}allowed: {', '.join(allowed)}"


# --- layers ---------------------------------------------------------------------------------


def _from_file(path: str, named_by: str | None, env: Mapping[str, str]) -> dict[str, _Value]:
    """Parse the YAML file at ``path`` into dotted settings (``named_by``: the env var, if any)."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        origin = f" (named by {named_by})" if named_by else ""
        raise ConfigError(path, f"configuration file not found{origin}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, f"cannot read configuration file: {exc}") from exc
    loader = yaml.SafeLoader(text)
    values: dict[str, _Value] = {}
    try:
        for dotted, raw, line in _walk_yaml(loader, path):
            where = f"{path}:{line}"
            raw = _resolve_reference(raw, Path(path).expanduser().parent, env, dotted, where)
            values[dotted] = _Value(convert(specs_by_dotted()[dotted], raw, where), path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"{path}:{mark.line + 1}" if mark is not None else path
        raise ConfigError(at, f"invalid YAML: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(path, f"invalid YAML: {exc}") from exc
    finally:
        loader.dispose()
    return values


def _walk_yaml(loader: yaml.SafeLoader, path: str) -> Iterator[tuple[str, object, int]]:
    """Yield ``(dotted name, raw value, line)`` for each setting, rejecting unknown keys."""
    root = loader.get_single_node()
    if root is None or _is_null(root):
        return
    sections = list(section_types())
    for section, section_node in _mapping_items(loader, root, path, sections, ""):
        if _is_null(section_node):
            continue
        names = [spec.name for spec in setting_specs() if spec.section == section]
        for name, node in _mapping_items(loader, section_node, path, names, section):
            yield f"{section}.{name}", loader.construct_object(node, deep=True), _line(node)


def _mapping_items(
    loader: yaml.SafeLoader, node: yaml.Node, path: str, allowed: list[str], section: str
) -> Iterator[tuple[str, yaml.Node]]:
    """Keys and value nodes of a YAML mapping whose keys must be in ``allowed``.

    ``section`` is empty for the top level (whose keys are sections) and else the section name.
    """
    kind, prefix = ("setting", f"{section}.") if section else ("section", "")
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(
            f"{section or 'top level'} (from {path}:{_line(node)})",
            f"expected a mapping of {kind}s: {', '.join(allowed)}",
        )
    seen: set[str] = set()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        setting = f"{prefix}{key} (from {path}:{_line(key_node)})"
        if not isinstance(key, str) or key not in allowed:
            raise ConfigError(setting, f"unknown {kind}; {_suggest(str(key), allowed)}")
        if key in seen:
            raise ConfigError(setting, "given twice in the same file")
        seen.add(key)
        yield key, value_node


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _resolve_reference(
    raw: object, base: Path, env: Mapping[str, str], dotted: str, where: str
) -> object:
    """Replace ``{"$env": NAME}`` by the variable's value and ``{"$file": PATH}`` by the file's
    content (relative paths from the config file's folder), so secrets stay out of files."""
    if not (isinstance(raw, dict) and len(raw) == 1):
        return raw
    ((key, target),) = raw.items()
    setting = f"{dotted} (from {where})"
    if key == "$env" and isinstance(target, str):
        if target not in env:
            raise ConfigError(setting, f"environment variable {target} is not set")
        return env[target]
    if key == "$file" and isinstance(target, str):
        return _read_secret(base / Path(target).expanduser(), setting)
    return raw


def _read_secret(path: Path, setting: str) -> str:
    try:
        return path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(setting, f"cannot read {path}: {exc}") from exc


def _from_env(env: Mapping[str, str]) -> dict[str, _Value]:
    """Settings given as ``MEDIC_<SECTION>_<FIELD>``, an alias, or ``<NAME>_FILE``."""
    values: dict[str, _Value] = {}
    for spec in setting_specs():
        given: list[tuple[str, str]] = []
        for name in spec.env:
            if name in env:
                given.append((name, env[name]))
            if name + FILE_SUFFIX in env:
                setting = f"{spec.dotted} (from {name + FILE_SUFFIX})"
                given.append(
                    (name + FILE_SUFFIX, _read_secret(Path(env[name + FILE_SUFFIX]), setting))
                )
        if len({text for _, text in given}) > 1:
            names = " and ".join(name for name, _ in given)
            raise ConfigError(spec.dotted, f"{names} are set to different values; set only one")
        if given:
            name, text = given[0]
            values[spec.dotted] = _Value(convert(spec, text, name), name)
    _warn_unknown_env(env)
    return values


def _warn_unknown_env(env: Mapping[str, str]) -> None:
    """Log unknown ``MEDIC_<SECTION>_*`` variables (a warning, not an error: orchestrators such
    as Kubernetes inject look-alikes like ``MEDIC_API_SERVICE_HOST``)."""
    for section in section_types():
        prefix = f"{ENV_PREFIX}{section.upper()}_"
        known = [name for spec in setting_specs() if spec.section == section for name in spec.env]
        allowed = {*known, *(name + FILE_SUFFIX for name in known)}
        for name in sorted(env):
            if name.startswith(prefix) and name not in allowed:
                hint = _suggest(name, known)
                logger.warning("ignoring unknown environment variable %s; %s", name, hint)


def _from_overrides(overrides: Mapping[str, object]) -> dict[str, _Value]:
    """Dotted overrides (``{"api.port": 8080}``); a ``None`` value means "not given"."""
    values: dict[str, _Value] = {}
    specs = specs_by_dotted()
    for dotted, raw in overrides.items():
        if dotted not in specs:
            raise ConfigError(f"{dotted} (from {OVERRIDE_SOURCE})", _unknown_dotted(dotted))
        if raw is not None:
            values[dotted] = _Value(convert(specs[dotted], raw, OVERRIDE_SOURCE), OVERRIDE_SOURCE)
    return values


def _unknown_dotted(dotted: str) -> str:
    """Why ``dotted`` is unknown: a bad section, or a bad setting of a known section."""
    section, _, _ = dotted.partition(".")
    if section in section_types():
        names = [spec.dotted for spec in setting_specs() if spec.section == section]
        return f"unknown setting; {_suggest(dotted, names)}"
    sections = [f"{name}.*" for name in section_types()]
    return f"unknown section {section!r}; {_suggest(section + '.*', sections)}"


# --- entry points ---------------------------------------------------------------------------


def load_settings_with_sources(
    *,
    config_path: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> tuple[Settings, dict[str, str]]:
    """Like :func:`load_settings`, also returning where each value came from.

    The map has every dotted setting, with ``"default"``, the config file's path, the name of the
    environment variable, or ``"override"``.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    layers: list[dict[str, _Value]] = []
    named_by = None
    if config_path is None and environ.get(CONFIG_ENV):
        config_path, named_by = environ[CONFIG_ENV], CONFIG_ENV
    if config_path is not None:
        layers.append(_from_file(config_path, named_by, environ))
    layers.append(_from_env(environ))
    layers.append(_from_overrides(overrides or {}))
    merged: dict[str, _Value] = {
        spec.dotted: _Value(spec.default, DEFAULT_SOURCE) for spec in setting_specs()
    }
    for layer in layers:
        merged.update(layer)
    return _build({k: v.value for k, v in merged.items()}), {k: v.source for k, v in merged.items()}


def load_settings(
    *,
    config_path: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Settings:
    """Build the effective settings: defaults < YAML file < environment < overrides.

    ``config_path`` defaults to ``$MEDIC_CONFIG`` (no file when neither is given); ``env=None``
    reads ``os.environ`` now. Raises :class:`~medic.errors.ConfigError` for any invalid input.
    """
    return load_settings_with_sources(config_path=config_path, env=env, overrides=overrides)[0]


def _build(values: Mapping[str, object]) -> Settings:
    sections: dict[str, Any] = {}
    for section, section_type in section_types().items():
        kwargs = {
            spec.name: values[spec.dotted] for spec in setting_specs() if spec.section == section
        }
        sections[section] = section_type(**kwargs)
    return Settings(**sections)
