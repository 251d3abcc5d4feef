"""Bounded request bodies, and the caller known before a protected route's body is read.

Without a bound, one unauthenticated 200 MB POST took the server from 148 MB to 948 MB: the body
was read whole, and parsed as JSON, before authentication ran (FastAPI parses the body before it
resolves a route's dependencies). :class:`BodyGuard`, the outermost middleware, answers in order:

1. 413 ``body_too_large`` when ``Content-Length`` is over the path's limit, without reading any
   of the body;
2. the refusal (401 ``unauthenticated``, 403 ``csrf_failed``; audited as always) when the request
   carries a body to a route that needs credentials and its caller has none that are valid,
   again before a byte of the body is read (the ``gate``, ``medic.api.auth.refuse_before_body``);
3. 413 as soon as a body without ``Content-Length`` (chunked) grows past the limit while it is
   read: at most ``limit`` bytes are ever held, and the rest is never read.

Limits are per path prefix (:class:`BodyLimits`): ``api.max_body_bytes`` for everything, and a
larger one for a route that needs it (the log push endpoint) by adding its prefix to ``routes``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from medic.api.problems import problem

__all__ = ["BodyGuard", "BodyLimits", "Gate", "replay"]

Gate = Callable[[Scope], Awaitable[ASGIApp | None]]
"""Decides from the request's headers alone: an ASGI response that refuses it, or None."""


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """The largest body accepted: ``default`` (``api.max_body_bytes``), or ``routes[prefix]`` for
    a path under ``prefix`` (the longest matching prefix wins)."""

    default: int
    routes: Mapping[str, int] = field(default_factory=dict)

    def for_path(self, path: str) -> tuple[int, str]:
        """The limit for ``path``, and the setting (or route) it comes from, for the message."""
        matching = [prefix for prefix in self.routes if path.startswith(prefix)]
        if not matching:
            return self.default, "api.max_body_bytes"
        prefix = max(matching, key=len)
        return self.routes[prefix], f"the limit of {prefix}"


class BodyGuard:
    """ASGI middleware: bounds each request body and runs ``gate`` before any body is read (see
    the module docstring)."""

    def __init__(self, app: ASGIApp, *, limits: BodyLimits, gate: Gate | None = None) -> None:
        self.app = app
        self.limits = limits
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = _framing(scope)
        if not chunked and not declared:
            await self.app(scope, receive, send)  # no body: nothing to bound or to wait for
            return
        limit, source = self.limits.for_path(scope.get("path", ""))
        if declared is not None and declared > limit:
            await _too_large(limit, source)(scope, receive, send)
            return
        if self.gate is not None:
            refusal = await self.gate(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, replay(message, receive), send)  # gone before the body
                return
            body += message.get("body", b"")
            if len(body) > limit:
                await _too_large(limit, source)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, replay({"type": "http.request", "body": bytes(body)}, receive), send)


def _framing(scope: Scope) -> tuple[int | None, bool]:
    """``Content-Length`` (None when absent or unreadable) and whether the body is chunked."""
    declared: int | None = None
    chunked = False
    for name, value in scope.get("headers", ()):
        lower = name.lower()
        if lower == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                chunked = True  # unreadable: read it as if chunked, bounded all the same
        elif lower == b"transfer-encoding":
            chunked = True
    return declared, chunked


def _too_large(limit: int, source: str) -> ASGIApp:
    return problem(
        413,
        "body_too_large",
        f"the request body is larger than {limit} bytes ({source}); send a smaller body, or "
        "raise api.max_body_bytes if such bodies are expected",
        headers={"Connection": "close"},  # the rest of the body is never read
    )


def replay(first: Message, rest: Receive) -> Receive:
    """``first``, then whatever the server sends next (a disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await rest()

    return receive
