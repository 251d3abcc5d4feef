"""Build :class:`~medic.config.settings.Settings` from its layers, strictly and with sources.

Precedence, lowest first: the dataclass defaults < a YAML file (``config_path``, else the file
named by ``MEDIC_CONFIG``) < environment variables ``MEDIC_<SECTION>_<FIELD>`` (plus aliases such
as ``MEDIC_DATABASE_URL``; ``<NAME>_FILE`` reads the value from a file) < overrides with dotted
keys (``"api.port"``), which is what the CLI passes.

Every value of every layer is parsed by the type annotated in ``settings.py`` and checked against
:data:`CONSTRAINTS`, the one table of allowed ranges. Any problem raises
:class:`~medic.errors.ConfigError` whose ``setting`` names the dotted setting and where the value
came from, and whose message says what is allowed::

    loop.interval_seconds (from MEDIC_LOOP_INTERVAL_SECONDS): expected a number > 0, got "fast"

Nothing is read at import time: the environment and the file are read when
:func:`load_settings` is called.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import logging
import math
import os
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from medic.config.settings import Settings
from medic.errors import ConfigError

__all__ = [
    "CONFIG_ENV",
    "CONSTRAINTS",
    "DEFAULT_SOURCE",
    "ENV_ALIASES",
    "ENV_PREFIX",
    "FILE_SUFFIX",
    "OVERRIDE_SOURCE",
    "Bounds",
    "NonEmpty",
    "SettingSpec",
    "load_settings",
    "load_settings_with_sources",
    "setting_specs",
]

logger = logging.getLogger(__name__)

ENV_PREFIX = "MEDIC_"
"""Prefix of every environment variable medic reads."""
CONFIG_ENV = "MEDIC_CONFIG"
"""Environment variable naming the YAML file when no path is passed."""
FILE_SUFFIX = "_FILE"
"""``MEDIC_X_FILE=/path`` sets ``MEDIC_X`` to the file's content (secrets)."""
DEFAULT_SOURCE = "default"
OVERRIDE_SOURCE = "override"


@dataclass(frozen=True, slots=True)
class Bounds:
    """Allowed range of a number setting; ``*_open`` makes that end exclusive."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def admits(self, value: object) -> bool:
        """Whether ``value`` (an int or float) lies in the range."""
        if not isinstance(value, int | float):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        """The range in words: ``> 0``, ``>= 1``, ``from 1 to 65535``, ``> 0 and < 1``."""
        if self.low is not None and self.high is not None and not (self.low_open or self.high_open):
            return f"from {_number(self.low)} to {_number(self.high)}"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
        return " and ".join(parts)


@dataclass(frozen=True, slots=True)
class NonEmpty:
    """A string setting that must not be empty (or only blanks)."""

    def admits(self, value: object) -> bool:
        """Whether ``value`` is a string with something other than blanks in it."""
        return isinstance(value, str) and bool(value.strip())

    def describe(self) -> str:
        """``non-empty``: placed before the type noun."""
        return "non-empty"


PORT = Bounds(1, 65535)
COUNT = Bounds(low=1)
POSITIVE = Bounds(low=0, low_open=True)
NON_NEGATIVE = Bounds(low=0)
FRACTION = Bounds(low=0, high=1, low_open=True, high_open=True)

CONSTRAINTS: Mapping[str, Bounds | NonEmpty] = {
    "scheduler.kind": NonEmpty(),
    "scheduler.cluster": NonEmpty(),
    "sim.nodes": COUNT,
    "sim.partitions": COUNT,
    "sim.jobs": NON_NEGATIVE,
    "sim.nodes_per_job": COUNT,
    "sim.seed": NON_NEGATIVE,
    "sim.iteration_seconds": POSITIVE,
    "sim.checkpoint_every": COUNT,
    "sim.nccl_timeout_seconds": POSITIVE,
    "sim.startup_seconds": NON_NEGATIVE,
    "sim.node_repair_seconds": POSITIVE,
    "detect.hang_k": POSITIVE,
    "detect.hang_floor_seconds": POSITIVE,
    "detect.straggler_drop": FRACTION,
    "detect.straggler_seconds": POSITIVE,
    "detect.settle_seconds": NON_NEGATIVE,
    "policy.max_attempts_without_progress": COUNT,
    "loop.interval_seconds": POSITIVE,
    "loop.error_backoff_seconds": NON_NEGATIVE,
    "api.host": NonEmpty(),
    "api.port": PORT,
}
"""Every range check, keyed by dotted setting name. A test checks each key names a setting."""

ENV_ALIASES: Mapping[str, tuple[str, ...]] = {
    "store.url": ("MEDIC_DATABASE_URL",),
}
"""Extra environment variables for a setting, besides ``MEDIC_<SECTION>_<FIELD>``."""


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """One leaf setting: where it lives, its type, default, env names and constraint."""

    section: str
    name: str
    type: type
    default: object
    env: tuple[str, ...]
    constraint: Bounds | NonEmpty | None

    @property
    def dotted(self) -> str:
        """``section.name``, as used in overrides, errors and the sources map."""
        return f"{self.section}.{self.name}"

    def type_name(self) -> str:
        """Type and constraint in words, without article: ``integer from 1 to 65535``."""
        if issubclass(self.type, enum.Enum):
            return "one of " + ", ".join(str(member.value) for member in self.type)
        noun = _TYPE_NOUNS[self.type]
        if isinstance(self.constraint, NonEmpty):
            return f"{self.constraint.describe()} {noun}"
        if self.constraint is not None:
            return f"{noun} {self.constraint.describe()}"
        return noun

    def expectation(self) -> str:
        """What an error message says is expected: ``an integer from 1 to 65535``."""
        text = self.type_name()
        if text.startswith("one of"):
            return text
        return f"{'an' if text[0] in 'aeiou' else 'a'} {text}"


@dataclass(frozen=True, slots=True)
class _Value:
    """A parsed value of one layer and the source recorded for it."""

    value: object
    source: str


class _InvalidError(Exception):
    """A raw value does not parse as the setting's type (turned into a ConfigError)."""


