"""Requests without NUL characters: each one is replaced by U+FFFD before the app sees it.

PostgreSQL cannot store NUL in text, so a NUL in a path, a query parameter or a JSON body would
otherwise surface as a 503 from the database. Replacing it is what medic already does with bytes
it cannot decode in logs; no name medic knows contains one, so a lookup with it simply finds
nothing. Only ``application/json`` bodies are rewritten (NUL can only be written as ``\\u0000``
there), and only when they contain one.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["NulReplacing"]

REPLACEMENT = "\ufffd"
_ENCODED_NUL = re.compile(rb"%00")
# ``\u0000`` preceded by an even number of backslashes (an odd number escapes the first one).
_JSON_NUL = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")


class NulReplacing:
    """ASGI middleware: NUL -> U+FFFD in the path, the query string and JSON bodies."""

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
                await self.app(scope, _replay(message, receive), send)  # gone before the body
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        cleaned = _JSON_NUL.sub(rb"\1\\ufffd", bytes(body)) if b"\\u0000" in body else bytes(body)
        await self.app(scope, _replay({"type": "http.request", "body": cleaned}, receive), send)


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


def _replay(first: Message, rest: Receive) -> Receive:
    """``first``, then whatever the server sends next (a disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await rest()

    return receive
