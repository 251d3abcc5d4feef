"""A flood of refused requests writes a bounded number of audit rows, and accounts for all."""

from __future__ import annotations

import warnings
from pathlib import Path

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.audit import AuditKind
from medic.testing import FakeClock
from medic.wiring import build

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

FLOOD = 300


def test_an_anonymous_flood_is_audited_within_the_rate_and_fully_counted(tmp_path: Path) -> None:
    clock = FakeClock()
    settings = load_settings(env={}, overrides={"store.url": f"sqlite:///{tmp_path / 'm.db'}"})
    services = build(settings, clock=clock)
    try:
        with TestClient(create_app(services)) as client:
            for n in range(FLOOD):
                clock.advance(0.1)  # 30 s in all
                response = client.get("/api/v1/jobs")
                assert response.status_code == 401, n  # every one refused, written or not
        events = services.store.query_audit(kind=AuditKind.ACCESS_DENIED, limit=10_000)
    finally:
        services.close()

    answered = [e for e in events if "method" in e.payload]
    flushed = [e for e in events if "method" not in e.payload]
    assert 20 <= len(answered) <= 30, "the burst, then 10 a minute"
    assert answered[0].payload["suppressed"] == 0
    assert len(flushed) == 1 and flushed[0].payload["principal"] == "anonymous"
    counted = sum(1 + e.payload["suppressed"] for e in answered)
    assert counted + flushed[0].payload["suppressed"] == FLOOD
