"""An external attribution service's verdict is recorded beside medic's, never in its way."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from medic.config.loading import load_settings
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.faults import FaultKind
from medic.testing import FakeClock
from medic.wiring import build

ANSWER: dict[str, object] = {}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = dict(ANSWER) or {
            "domain": "hardware",
            "action": "restart",
            "implicated_nodes": [],
            "confidence": 0.7,
            "summary": f"seen {len(body.get('evidence', []))} lines",
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def service_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/attribute"
    server.shutdown()


def _run(tmp_path: Path, url: str) -> list[AuditEvent]:
    settings = load_settings(
        env={},
        overrides={
            "store.url": f"sqlite:///{tmp_path / 'm.db'}",
            "scheduler.mode": "act",
            "sim.nodes": 8,
            "sim.jobs": 1,
            "sim.nodes_per_job": 2,
            "attribution.url": url,
        },
    )
    clock = FakeClock()
    services = build(settings, clock=clock, start_workload=True)
    for _ in range(30):
        clock.advance(0.2)
        services.loop.run_once()
    assert services.injector is not None
    fault = services.injector.inject(FaultKind.GPU_FELL_OFF_BUS)
    for _ in range(15):
        clock.advance(0.2)
        services.loop.run_once()
    services.close()  # waits for the second opinion in flight
    store = build(settings, clock=clock).store
    events = store.query_audit(job_id=fault.job_id, kind=AuditKind.EXTERNAL_VERDICT)
    # medic acted on its own verdict whatever the service said.
    assert store.query_audit(job_id=fault.job_id, kind=AuditKind.ACTION_SUCCEEDED)
    return events


def test_external_verdict_is_recorded_and_compared(tmp_path: Path, service_url: str) -> None:
    ANSWER.clear()
    [event] = _run(tmp_path, service_url)
    assert event.verdict == "hardware" and event.action == "restart"
    payload = event.payload
    assert payload["provider"] == "external"
    assert payload["agrees"] is False  # medic implicated the node; this service named none
    assert payload["summary"].startswith("seen ")


def test_unreachable_service_is_recorded_as_an_error(tmp_path: Path) -> None:
    [event] = _run(tmp_path, "http://127.0.0.1:9/attribute")
    assert event.payload["retryable"] is True
    assert "error" in event.payload
