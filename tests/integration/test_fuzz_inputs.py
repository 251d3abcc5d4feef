"""Fuzzing what anyone can send medic: the API's free-JSON bodies (alerts, the controller's audit
events, reconciliation reports and steps) and log lines (job and kernel streams, through a loop
pass). No request may get a 5xx, nor break a later read; no line may fail a pass. The inputs of
issue 11's defect 7 are explicit examples; hypothesis runs derandomized and small, so the test is
deterministic and takes a few seconds."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from api.auth_kit import bearer, grant
from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.config.settings import SchedulerSettings, Settings
from medic.domain.auth import Role
from medic.domain.cluster import Mode
from medic.domain.logs import LogLine, LogStream
from medic.schedulers.sim import SimCluster
from medic.services import Services
from medic.store import create_store
from medic.testing import FakeClock
from medic.wiring import build

from .conftest import CLUSTER, SIM, Harness, RecordingLogs, RecordingScheduler
from .test_bad_input_loop import ExtraLogs

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

LIMIT = 65_536
HUGE = "9" * 5000
FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Text with what broke medic: NUL, lone surrogates (both halves), escapes, line breaks.
ODD = st.sampled_from(["\x00", "\udfff", "\ud800", "\ud83d", "\ufffd", "\\", '"', "\u2028", "é"])
TEXT = st.text(st.one_of(st.characters(), ODD), max_size=24)
NUMBER = st.one_of(st.integers(), st.floats(), st.integers(min_value=10**30, max_value=10**40))
FREE = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBER, TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)


# --- the API -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz-api') / 'm.db'}"
    settings_ = load_settings(env={}, overrides={"store.url": url, "api.max_body_bytes": LIMIT})
    services: Services = build(settings_, clock=FakeClock())
    tokens = {
        "agent": bearer(grant(services.store, Role.DETECTOR, "agent")),
        "ctl": bearer(grant(services.store, Role.CONTROLLER, "ctl")),
        "admin": bearer(grant(services.store, Role.ADMIN, "fuzz-admin")),
        "none": {},
    }
    client = TestClient(create_app(services), raise_server_exceptions=False)
    yield client, {k: json.dumps(v) for k, v in tokens.items()}
    services.close()


ROUTES = {
    "alert": ("POST", "/api/v1/alerts", "agent"),
    "audit": ("POST", "/api/v1/audit", "ctl"),
    "reconciliation": ("PUT", "/api/v1/advice/1/reconciliation", "ctl"),
    "action": ("POST", "/api/v1/actions", "ctl"),
}


def _document(kind: str, text: str, free: object) -> object:
    return {
        "alert": {
            "cluster": "sim",
            "node": "node001",
            "key": "fuzz",
            "detector": "agent",
            "summary": text or "s",
            "description": text,
            "severity": "warning",
            "evidence": {"free": free, text: free},
        },
        "audit": {
            "actor": "ctl",
            "kind": "action-started",
            "subject_type": "job",
            "subject_id": text or "7",
            "payload": {"free": free, text: text},
        },
        "reconciliation": {"observed_generation": 1, "status": "failed", "reason": text or "r"},
        "action": {"key": text or "k", "cluster": "sim", "kind": "cancel", "job_id": text},
    }[kind]


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """A route, who calls it, and a body: JSON of the route's shape with odd values, or bytes."""
    kind = draw(st.sampled_from(sorted(ROUTES)))
    caller = draw(st.sampled_from([ROUTES[kind][2], ROUTES[kind][2], "none"]))
    document = _document(kind, draw(TEXT), draw(FREE))
    body = draw(st.one_of(st.just(json.dumps(document).encode()), st.binary(max_size=64)))
    return kind, caller, body


def _raw(kind: str, replace: str) -> tuple[str, str, bytes]:
    """The route's document with its free value written as ``replace``, raw JSON text."""
    text = json.dumps(_document(kind, "x", "FREE")).replace('"FREE"', replace)
    return kind, ROUTES[kind][2], text.encode()


