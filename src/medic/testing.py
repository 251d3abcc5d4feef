"""Public test kit: fakes for the ports that have no simulator of their own, and the API served
for real in a thread.

Used by medic's own tests and by anyone writing an adapter or detector against medic.
"""

from __future__ import annotations

import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Literal

import uvicorn

__all__ = ["FakeClock", "LiveServer"]


class FakeClock:
    """A clock that moves only when told to; starts at a fixed, deterministic instant."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime) -> None:
        if when < self._now:
            raise ValueError("FakeClock cannot go backwards")
        self._now = when


class LiveServer:
    """An ASGI app (``create_app(services)``) served by uvicorn on 127.0.0.1 in a daemon thread:
    real HTTP for tests. ``port`` 0 picks a free one; the same port can be served again after
    :meth:`stop` (a restarted control plane). A context manager: started on entry, stopped on
    exit.

    The socket names ``IPPROTO_TCP``: asyncio sets TCP_NODELAY only on sockets that say TCP, and
    without it every response waits ~40 ms on Nagle and delayed ACKs.
    """

    def __init__(
        self, app: Any, *, port: int = 0, lifespan: Literal["auto", "on", "off"] = "off"
    ) -> None:
        self.app = app
        self._lifespan = lifespan
        if port == 0:
            with self._bound(0) as probe:
                port = int(probe.getsockname()[1])
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._running: tuple[uvicorn.Server, threading.Thread, socket.socket] | None = None

    @staticmethod
    def _bound(port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        return sock

    def start(self, timeout: float = 10.0) -> LiveServer:
        """Serve (no-op when serving); returns once uvicorn accepts connections."""
        if self._running is not None:
            return self
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan=self._lifespan, ws="none", http="h11"
        )
        server, sock = uvicorn.Server(config), self._bound(self.port)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        self._running = (server, thread, sock)
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving (no-op when stopped)."""
        if self._running is None:
            return
        server, thread, sock = self._running
        server.should_exit = True
        thread.join(10)
        sock.close()
        self._running = None

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
