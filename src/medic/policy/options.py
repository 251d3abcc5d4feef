"""Per-job options: what a job's owner tells medic through the job comment.

The comment is JSON with medic's section under the ``"medic"`` key::

    {"medic": {"mode": "observe", "environment": "prod", "max_attempts_without_progress": 3}}

A comment that is not medic's (empty, plain text, JSON without a ``"medic"`` key) gives empty
options: the comment belongs to its owner. A comment that is medic's but wrong raises
``InputError`` with a message that says what is wrong and how to fix it, so the loop can record
it (audit ``job-options-invalid``) and fall back to the cluster defaults. ``null`` leaves an
option unset.

Pure: parses a string; no I/O.
"""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import dataclass
from typing import Any

from medic.domain.cluster import Mode
from medic.errors import InputError

__all__ = ["MAX_ATTEMPTS_LIMIT", "JobOptions", "parse_job_options"]

MAX_ATTEMPTS_LIMIT = 100
"""Largest accepted ``max_attempts_without_progress``."""
_MAX_ENVIRONMENT_CHARS = 64
_WHERE = "job comment"
_EXAMPLE = '{"medic": {"mode": "observe"}}'
_OPTIONS = ("environment", "max_attempts_without_progress", "mode")


@dataclass(frozen=True, slots=True)
class JobOptions:
    """medic's options for one job; None means "use the cluster setting"."""

    mode: Mode | None = None
    environment: str | None = None
    """Free-form label (e.g. ``prod``), shown with the job's advice and audit events."""
    max_attempts_without_progress: int | None = None
    """Overrides ``policy.max_attempts_without_progress`` for this job."""

    def to_dict(self) -> dict[str, object]:
        """The options that are set, JSON-ready (for ``Job.options``)."""
        values: dict[str, object] = {
            "mode": self.mode.value if self.mode is not None else None,
            "environment": self.environment,
            "max_attempts_without_progress": self.max_attempts_without_progress,
        }
        return {key: value for key, value in values.items() if value is not None}


def _show(value: Any) -> str:
    """The value as the user wrote it (JSON), shortened."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of duplicate keys silently; for medic's keys that hides a mistake.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result and (key == "medic" or key in _OPTIONS):
            raise InputError(_WHERE, f'the key "{key}" appears twice; keep one')
        result[key] = value
    return result


def _parse_mode(value: Any) -> Mode:
    allowed = [m.value for m in Mode]
    if not isinstance(value, str) or value not in allowed:
        raise InputError(_WHERE, f'medic.mode: expected "observe" or "act", got {_show(value)}')
    return Mode(value)


def _parse_environment(value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(_WHERE, f"medic.environment: expected a string, got {_show(value)}")
    if not value.strip() or len(value) > _MAX_ENVIRONMENT_CHARS:
        raise InputError(
            _WHERE,
            f"medic.environment: expected 1 to {_MAX_ENVIRONMENT_CHARS} characters,"
            f" got {_show(value)}",
        )
    return value


def _parse_max_attempts(value: Any) -> int:
    # bool is an int in Python; true/false is not a count.
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 1 <= value <= MAX_ATTEMPTS_LIMIT
    ):
        raise InputError(
            _WHERE,
            f"medic.max_attempts_without_progress: expected an integer from 1 to"
            f" {MAX_ATTEMPTS_LIMIT}, got {_show(value)}",
        )
    return value


class _TooLong:
    """An integer longer than Python converts (``sys.get_int_max_str_digits()``, 4300 digits by
    default), where the comment holds it: ``int()`` would raise a plain ``ValueError``."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _bounded_int(text: str) -> int | _TooLong:
    digits = len(text.lstrip("-"))
    limit = sys.get_int_max_str_digits() or sys.maxsize
    return _TooLong(digits) if digits > limit else int(text)


def _too_long(value: Any, path: str) -> None:
    """Raise the ``InputError`` of an over-long integer under ``value``, naming its option (a
    loop, not recursion: the document may be nested as deep as the JSON parser goes)."""
    pending: list[tuple[str, Any]] = [(path, value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, _TooLong):
            expected = {
                "medic": f"an object such as {_EXAMPLE}",
                "medic.max_attempts_without_progress": (
                    f"an integer from 1 to {MAX_ATTEMPTS_LIMIT}"
                ),
            }.get(where, f"one of its values (the options are {', '.join(_OPTIONS)})")
            raise InputError(
                _WHERE,
                f"{where}: expected {expected}, got an integer of {item.digits} digits;"
                " write a small number",
            )
        if isinstance(item, dict):
            pending.extend((f"{where}.{key}", child) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            pending.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(item))))


def _load(comment: str) -> Any:
    """The comment as JSON; None when it is not JSON and not meant for medic. An over-long
    integer is read as a :class:`_TooLong` (outside medic's section it is the owner's)."""
    try:
        return json.loads(comment, object_pairs_hook=_reject_duplicates, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        stripped = comment.lstrip()
        # Plain text is the owner's; text that opens like JSON and mentions medic was meant for us.
        if stripped[:1] in ("{", "[") and "medic" in comment.lower():
            raise InputError(
                _WHERE,
                f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg};"
                f" write medic's options as JSON, e.g. {_EXAMPLE}",
            ) from exc
        return None
    except RecursionError:
        # Absurdly nested JSON: not a comment anyone wrote for medic.
        return None


def parse_job_options(comment: str | None) -> JobOptions:
    """medic's options from a job comment (see the module docstring).

    Raises ``InputError`` (``where`` = ``job comment``) when the comment is meant for medic but
    invalid: broken JSON mentioning medic, a ``"medic"`` value that is not an object, an unknown
    key, a wrong type, an out-of-range value or an integer too long to convert.
    """
    if comment is None or not comment.strip():
        return JobOptions()
    document = _load(comment)
    if not isinstance(document, dict) or "medic" not in document:
        return JobOptions()
    section = document["medic"]
    if section is None:
        return JobOptions()
    _too_long(section, "medic")
    if not isinstance(section, dict):
        raise InputError(
            _WHERE, f"medic: expected an object such as {_EXAMPLE}, got {_show(section)}"
        )
    unknown = sorted(set(section) - set(_OPTIONS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], _OPTIONS, n=1)
        hint = f'did you mean "{close[0]}"? ' if close else ""
        raise InputError(
            _WHERE,
            f"medic.{unknown[0]}: unknown option; {hint}the options are {', '.join(_OPTIONS)}",
        )
    mode, environment, attempts = (
        section.get(key) for key in ("mode", "environment", "max_attempts_without_progress")
    )
    return JobOptions(
        mode=_parse_mode(mode) if mode is not None else None,
        environment=_parse_environment(environment) if environment is not None else None,
        max_attempts_without_progress=(
            _parse_max_attempts(attempts) if attempts is not None else None
        ),
    )