@FUZZ
@given(request=requests())
@example(request=_raw("alert", '"\\udfff"'))  # 1. a lone surrogate in alert evidence
@example(request=_raw("audit", '{"\\ud800": "\\u0000\\udc00"}'))  # 1, 2. and NUL, in a payload
@example(request=_raw("alert", HUGE))  # an integer longer than Python reads
@example(request=_raw("alert", "NaN"))
@example(request=_raw("audit", "[" * 20_000 + "]" * 20_000))  # deeper than the parser goes
@example(request=_raw("audit", '"' + "x" * LIMIT + '"'))  # 3. over api.max_body_bytes
@example(request=("alert", "none", b'{"evidence": "\\udfff"}'))  # 3. no token, a body
@example(request=("alert", "agent", b"\xff\xfe{\x00}"))  # not UTF-8
def test_no_body_gets_a_server_error_or_breaks_a_read(
    api: tuple[TestClient, dict[str, str]], request: tuple[str, str, bytes]
) -> None:
    client, tokens = api
    kind, caller, body = request
    method, path, _ = ROUTES[kind]
    headers = {**json.loads(tokens[caller]), "content-type": "application/json"}
    answer = client.request(method, path, content=body, headers=headers)
    assert answer.status_code < 500, (answer.status_code, answer.text[:300])
    reader = json.loads(tokens["admin"])
    for read in ("/api/v1/alerts", "/api/v1/audit?order=desc&limit=20", "/api/v1/advice"):
        listed = client.get(read, headers=reader)
        assert listed.status_code == 200, (read, listed.text[:300])


# --- log lines through a loop pass -------------------------------------------------------------
MATCHING = [
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 13, pid=77, Graphics Exception: ESR 0x1",
    "[rank3]: Traceback (most recent call last):",
    "[rank3]: RuntimeError: NCCL communicator was aborted",
    "iteration      120/  100000 | consumed samples: 1 | lm loss: 2.5",
    "successfully saved checkpoint from iteration     100 to /ckpt",
]
LINE = st.one_of(
    TEXT,
    st.tuples(st.sampled_from(MATCHING), TEXT).map("".join),
    st.tuples(TEXT, st.sampled_from(MATCHING)).map("".join),
)


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    clock = FakeClock()
    cluster = SimCluster(clock, SIM, cluster=CLUSTER)
    store = create_store(f"sqlite:///{tmp_path_factory.mktemp('fuzz-logs') / 'm.db'}")
    h = Harness(
        clock=clock,
        sim=cluster,
        store=store,
        scheduler=RecordingScheduler(cluster.scheduler, clock),
        logs=ExtraLogs(RecordingLogs(cluster.logs)),
        settings=Settings(scheduler=SchedulerSettings(cluster=CLUSTER, mode=Mode.OBSERVE), sim=SIM),
    )
    h.submit("fuzz", comment=f'{{"medic": {{"max_attempts_without_progress": {HUGE}}}}}')
    h.submit("fuzz-watched", partition="p1")
    h.run(3.0)
    yield h
    store.close()


@FUZZ
@given(lines=st.lists(st.tuples(st.booleans(), LINE), min_size=1, max_size=12))
@example(lines=[(False, MATCHING[0] + "\x00"), (True, MATCHING[1].replace("1234", "\x00"))])
@example(lines=[(False, MATCHING[4] + "\udfff"), (True, "NVRM: Xid \ud800 79")])
@example(lines=[(False, f"[rank{HUGE}]: KeyError: 'x'"), (False, f"iteration {HUGE}/ 10 |")])
@example(lines=[(False, MATCHING[0])] * 2000)  # 6. repeated evidence
def test_no_log_line_fails_a_loop_pass(loop: Harness, lines: list[tuple[bool, str]]) -> None:
    h = loop
    now = h.clock.now()
    jobs = [j for j in h.sim.scheduler.list_jobs() if j.nodes]
    for n, (kernel, text) in enumerate(lines):
        job = jobs[n % len(jobs)]
        if kernel:
            line = LogLine(LogStream.KERNEL, text, now, job.nodes[0])
        else:
            line = LogLine(LogStream.JOB, text, now, job.nodes[-1], job.id, seq=n)
        assert isinstance(h.logs, ExtraLogs)
        h.logs.extra.append(line)
    h.clock.advance(0.2)
    report = h.loop.run_once()  # raised before (a NUL on PostgreSQL, a 5,000-digit comment)
    assert report.errors == 0
    for job in jobs:
        for d in h.detections(job.id):
            json.dumps([d.text, d.fields], ensure_ascii=False).encode("utf-8")  # answerable
