"""A job's medic options from its comment, as the loop reads them: ``policy.options``' parser, plus
a clear error for the one input that parser lets through as a plain ``ValueError``.

Python refuses to convert an integer of more than ``sys.get_int_max_str_digits()`` digits (4300
by default), so ``json.loads`` of a comment holding one raises ``ValueError``, not the
``InputError`` of an invalid option: the job's evaluation failed on every pass (an error row
each time) and the job was never watched. :func:`job_options` turns it into the ``InputError`` of
the option that holds it, which the loop records once and handles like any invalid option; an
integer that long outside medic's section is the owner's business and is not read.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from medic.errors import InputError
from medic.policy.options import MAX_ATTEMPTS_LIMIT, JobOptions, parse_job_options

__all__ = ["job_options"]

_WHERE = "job comment"
_EXAMPLE = '{"medic": {"mode": "observe"}}'
_OPTIONS = ("environment", "max_attempts_without_progress", "mode")


class _TooLong:
    """Stands for an integer too long to convert, where the comment holds it."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def job_options(comment: str | None) -> JobOptions:
    """:func:`~medic.policy.options.parse_job_options`, with an over-long integer reported as an
    ``InputError`` naming its option (``where`` = ``job comment``)."""
    try:
        return parse_job_options(comment)
    except ValueError:  # not JSONDecodeError (the parser handles it): int's digit limit
        if comment is None:
            raise
    document = _read_bounded(comment)
    section = document.get("medic") if isinstance(document, dict) else None
    found = _find(section, "medic")
    if found is not None:
        path, digits = found
        raise InputError(_WHERE, _message(path, digits))
    # Only outside medic's section: read medic's options without the owner's long number.
    return parse_job_options(json.dumps(document, default=lambda _: None))


def _read_bounded(comment: str) -> Any:
    limit = sys.get_int_max_str_digits() or sys.maxsize

    def bounded(text: str) -> int | _TooLong:
        digits = len(text.lstrip("-"))
        return _TooLong(digits) if digits > limit else int(text)

    try:
        return json.loads(comment, parse_int=bounded)
    except json.JSONDecodeError as exc:
        if "medic" not in comment.lower():
            return None  # plain text that is not medic's, as parse_job_options reads it
        raise InputError(
            _WHERE,
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}; write medic's"
            f" options as JSON, e.g. {_EXAMPLE}",
        ) from exc
    except RecursionError:
        return None  # absurdly nested: not a comment anyone wrote for medic


def _find(value: Any, path: str) -> tuple[str, int] | None:
    """The path and length of an over-long integer under ``value`` (depth first; a loop, since
    the document may be nested as deep as the JSON parser goes)."""
    pending: list[tuple[str, Any]] = [(path, value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, _TooLong):
            return where, item.digits
        if isinstance(item, dict):
            pending.extend((f"{where}.{key}", child) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            pending.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(item))))
    return None


def _message(path: str, digits: int) -> str:
    expected = {
        "medic": f"an object such as {_EXAMPLE}",
        "medic.max_attempts_without_progress": f"an integer from 1 to {MAX_ATTEMPTS_LIMIT}",
    }.get(path, f"one of its values (the options are {', '.join(_OPTIONS)})")
    return f"{path}: expected {expected}, got an integer of {digits} digits; write a small number"
