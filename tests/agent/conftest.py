"""The medic API with the alerts router, served by uvicorn on 127.0.0.1 in a thread, over a real
SQLite store and a FakeClock; it can be stopped and started again on the same port (the control
plane going away and coming back).

The control plane's packages are imported where they are used, so the agent's own tests (NVML,
checks, kernel log) also run where only the agent's dependencies are installed (the GPU device
check)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from medic.testing import FakeClock, LiveServer

if TYPE_CHECKING:
    from medic.services import Services

CLUSTER = "c1"


Server = LiveServer
"""The API served for real; ``stop()`` then ``start()`` serves it again on the same port."""


TOKENS = {"agent": "detector", "nvsentinel": "detector", "viewer": "viewer", "alice": "operator"}
"""API tokens by name and role: ``agent`` posts as every ``agent:<node>``, ``viewer`` reads,
``alice`` is a person who may resolve any alert."""


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
