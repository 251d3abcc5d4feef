"""The stable public surface: ``medic.__all__``, the error tree and its retry semantics."""

from __future__ import annotations

import importlib
import inspect
import tomllib
from pathlib import Path

import pytest

import medic
import medic.errors
from medic.errors import (
    AdapterError,
    ConfigError,
    ConflictError,
    InputError,
    MedicError,
    NotFoundError,
    PermanentError,
    PolicyViolation,
    SafetyBudgetExceeded,
    StoreError,
    TransientError,
    UnauthorizedError,
    is_retryable,
)

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = {
    "AdapterError",
    "ConfigError",
    "ConflictError",
    "InputError",
    "MedicError",
    "NotFoundError",
    "PermanentError",
    "PolicyViolation",
    "SafetyBudgetExceeded",
    "StoreError",
    "TransientError",
    "UnauthorizedError",
    "__version__",
}


def test_all_is_pinned() -> None:
    assert set(medic.__all__) == PUBLIC
    assert len(medic.__all__) == len(PUBLIC), "a name is listed twice"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_is_importable(name: str) -> None:
    module = importlib.import_module("medic")

    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from medic import {name}", namespace)
    assert namespace[name] is getattr(medic, name)


def test_public_errors_are_the_ones_of_medic_errors() -> None:
    for name in PUBLIC - {"__version__"}:
        assert getattr(medic, name) is getattr(medic.errors, name)


def test_version_matches_the_package_metadata() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

    assert medic.__version__ == pyproject["project"]["version"]


# --- the error tree -------------------------------------------------------------------------


def _error_classes() -> list[type[BaseException]]:
    return [
        cls
        for _, cls in inspect.getmembers(medic.errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == "medic.errors"
    ]


def test_errors_module_exports_every_error_class() -> None:
    assert {cls.__name__ for cls in _error_classes()} <= set(medic.errors.__all__)


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_derives_from_medic_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, MedicError)
    assert issubclass(cls, Exception)


@pytest.mark.parametrize(
    ("cls", "parent"),
    [
        (ConfigError, MedicError),
        (InputError, MedicError),
        (AdapterError, MedicError),
        (TransientError, AdapterError),
        (PermanentError, AdapterError),
        (NotFoundError, PermanentError),
        (UnauthorizedError, AdapterError),
        (StoreError, MedicError),
        (ConflictError, StoreError),
        (PolicyViolation, MedicError),
        (SafetyBudgetExceeded, MedicError),
    ],
    ids=lambda value: value.__name__,
)
def test_error_tree_matches_its_documentation(
    cls: type[MedicError], parent: type[MedicError]
) -> None:
    assert cls.__bases__ == (parent,)


def test_config_and_input_errors_say_where() -> None:
    config = ConfigError("api.port (from MEDIC_API_PORT)", "expected an integer")
    bad_input = InputError("job comment", "not JSON")

    assert str(config) == "api.port (from MEDIC_API_PORT): expected an integer"
    assert (config.setting, config.message) == (
        "api.port (from MEDIC_API_PORT)",
        "expected an integer",
    )
    assert str(bad_input) == "job comment: not JSON"
    assert (bad_input.where, bad_input.message) == ("job comment", "not JSON")


def test_transient_error_carries_a_retry_hint() -> None:
    assert TransientError("busy", retry_after=2.5).retry_after == 2.5
    assert TransientError("busy").retry_after is None


# --- retry semantics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (TransientError("scheduler busy"), True),
        (StoreError("database locked"), True),
        (ConflictError("lost a compare-and-set"), True),
        (PermanentError("no such partition"), False),
        (NotFoundError("no job 7"), False),
        (ConfigError("loop.interval_seconds", "expected a number"), False),
        (InputError("job comment", "not JSON"), False),
        (UnauthorizedError("token refused"), False),
        (PolicyViolation("observe mode"), False),
        (SafetyBudgetExceeded("budget spent"), False),
        (RuntimeError("a bug"), True),
        (KeyError("x"), True),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_is_retryable(error: BaseException, retryable: bool) -> None:
    assert is_retryable(error) is retryable
