"""Requests without NUL characters or lone surrogates: each is replaced by U+FFFD before the app
sees it (``medic.domain.text``).

PostgreSQL cannot store NUL in text, so a NUL in a path, a query parameter or a JSON body would
otherwise surface as a 503 from the database; a lone surrogate (``"\\udfff"``) in a JSON body
would be stored and then fail, as a 500, every read that answers it. Replacing them is what medic
already does with bytes it cannot decode in logs; no name medic knows contains one, so a lookup
with it simply finds nothing. Only JSON bodies are rewritten (there both can only be written as
escapes, ``\\u0000`` and ``\\udfff``, and the rewrite keeps the body's length), and only when
they contain one. The store replaces them too, in everything it writes or reads, so text that
reaches it another way (a log line, a job comment) cannot break a read either.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from medic.api.limits import replay
from medic.domain.text import REPLACEMENT, clean_json_bytes

__all__ = ["UnstorableReplacing"]

_ENCODED_NUL = re.compile(rb"%00")


class UnstorableReplacing:
    """ASGI middleware: NUL -> U+FFFD in the path, the query string and JSON bodies, and lone
    surrogates -> U+FFFD in JSON bodies."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = _clean_scope(scope)
        if not _is_json(scope):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, replay(message, receive), send)  # gone before the body
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        cleaned = clean_json_bytes(bytes(body))
        await self.app(scope, replay({"type": "http.request", "body": cleaned}, receive), send)


def _clean_scope(scope: Scope) -> Scope:
    path: str = scope.get("path", "")
    query: bytes = scope.get("query_string", b"")
    raw_path: bytes | None = scope.get("raw_path")
    if "\x00" not in path and b"%00" not in query and not (raw_path and b"%00" in raw_path):
        return scope
    cleaned: dict[str, Any] = dict(scope)
    cleaned["path"] = path.replace("\x00", REPLACEMENT)
    cleaned["query_string"] = _ENCODED_NUL.sub(b"%EF%BF%BD", query)
    if raw_path is not None:
        cleaned["raw_path"] = _ENCODED_NUL.sub(b"%EF%BF%BD", raw_path)
    return cleaned


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-type":
            return b"json" in value.lower()
    return False
