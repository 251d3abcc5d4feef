"""The medic API with the alerts router, served by uvicorn on 127.0.0.1 in a thread, over a real
SQLite store and a FakeClock; it can be stopped and started again on the same port (the control
plane going away and coming back).

The control plane's packages are imported where they are used, so the agent's own tests (NVML,
checks, kernel log) also run where only the agent's dependencies are installed (the GPU device
check)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from medic.testing import FakeClock

if TYPE_CHECKING:
    import uvicorn

    from medic.control.services import Services

CLUSTER = "c1"


def _bound(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


class Server:
    def __init__(self, app: Any) -> None:
        self.app = app
        probe = _bound(0)
        self.port = probe.getsockname()[1]
        probe.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        import uvicorn

        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", ws="none", http="h11"
        )
        self._server = uvicorn.Server(config)
        sock = _bound(self.port)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.005)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self._server = self._thread = None


TOKENS = {"agent": "detector", "nvsentinel": "detector", "viewer": "viewer"}
"""API tokens by name and role: ``agent`` posts as every ``agent:<node>``, ``viewer`` reads."""


@dataclass
class Api:
    services: Services
    clock: FakeClock
    server: Server
    http: httpx.Client
    """Posts with the ``agent`` detector token unless told otherwise (``headers=api.as_(name)``)."""
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url

    def as_(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def alerts(self, **params: Any) -> list[dict[str, Any]]:
        response = self.http.get("/api/v1/alerts", params=params, headers=self.as_("viewer"))
        assert response.status_code == 200, response.text
        body: list[dict[str, Any]] = response.json()
        return body


def _has_alert_store(services: Services) -> bool:
    return callable(getattr(services.store, "upsert_alert", None))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    from api.auth_kit import grant
    from medic.api.alerts import router as alerts_router
    from medic.api.app import create_app
    from medic.config.loading import load_settings
    from medic.domain.auth import Role
    from medic.wiring import build

    clock = FakeClock()
    settings = load_settings(
        env={},
        overrides={"store.url": f"sqlite:///{tmp_path / 'medic.db'}", "scheduler.cluster": CLUSTER},
    )
    services = build(settings, clock=clock)
    if not _has_alert_store(services):
        services.close()
        pytest.skip("the SQL store does not implement RepairStore.upsert_alert yet")
    app = create_app(services)
    if not any(getattr(r, "path", None) == "/api/v1/alerts" for r in app.routes):
        app.include_router(alerts_router)  # until create_app includes the alerts router
    tokens = {name: grant(services.store, Role(role), name) for name, role in TOKENS.items()}
    server = Server(app)
    server.start()
    http = httpx.Client(
        base_url=server.url,
        timeout=5.0,
        headers={"Authorization": f"Bearer {tokens['agent']}"},
    )
    try:
        yield Api(services, clock, server, http, tokens)
    finally:
        http.close()
        server.stop()
        services.close()
