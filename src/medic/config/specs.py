"""Setting specs: what each setting is, and the strict parsing of one raw value for it.

:func:`setting_specs` describes every leaf setting of :class:`~medic.config.settings.Settings`
(section, name, annotated type, default, environment variable names and constraint), in the order
of ``settings.py``. :data:`CONSTRAINTS` is the one table of allowed ranges and :data:`ENV_ALIASES`
the extra environment variables. :func:`convert` parses a raw value (from a YAML file, the
environment or an override) by the setting's type (integer, number, boolean, string, list of
paths or enum) and checks its constraint; a problem raises :class:`~medic.errors.ConfigError`
naming the setting and where the value came from, and saying what is allowed::

    loop.interval_seconds (from MEDIC_LOOP_INTERVAL_SECONDS): expected a number > 0, got "fast"

How the layers are read and merged lives in :mod:`medic.config.loading`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeGuard

from medic.config.settings import Settings
from medic.errors import ConfigError

__all__ = [
    "CONSTRAINTS",
    "ENV_ALIASES",
    "ENV_PREFIX",
    "PATHS",
    "Bounds",
    "NonEmpty",
    "SettingSpec",
    "convert",
    "section_types",
    "setting_specs",
    "specs_by_dotted",
]

ENV_PREFIX = "MEDIC_"
"""Prefix of every environment variable medic reads."""
PATHS = tuple[str, ...]
"""The type of a setting that lists paths (``detect.extra_signature_files``)."""


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
    "detect.node_failure_wait_seconds": NON_NEGATIVE,
    "policy.max_attempts_without_progress": COUNT,
    "loop.interval_seconds": POSITIVE,
    "loop.error_backoff_seconds": NON_NEGATIVE,
    "loop.workers": Bounds(1, 64),
    "slurm.ssh_port": PORT,
    "slurm.command_timeout_seconds": POSITIVE,
    "slurm.snapshot_seconds": NON_NEGATIVE,
    "slurm.log_full_poll_seconds": NON_NEGATIVE,
    "controller.watchdog_timeout_seconds": POSITIVE,
    "controller.poll_seconds": POSITIVE,
    "controller.lease_seconds": Bounds(3.0, 3600.0),
    "attribution.timeout_seconds": POSITIVE,
    "attribution.name": NonEmpty(),
    "api.host": NonEmpty(),
    "api.port": PORT,
    "api.max_body_bytes": COUNT,
    "repair.hook_timeout_seconds": POSITIVE,
    "repair.validation_timeout_seconds": POSITIVE,
    "repair.rejoin_timeout_seconds": POSITIVE,
    "repair.max_recommendations_per_pass": COUNT,
}
"""Every range check, keyed by dotted setting name. A test checks each key names a setting."""

ENV_ALIASES: Mapping[str, tuple[str, ...]] = {
    "store.url": ("MEDIC_DATABASE_URL",),
    "slurm.slurm_conf": ("SLURM_CONF",),
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
        if _is_enum(self.type):
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
    PATHS: "list of paths (a YAML list, or one string with the paths separated by `:`)",
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


def _parse_paths(raw: object) -> tuple[str, ...]:
    """A list of non-blank strings, or one string of ``:``-separated paths (blanks dropped)."""
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(":") if part.strip())
    if isinstance(raw, list | tuple) and all(isinstance(p, str) and p.strip() for p in raw):
        return tuple(p.strip() for p in raw)
    raise _InvalidError


def _is_enum(kind: object) -> TypeGuard[type[enum.Enum]]:
    """Whether a setting's type is an enum (``tuple[str, ...]`` is no class: no issubclass)."""
    return isinstance(kind, type) and issubclass(kind, enum.Enum)


_PARSERS: Mapping[type, Callable[[object], object]] = {
    int: _parse_int,
    float: _parse_float,
    bool: _parse_bool,
    str: _parse_str,
    PATHS: _parse_paths,
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


def convert(spec: SettingSpec, raw: object, where: str) -> object:
    """Parse ``raw`` for ``spec`` and check its constraint; ``where`` names the source."""
    if _is_enum(spec.type):
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
def section_types() -> dict[str, type]:
    hints = typing.get_type_hints(Settings)
    return {f.name: hints[f.name] for f in dataclasses.fields(Settings)}


@functools.cache
def setting_specs() -> tuple[SettingSpec, ...]:
    """Every leaf setting, in the order of ``settings.py``."""
    specs = []
    for section, section_type in section_types().items():
        hints = typing.get_type_hints(section_type)
        for f in dataclasses.fields(section_type):
            field_type = hints[f.name]
            if field_type not in _PARSERS and not _is_enum(field_type):
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
def specs_by_dotted() -> dict[str, SettingSpec]:
    return {spec.dotted: spec for spec in setting_specs()}
