"""Logging for operators: text or JSON lines on stderr, and a logger that carries context.

:func:`configure_logging` installs one handler on the root logger (replacing the one it installed
before, so calling it twice does not duplicate lines). :class:`ContextLogger` wraps a logger and
adds ``cluster``, ``job``, ``node`` and ``incident`` to every record: as ``[cluster=a job=7]`` in
front of the message, and as separate keys in JSON lines, where the prefix is left out.

Modules keep ``logger = logging.getLogger(__name__)`` and pass arguments lazily
(``logger.info("drained %s", node)``). Decisions and actions are audit events, not log lines.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Any, TextIO

from medic.errors import ConfigError

__all__ = [
    "CONTEXT_KEYS",
    "LEVELS",
    "ContextLogger",
    "JsonFormatter",
    "configure_logging",
]

LEVELS: Mapping[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
"""Accepted ``level`` names (any case)."""
FORMATS = ("text", "json")
CONTEXT_KEYS = ("cluster", "job", "node", "incident")
"""Context a :class:`ContextLogger` carries, in prefix order."""
TEXT_FORMAT = "%(asctime)s %(levelname)-8s %(name)s: %(message)s"
_PREFIX_ATTR = "medic_prefix"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, context keys, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a single-line JSON object."""
        message = record.getMessage()
        prefix = getattr(record, _PREFIX_ATTR, "")
        if prefix and message.startswith(prefix):
            message = message[len(prefix) :]
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": message,
        }
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def configure_logging(
    level: str = "info", fmt: str = "text", *, stream: TextIO | None = None
) -> None:
    """Send log records at ``level`` and above to ``stream`` (stderr) as ``text`` or ``json``.

    Raises :class:`~medic.errors.ConfigError` for an unknown level or format.
    """
    number = LEVELS.get(level.strip().lower())
    if number is None:
        raise ConfigError("log level", f"expected one of {', '.join(LEVELS)}, got {level!r}")
    if fmt.strip().lower() not in FORMATS:
        raise ConfigError("log format", f"expected one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.set_name("medic")
    if fmt.strip().lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "medic"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)


class ContextLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger adapter that adds cluster/job/node/incident to each record's ``extra``.

    Text output shows them in front of the message (``[cluster=a job=7] requeued``); the JSON
    formatter shows them as keys instead. :meth:`bind` returns a logger with more context.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        cluster: object = None,
        job: object = None,
        node: object = None,
        incident: object = None,
    ) -> None:
        context = {"cluster": cluster, "job": job, "node": node, "incident": incident}
        super().__init__(logger, {k: v for k, v in context.items() if v is not None})

    def bind(self, **context: object) -> ContextLogger:
        """A logger for the same target with ``context`` added (or replaced)."""
        unknown = set(context) - set(CONTEXT_KEYS)
        if unknown:
            raise TypeError(f"unknown context keys {sorted(unknown)}; allowed: {CONTEXT_KEYS}")
        merged: dict[str, Any] = {**(self.extra or {}), **context}
        return ContextLogger(self.logger, **merged)

    def prefix(self) -> str:
        """``[cluster=a job=7] `` for the context set, or an empty string."""
        extra = self.extra or {}
        parts = [f"{key}={extra[key]}" for key in CONTEXT_KEYS if extra.get(key) is not None]
        return f"[{' '.join(parts)}] " if parts else ""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        """Merge the context into ``extra`` (the call's own ``extra`` wins)."""
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        """Log with the context prefix; ``%`` in it is escaped when ``args`` are formatted."""
        if not self.isEnabledFor(level):
            return
        msg, merged = self.process(msg, kwargs)
        prefix = self.prefix()
        if prefix:
            merged["extra"][_PREFIX_ATTR] = prefix
            msg = (prefix.replace("%", "%%") if args else prefix) + str(msg)
        merged.setdefault("stacklevel", _STACKLEVEL)
        self.logger.log(level, msg, *args, **merged)


# Frames outside the logging module between the caller and Logger.log: ContextLogger.log, then
# the caller (how findCaller counts since Python 3.11.5 / 3.12).
_STACKLEVEL = 2
