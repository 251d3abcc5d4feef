"""The HTTP attribution provider against a real HTTP server on 127.0.0.1 (no mocks)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.errors import ConfigError, PermanentError, TransientError
from medic.external import HttpAttributionProvider
from medic.external.attribution_http import REQUEST_SCHEMA
from medic.ports import AttributionProvider

NODES = (NodeName("node001"), NodeName("node002"))
JOB = Job(
    id=JobId("481516"),
    cluster=ClusterName("dgx"),
    name="gpt",
    state=JobState.FAILED,
    partition="batch",
    nodes=NODES,
    num_nodes=2,
    restart_count=2,
)
T0 = datetime(2026, 3, 14, 10, 0, tzinfo=UTC)
GOOD = {
    "domain": "hardware",
    "action": "restart",
    "implicated_nodes": ["node002"],
    "confidence": 0.8,
    "summary": "GPU 3 on node002\nfell off the bus",
}


def detection(signature: str, role: Role, node: NodeName, text: str) -> Detection:
    return Detection(
        job_id=JOB.id,
        attempt=2,
        signature_id=SignatureId(signature),
        domain=FaultDomain.HARDWARE if role is Role.ROOT else FaultDomain.NONE,
        role=role,
        severity=Severity.ERROR,
        action=JobAction.RESTART if role is Role.ROOT else JobAction.NONE,
        time=T0,
        node=node,
        rank=None,
        implicates_node=role is Role.ROOT,
        text=text,
    )


DETECTIONS = [
    detection("xid.fallen_off_bus", Role.ROOT, NODES[1], "NVRM: Xid (PCI:0000:3a:00): 79, ..."),
    detection("megatron.iteration", Role.PROGRESS, NODES[0], "iteration 100/1000 | ..."),
]


@dataclass
class Server:
    """A tiny HTTP server; ``answer`` decides each response, ``requests`` records bodies."""

    answer: Callable[[BaseHTTPRequestHandler], None]
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""


def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(answer=lambda h: reply(h, 200, json.dumps(GOOD).encode()))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            state.requests.append(json.loads(self.rfile.read(length)))
            state.answer(self)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    class Quiet(ThreadingHTTPServer):
        daemon_threads = True
        block_on_close = False

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that gave up (the timeout test) is not an error here

    httpd = Quiet(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/attribute"
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def provider(url: str, timeout_s: float = 2.0) -> HttpAttributionProvider:
    return HttpAttributionProvider(url, timeout_s=timeout_s, name="nvrx")


def test_good_answer_becomes_a_verdict_and_the_request_carries_the_evidence(
    server: Server,
) -> None:
    with provider(server.url) as p:
        port: AttributionProvider = p
        verdict = port.attribute(JOB, 2, DETECTIONS)
    assert verdict == Verdict(
        job_id=JOB.id,
        attempt=2,
        domain=FaultDomain.HARDWARE,
        action=JobAction.RESTART,
        implicated_nodes=frozenset({NODES[1]}),
        confidence=0.8,
        root_signature=None,
        summary="GPU 3 on node002 fell off the bus",
    )
    assert port.name == "nvrx"
    (request,) = server.requests
    assert request["schema"] == REQUEST_SCHEMA and request["attempt"] == 2
    assert request["job"]["id"] == "481516" and request["job"]["nodes"] == ["node001", "node002"]
    assert [e["signature"] for e in request["evidence"]] == ["xid.fallen_off_bus"]  # no progress
    assert request["evidence"][0]["node"] == "node002" and not request["evidence_truncated"]


def test_evidence_is_capped(server: Server) -> None:
    many = [DETECTIONS[0]] * 5
    with HttpAttributionProvider(server.url, 2.0, "nvrx", max_evidence=3) as p:
        p.attribute(JOB, 2, many)
    assert len(server.requests[0]["evidence"]) == 3 and server.requests[0]["evidence_truncated"]


def test_http_500_is_transient(server: Server) -> None:
    server.answer = lambda h: reply(h, 500, b'{"error": "model backend down"}')
    with provider(server.url) as p, pytest.raises(TransientError) as err:
        p.attribute(JOB, 2, DETECTIONS)
    assert "answered HTTP 500 Internal Server Error" in str(err.value)
    assert "model backend down" in str(err.value) and "'nvrx'" in str(err.value)


def test_503_and_429_are_transient_with_retry_after(server: Server) -> None:
    for status in (503, 429):
        server.answer = lambda h, s=status: reply(h, s, b"busy", Retry_After="7")  # type: ignore[misc]
        with provider(server.url) as p, pytest.raises(TransientError) as err:
            p.attribute(JOB, 2, DETECTIONS)
        assert err.value.retry_after == 7.0


def test_timeout_is_transient_and_bounded(server: Server) -> None:
    def slow(handler: BaseHTTPRequestHandler) -> None:
        server.release.wait(5.0)
        reply(handler, 200, json.dumps(GOOD).encode())

    server.answer = slow
    started = time.monotonic()
    with provider(server.url, timeout_s=0.3) as p, pytest.raises(TransientError) as err:
        p.attribute(JOB, 2, DETECTIONS)
    assert "timed out after 0.3 s" in str(err.value)
    assert time.monotonic() - started < 2.0


def test_malformed_json_is_permanent(server: Server) -> None:
    server.answer = lambda h: reply(h, 200, b'{"domain": "hardware", "action": ')
    with provider(server.url) as p, pytest.raises(PermanentError) as err:
        p.attribute(JOB, 2, DETECTIONS)
    assert "not JSON" in str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"domain": "gpu"}, "domain must be one of hardware, network"),
        ({"action": None}, "action must be one of restart, stop, none, got None"),
        ({"implicated_nodes": "node002"}, "implicated_nodes must be a list of strings"),
        ({"implicated_nodes": ["node009"]}, "names nodes outside the job: ['node009']"),
        ({"confidence": 1.5}, "confidence must be a number in [0, 1], got 1.5"),
        ({"confidence": True}, "confidence must be a number in [0, 1]"),
        ({"summary": 3}, "summary must be a string, got int"),
        ({"root_signature": 7}, "root_signature must be a string or null"),
    ],
)
def test_invalid_verdicts_are_permanent_with_a_precise_message(
    server: Server, change: dict[str, Any], message: str
) -> None:
    server.answer = lambda h: reply(h, 200, json.dumps({**GOOD, **change}).encode())
    with provider(server.url) as p, pytest.raises(PermanentError) as err:
        p.attribute(JOB, 2, DETECTIONS)
    assert message in str(err.value)


def test_a_json_array_is_permanent(server: Server) -> None:
    server.answer = lambda h: reply(h, 200, b"[1, 2]")
    with provider(server.url) as p, pytest.raises(PermanentError, match="must be a JSON object"):
        p.attribute(JOB, 2, DETECTIONS)


def test_4xx_is_permanent(server: Server) -> None:
    server.answer = lambda h: reply(h, 404, b"no such route")
    with provider(server.url) as p, pytest.raises(PermanentError, match="HTTP 404 Not Found"):
        p.attribute(JOB, 2, DETECTIONS)


def test_an_unreachable_service_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    with provider(f"http://127.0.0.1:{port}/") as p, pytest.raises(TransientError) as err:
        p.attribute(JOB, 2, DETECTIONS)
    assert "cannot be reached" in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"url": "ftp://x/"}, "attribution.url"),
        ({"url": "not a url"}, "attribution.url"),
        ({"url": "http://x/", "timeout_s": 0}, "attribution.timeout_s"),
        ({"url": "http://x/", "timeout_s": float("nan")}, "attribution.timeout_s"),
        ({"url": "http://x/", "max_evidence": 0}, "attribution.max_evidence"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict[str, Any], setting: str) -> None:
    with pytest.raises(ConfigError) as err:
        HttpAttributionProvider(**kwargs)
    assert err.value.setting == setting