# --- parsing --------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_TYPE_NOUNS: Mapping[type, str] = {
    int: "integer",
    float: "number",
    bool: "boolean (true/false/yes/no/1/0)",
    str: "string",
}


def _parse_int(raw: object) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
        return int(raw.strip())
    raise _InvalidError


def _parse_float(raw: object) -> float:
    if isinstance(raw, bool):
        raise _InvalidError
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str) and _FLOAT_RE.fullmatch(raw.strip()):
        value = float(raw.strip())
    else:
        raise _InvalidError
    if not math.isfinite(value):
        raise _InvalidError
    return value


def _parse_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip().lower() in _BOOLS:
        return _BOOLS[raw.strip().lower()]
    raise _InvalidError


def _parse_str(raw: object) -> str:
    if isinstance(raw, str):
        return raw
    raise _InvalidError


def _parse_enum(enum_type: type[enum.Enum], raw: object) -> enum.Enum:
    if isinstance(raw, str):
        wanted = raw.strip().lower()
        for member in enum_type:
            if str(member.value).lower() == wanted:
                return member
    raise _InvalidError


_PARSERS: Mapping[type, Callable[[object], object]] = {
    int: _parse_int,
    float: _parse_float,
    bool: _parse_bool,
    str: _parse_str,
}


def _show(raw: object) -> str:
    """A raw value as an error message shows it: strings quoted, YAML spellings for the rest."""
    if isinstance(raw, str):
        text = raw if len(raw) <= 60 else raw[:57] + "..."
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw is None:
        return "nothing (null)"
    if isinstance(raw, dict | list):
        return f"a {'mapping' if isinstance(raw, dict) else 'list'}"
    return repr(raw)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _convert(spec: SettingSpec, raw: object, where: str) -> object:
    """Parse ``raw`` for ``spec`` and check its constraint; ``where`` names the source."""
    if issubclass(spec.type, enum.Enum):
        parser: Callable[[object], object] = functools.partial(_parse_enum, spec.type)
    else:
        parser = _PARSERS[spec.type]
    try:
        value = parser(raw)
    except _InvalidError:
        valid = False
    else:
        valid = spec.constraint is None or spec.constraint.admits(value)
    if not valid:
        raise ConfigError(
            f"{spec.dotted} (from {where})", f"expected {spec.expectation()}, got {_show(raw)}"
        )
    return value


# --- the settings model -----------------------------------------------------------------------


@functools.cache
def _section_types() -> dict[str, type]:
    hints = typing.get_type_hints(Settings)
    return {f.name: hints[f.name] for f in dataclasses.fields(Settings)}


@functools.cache
def setting_specs() -> tuple[SettingSpec, ...]:
    """Every leaf setting, in the order of ``settings.py``."""
    specs = []
    for section, section_type in _section_types().items():
        hints = typing.get_type_hints(section_type)
        for f in dataclasses.fields(section_type):
            field_type = hints[f.name]
            if field_type not in _PARSERS and not issubclass(field_type, enum.Enum):
                raise TypeError(f"{section}.{f.name}: unsupported setting type {field_type!r}")
            primary = f"{ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            dotted = f"{section}.{f.name}"
            specs.append(
                SettingSpec(
                    section=section,
                    name=f.name,
                    type=field_type,
                    default=_default(f),
                    env=(primary, *ENV_ALIASES.get(dotted, ())),
                    constraint=CONSTRAINTS.get(dotted),
                )
            )
    return tuple(specs)


def _default(f: dataclasses.Field[object]) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"setting {f.name} has no default")


@functools.cache
def _specs_by_dotted() -> dict[str, SettingSpec]:
    return {spec.dotted: spec for spec in setting_specs()}


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
            values[dotted] = _Value(_convert(_specs_by_dotted()[dotted], raw, where), path)
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
    sections = list(_section_types())
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
            values[spec.dotted] = _Value(_convert(spec, text, name), name)
    _warn_unknown_env(env)
    return values


def _warn_unknown_env(env: Mapping[str, str]) -> None:
    """Log unknown ``MEDIC_<SECTION>_*`` variables (a warning, not an error: orchestrators such
    as Kubernetes inject look-alikes like ``MEDIC_API_SERVICE_HOST``)."""
    for section in _section_types():
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
    specs = _specs_by_dotted()
    for dotted, raw in overrides.items():
        if dotted not in specs:
            raise ConfigError(f"{dotted} (from {OVERRIDE_SOURCE})", _unknown_dotted(dotted))
        if raw is not None:
            values[dotted] = _Value(_convert(specs[dotted], raw, OVERRIDE_SOURCE), OVERRIDE_SOURCE)
    return values


def _unknown_dotted(dotted: str) -> str:
    """Why ``dotted`` is unknown: a bad section, or a bad setting of a known section."""
    section, _, _ = dotted.partition(".")
    if section in _section_types():
        names = [spec.dotted for spec in setting_specs() if spec.section == section]
        return f"unknown setting; {_suggest(dotted, names)}"
    sections = [f"{name}.*" for name in _section_types()]
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
    for section, section_type in _section_types().items():
        kwargs = {
            spec.name: values[spec.dotted] for spec in setting_specs() if spec.section == section
        }
        sections[section] = section_type(**kwargs)
    return Settings(**sections)
