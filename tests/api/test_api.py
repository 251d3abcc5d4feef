"""The HTTP API over a deterministic scenario: a simulated 8-node cluster in act mode, driven pass
by pass with a FakeClock, where one act-mode job and one observe-mode job each lose a GPU."""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import Role
from medic.domain.cluster import JobSpec
from medic.domain.faults import FaultKind, FaultRecord
from medic.errors import StoreError
from medic.services import Services
from medic.testing import FakeClock
from medic.wiring import build

from .auth_kit import bearer, grant

with warnings.catch_warnings():
    # Starlette warns (StarletteDeprecationWarning, a UserWarning) when the test client runs on
    # httpx rather than httpx2; medic depends on httpx, and pytest turns warnings into errors.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

PROBLEM_JSON = "application/problem+json"
PASS_SECONDS = 0.5
OBSERVE_COMMENT = json.dumps({"medic": {"mode": "observe"}})


def _settings(url: str, **extra: object) -> Any:
    overrides: dict[str, object] = {
        "store.url": url,
        "scheduler.mode": "act",
        "sim.nodes": 8,
        "sim.jobs": 2,
        "sim.nodes_per_job": 2,
        **extra,
    }
    return load_settings(env={}, overrides=overrides)


_TOKENS = itertools.count(1)


def _client(services: Services, *, run_loop: bool = False) -> TestClient:
    """A client of the API over ``services`` signed in with a new viewer token."""
    secret = grant(services.store, Role.VIEWER, f"viewer-{next(_TOKENS)}")
    return TestClient(create_app(services, run_loop=run_loop), headers=bearer(secret))


def _passes(services: Services, clock: FakeClock, count: int) -> None:
    for _ in range(count):
        clock.advance(PASS_SECONDS)
        services.loop.run_once()


@dataclass(frozen=True)
class Scenario:
    services: Services
    client: TestClient
    acted: FaultRecord
    """GPU fault in job 1 (cluster default: act mode); medic requeues it excluding the node."""
    observed: FaultRecord
    """GPU fault in a job whose comment asks for observe mode; its advice stays pending."""
    healthy_job: str


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    db = tmp_path_factory.mktemp("api") / "medic.db"
    clock = FakeClock()
    services = build(_settings(f"sqlite:///{db}"), clock=clock, start_workload=True)
    assert services.injector is not None and services.workload is not None
    observed_job = services.workload.submit(
        JobSpec(name="observed", num_nodes=2, partition="p1", comment=OBSERVE_COMMENT)
    )
    _passes(services, clock, 20)
    acted = services.injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id="1")
    observed = services.injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id=observed_job)
    _passes(services, clock, 10)
    try:
        yield Scenario(services, _client(services), acted, observed, "2")
    finally:
        services.close()


@pytest.fixture(scope="module")
def client(scenario: Scenario) -> TestClient:
    return scenario.client


def _all_events(client: TestClient, **params: object) -> list[dict[str, Any]]:
    response = client.get("/api/v1/audit", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["next_after_id"] is None
    events: list[dict[str, Any]] = page["events"]
    return events


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["title"] and body["detail"]
    assert "Traceback" not in body["detail"]
    return body


# --- health, metrics, OpenAPI ---------------------------------------------------------------


def test_healthz_answers_ok_with_the_version(client: TestClient) -> None:
    import medic

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": medic.__version__}


def _metrics(client: TestClient) -> dict[str, list[Any]]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def test_metrics_expose_detections_latencies_and_advice_after_a_recovery(
    client: TestClient,
) -> None:
    samples = _metrics(client)

    detections = samples["medic_detections_total"]
    assert all(s.labels["cluster"] == "sim" for s in detections)
    assert {s.labels["signature"] for s in detections} >= {"xid.fallen_off_bus"}
    assert samples["medic_detection_latency_seconds_count"][0].value >= 1
    assert samples["medic_action_latency_seconds_count"][0].value >= 1
    advice = {s.labels["action"]: s.value for s in samples["medic_advice_total"]}
    assert advice == {"requeue": 2.0}  # one per faulted job, act and observe alike


def test_metrics_counts_agree_with_the_audit_trail(client: TestClient) -> None:
    samples = _metrics(client)
    events = _all_events(client)

    detected = sum(s.value for s in samples["medic_detections_total"])
    assert detected == sum(e["kind"] == "detection" for e in events)
    advised = sum(s.value for s in samples["medic_advice_total"])
    assert advised == sum(e["kind"] == "advice" for e in events)


def test_openapi_document_lists_the_v1_routes(client: TestClient) -> None:
    response = client.get("/api/openapi.json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert set(paths) >= {
        "/healthz",
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}/timeline",
        "/api/v1/nodes",
        "/api/v1/advice",
        "/api/v1/audit",
    }


# --- jobs, nodes, advice --------------------------------------------------------------------


def test_jobs_are_listed_with_their_advice(scenario: Scenario, client: TestClient) -> None:
    response = client.get("/api/v1/jobs")

    assert response.status_code == 200
    jobs = {j["id"]: j for j in response.json()}
    assert set(jobs) == {"1", scenario.healthy_job, scenario.observed.job_id}
    assert all(j["cluster"] == "sim" for j in jobs.values())

    acted = jobs["1"]
    assert acted["restart_count"] == 1
    assert scenario.acted.node in acted["excluded_nodes"]
    assert acted["advice"]["action"] == "requeue"
    assert acted["advice"]["mode"] == "act"
    assert acted["advice"]["status"] == "converged"
    assert acted["advice"]["active"] is False
    # the observed job's faulty node has a critical alert firing too: kept out of placement
    assert acted["advice"]["exclude_nodes"] == sorted([scenario.acted.node, scenario.observed.node])

    assert jobs[scenario.healthy_job]["advice"] is None
    assert jobs[scenario.healthy_job]["state"] == "running"

    observed = jobs[scenario.observed.job_id]
    assert observed["restart_count"] == 0  # observe mode: recommended, not done
    assert observed["advice"]["mode"] == "observe"
    assert observed["advice"]["status"] == "pending"
    assert observed["advice"]["active"] is True


def test_jobs_filter_by_cluster(client: TestClient) -> None:
    assert len(client.get("/api/v1/jobs", params={"cluster": "sim"}).json()) == 3
    assert client.get("/api/v1/jobs", params={"cluster": "elsewhere"}).json() == []


def test_nodes_are_listed_with_their_state(scenario: Scenario, client: TestClient) -> None:
    response = client.get("/api/v1/nodes")

    assert response.status_code == 200
    nodes = response.json()
    assert [n["name"] for n in nodes] == [f"node{i:03d}" for i in range(1, 9)]
    assert all(n["cluster"] == "sim" and n["gpus"] == 8 for n in nodes)
    assert {p for n in nodes for p in n["partitions"]} == {"p0", "p1"}
    jobs = client.get("/api/v1/jobs").json()
    running = {node for j in jobs if j["state"] == "running" for node in j["nodes"]}
    states = {n["name"]: n["state"] for n in nodes}
    # Both faulty nodes have a critical alert: in this act-mode cluster they are cordoned
    # (drained, a job left running), whatever the observed job's own observe mode.
    cordoned = {n["name"] for n in nodes if (n["reason"] or "").startswith("medic: cordon alert")}
    assert cordoned == {scenario.acted.node, scenario.observed.node}
    assert all(states[node] == "allocated" for node in running - cordoned)
    assert all(states[node] == "draining" for node in running & cordoned)
    # one health for every reader: the repair engine's, as the API lists it and counts it
    engine = scenario.services.repairs
    assert engine is not None
    health = {n["name"]: n["health"] for n in nodes}
    assert {n: h for n, h in health.items() if h != "healthy"} == {
        n: h.value for n, h in engine.health().items()
    }
    assert health[scenario.acted.node] == health[scenario.observed.node] == "degraded"
    assert all(n["health_since"] for n in nodes if n["health"] != "healthy")
    (cluster,) = [c for c in client.get("/api/v1/clusters").json() if c["name"] == "sim"]
    counted: dict[str, int] = {}
    for h in health.values():
        counted[h] = counted.get(h, 0) + 1
    assert cluster["nodes"]["by_health"] == dict(sorted(counted.items()))


def test_advice_feed_all_versus_active(scenario: Scenario, client: TestClient) -> None:
    everything = client.get("/api/v1/advice").json()
    active = client.get("/api/v1/advice", params={"active": "true"}).json()

    assert {a["job_id"] for a in everything} == {"1", scenario.observed.job_id}
    assert [a["job_id"] for a in active] == [scenario.observed.job_id]
    assert all(a["active"] for a in active)
    assert client.get("/api/v1/advice", params={"active": "false"}).json() == everything


# --- timeline -------------------------------------------------------------------------------


def test_timeline_tells_the_whole_story_of_a_recovered_job(
    scenario: Scenario, client: TestClient
) -> None:
    response = client.get("/api/v1/jobs/1/timeline")

    assert response.status_code == 200
    timeline = response.json()
    node = scenario.acted.node

    assert timeline["job"]["id"] == "1"
    assert timeline["job"]["advice"]["action"] == "requeue"

    attempts = timeline["attempts"]
    assert [a["number"] for a in attempts] == [0]  # attempt 1 waits for free nodes
    assert node in attempts[0]["nodes"]
    assert attempts[0]["ended_at"] is not None
    assert attempts[0]["last_checkpoint_step"] is not None

    detections = timeline["detections"]
    assert detections, "the GPU fault left no detection"
    xid = [d for d in detections if d["signature_id"] == "xid.fallen_off_bus"]
    assert xid and xid[0]["node"] == node and xid[0]["domain"] == "hardware"
    assert "fallen off the bus" in xid[0]["text"]
    assert all(d["text"] for d in detections)
    times = [_time(d["time"]) for d in detections]
    assert times == sorted(times)

    (verdict,) = timeline["verdicts"]
    assert verdict["domain"] == "hardware"
    assert verdict["root_signature"] == "xid.fallen_off_bus"
    assert verdict["implicated_nodes"] == [node]
    assert any("fallen off the bus" in e["text"] for e in verdict["evidence"])

    actions = timeline["actions"]
    steps = [a["kind"] for a in actions if a["node"] is None]
    assert steps == ["requeue_hold", "exclude_nodes", "release"]
    # the nodes medic itself added to the job's exclusions (taken off once they are back): the
    # faulty node, and the other job's node with a critical alert
    added = {(a["kind"], a["node"]) for a in actions if a["node"]}
    assert added == {("exclude_nodes", node), ("exclude_nodes", scenario.observed.node)}
    assert all(a["status"] == "succeeded" and a["job_id"] == "1" for a in actions)
    assert {a["advice_id"] for a in actions} == {timeline["job"]["advice"]["id"]}

    events = timeline["events"]
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(e["subject_id"] == "1" for e in events)
    kinds = [e["kind"] for e in events]
    assert kinds[: kinds.index("verdict")] == ["detection"] * kinds.index("verdict")
    assert kinds[kinds.index("verdict") :] == [
        "verdict",
        "advice",
        "action-started",
        "action-succeeded",
        "action-started",
        "action-succeeded",
        "action-started",
        "action-succeeded",
        "reconciliation",
    ]
    assert [e["action"] for e in events if e["kind"] == "action-succeeded"] == [
        "requeue_hold",
        "exclude_nodes",
        "release",
    ]
    assert events == _all_events(client, job="1")


def test_timeline_never_shows_an_ended_attempt_as_running(client: TestClient) -> None:
    attempts = client.get("/api/v1/jobs/1/timeline").json()["attempts"]

    ended = [a for a in attempts if a["ended_at"] is not None]
    assert ended
    assert all(a["state"] != "running" for a in ended), ended


def test_timeline_of_an_observed_job_has_advice_but_no_actions(
    scenario: Scenario, client: TestClient
) -> None:
    timeline = client.get(f"/api/v1/jobs/{scenario.observed.job_id}/timeline").json()

    assert timeline["verdicts"] and timeline["detections"]
    assert timeline["actions"] == []
    assert timeline["job"]["advice"]["status"] == "pending"
    assert {e["kind"] for e in timeline["events"]} <= {"detection", "verdict", "advice"}
    assert all(e["mode"] == "observe" for e in timeline["events"])


def test_timeline_of_a_healthy_job_is_quiet(scenario: Scenario, client: TestClient) -> None:
    timeline = client.get(f"/api/v1/jobs/{scenario.healthy_job}/timeline").json()

    assert timeline["job"]["advice"] is None
    assert len(timeline["attempts"]) == 1
    assert timeline["detections"] == timeline["verdicts"] == timeline["actions"] == []
    assert timeline["events"] == []


def test_unknown_job_is_a_404_problem_that_says_where_to_look(client: TestClient) -> None:
    body = _assert_problem(client.get("/api/v1/jobs/424242/timeline"), 404, "not_found")

    assert "424242" in body["detail"]
    assert "/api/v1/jobs" in body["detail"]
    assert body["type"] == "about:blank"


def test_unknown_route_and_wrong_method_are_problems(client: TestClient) -> None:
    _assert_problem(client.get("/api/v1/nothing-here"), 404, "not_found")
    _assert_problem(client.post("/api/v1/jobs"), 405, "method_not_allowed")


def test_a_job_id_in_two_clusters_needs_the_cluster(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    clock = FakeClock()
    first = build(_settings(url), clock=clock, start_workload=True)
    second = build(_settings(url, **{"scheduler.cluster": "other"}), clock=clock)
    assert second.workload is not None
    second.workload.submit(JobSpec(name="other-1", num_nodes=2))
    try:
        first.loop.run_once()
        second.loop.run_once()
        client = _client(first)

        body = _assert_problem(client.get("/api/v1/jobs/1/timeline"), 422, "invalid_input")
        assert "cluster" in body["detail"]
        assert "other" in body["detail"] and "sim" in body["detail"]

        for cluster, name in (("sim", "train-001"), ("other", "other-1")):
            response = client.get("/api/v1/jobs/1/timeline", params={"cluster": cluster})
            assert response.status_code == 200, response.text
            assert response.json()["job"]["name"] == name
        assert {j["cluster"] for j in client.get("/api/v1/jobs").json()} == {"sim", "other"}
    finally:
        first.close()
        second.close()


def test_timeline_of_a_long_lived_job_includes_its_newest_events(tmp_path: Path) -> None:
    clock = FakeClock()
    services = build(_settings(f"sqlite:///{tmp_path / 'long.db'}"), clock=clock)
    assert services.workload is not None
    services.workload.submit(JobSpec(name="long", num_nodes=2))
    try:
        services.loop.run_once()
        ids = [
            services.store.append_audit(
                AuditEvent(
                    time=clock.advance(1),
                    actor="medic-engine",
                    kind=AuditKind.LOOP_ERROR,
                    subject_type=SubjectType.JOB,
                    subject_id="1",
                    cluster="sim",
                    payload={"error": f"failure {i}"},
                )
            )
            for i in range(1001)
        ]
        timeline = _client(services).get("/api/v1/jobs/1/timeline").json()

        assert timeline["events"][-1]["id"] == ids[-1]
    finally:
        services.close()


# --- audit ----------------------------------------------------------------------------------


def test_audit_lists_every_event_oldest_first(scenario: Scenario, client: TestClient) -> None:
    events = _all_events(client)

    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    jobs = {e["subject_id"] for e in events if e["subject_type"] == "job"}
    nodes = {e["subject_id"] for e in events if e["subject_type"] == "node"}
    assert jobs == {"1", scenario.observed.job_id}
    assert nodes == {scenario.acted.node, scenario.observed.node}  # their alerts and repairs
    assert {e["kind"] for e in events} >= {
        "detection",
        "verdict",
        "advice",
        "action-started",
        "action-succeeded",
        "reconciliation",
    }
    assert all(e["cluster"] == "sim" for e in events)


def test_audit_default_page_size_is_100(client: TestClient) -> None:
    page = client.get("/api/v1/audit").json()
    total = len(_all_events(client))

    assert len(page["events"]) == min(total, 100)


def test_audit_filters_by_job_and_kind(scenario: Scenario, client: TestClient) -> None:
    observed = _all_events(client, job=scenario.observed.job_id)
    assert observed and all(e["subject_id"] == scenario.observed.job_id for e in observed)

    succeeded = _all_events(client, kind="action-succeeded")
    assert [e["action"] for e in succeeded] == ["requeue_hold", "exclude_nodes", "release"]

    both = _all_events(client, job="1", kind="reconciliation")
    assert len(both) == 1
    assert both[0]["payload"]["status"] == "converged"

    assert _all_events(client, job=scenario.healthy_job) == []
    assert _all_events(client, actor="medic-controller") == [
        e for e in _all_events(client) if e["actor"] == "medic-controller"
    ]


def test_audit_filters_by_time(client: TestClient) -> None:
    events = _all_events(client)
    times = sorted({e["time"] for e in events}, key=_time)
    assert len(times) >= 2, "the scenario should write events at different times"
    first, last = times[0], times[-1]

    since = _all_events(client, since=last)
    until = _all_events(client, until=first)

    assert since == [e for e in events if _time(e["time"]) >= _time(last)]
    assert until == [e for e in events if _time(e["time"]) <= _time(first)]
    assert 0 < len(since) < len(events) and 0 < len(until) < len(events)
    assert _all_events(client, since=first, until=last) == events
    assert _all_events(client, since=last, until=first) == []


def test_audit_time_filters_honour_utc_offsets(client: TestClient) -> None:
    events = _all_events(client)
    pivot = next(e["time"] for e in events if e["kind"] == "verdict")
    shifted = _time(pivot).astimezone(_time("2026-01-01T00:00:00+02:00").tzinfo).isoformat()

    assert _all_events(client, since=shifted) == _all_events(client, since=pivot)


def test_audit_since_without_offset_is_read_as_utc(client: TestClient) -> None:
    events = _all_events(client)
    pivot = next(e["time"] for e in events if e["kind"] == "verdict")
    naive = _time(pivot).replace(tzinfo=None).isoformat()

    response = client.get("/api/v1/audit", params={"since": naive, "limit": 1000})

    assert response.status_code != 503, response.text
    if response.status_code == 422:
        body = _assert_problem(response, 422, "invalid_request")
        assert "since" in body["detail"]
    else:
        assert response.status_code == 200
        assert response.json()["events"] == _all_events(client, since=pivot)


@pytest.mark.parametrize("limit", [1, 3, 4, 7])
def test_audit_cursor_pagination_covers_every_event_once(client: TestClient, limit: int) -> None:
    expected = [e["id"] for e in _all_events(client)]
    seen: list[int] = []
    after: int | None = None
    for _ in range(len(expected) + 2):
        params: dict[str, object] = {"limit": limit}
        if after is not None:
            params["after_id"] = after
        page = client.get("/api/v1/audit", params=params).json()
        assert len(page["events"]) <= limit
        seen += [e["id"] for e in page["events"]]
        after = page["next_after_id"]
        if after is None:
            break
        assert after == page["events"][-1]["id"]
    else:
        pytest.fail("pagination never ended")

    assert seen == expected
    assert len(set(seen)) == len(seen)


def test_audit_pagination_keeps_the_filters(client: TestClient) -> None:
    expected = [e["id"] for e in _all_events(client, job="1")]
    seen: list[int] = []
    after: int | None = 0
    while after is not None:
        page = client.get("/api/v1/audit", params={"job": "1", "limit": 2, "after_id": after})
        seen += [e["id"] for e in page.json()["events"]]
        after = page.json()["next_after_id"]

    assert seen == expected


def test_audit_last_full_page_has_no_next_cursor(client: TestClient) -> None:
    total = len(_all_events(client))

    page = client.get("/api/v1/audit", params={"limit": total}).json()

    assert len(page["events"]) == total
    assert page["next_after_id"] is None
    beyond = client.get("/api/v1/audit", params={"after_id": page["events"][-1]["id"]}).json()
    assert beyond == {"events": [], "next_after_id": None, "next_before_id": None}


@pytest.mark.parametrize(
    ("path", "params", "parameter"),
    [
        ("/api/v1/audit", {"limit": "0"}, "limit"),
        ("/api/v1/audit", {"limit": "1001"}, "limit"),
        ("/api/v1/audit", {"limit": "many"}, "limit"),
        ("/api/v1/audit", {"after_id": "-1"}, "after_id"),
        ("/api/v1/audit", {"kind": "nope"}, "kind"),
        ("/api/v1/audit", {"since": "garbage"}, "since"),
        ("/api/v1/audit", {"until": "yesterday"}, "until"),
        ("/api/v1/advice", {"active": "maybe"}, "active"),
    ],
)
def test_bad_query_parameters_are_422_problems_naming_the_parameter(
    client: TestClient, path: str, params: dict[str, str], parameter: str
) -> None:
    body = _assert_problem(client.get(path, params=params), 422, "invalid_request")

    assert parameter in body["detail"]


def test_bad_kind_problem_lists_the_allowed_kinds(client: TestClient) -> None:
    body = _assert_problem(
        client.get("/api/v1/audit", params={"kind": "nope"}), 422, "invalid_request"
    )

    assert all(kind.value in body["detail"] for kind in AuditKind)


def test_audit_exports_as_csv_with_a_header_row(client: TestClient) -> None:
    response = client.get("/api/v1/audit", params={"format": "csv", "job": "1", "limit": 1000})

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    events = _all_events(client, job="1")
    assert response.text.splitlines()[0] == (
        "id,time,actor,kind,subject_type,subject_id,cluster,signature_id,action,verdict,mode,payload"
    )
    assert [int(r["id"]) for r in rows] == [e["id"] for e in events]
    assert [r["kind"] for r in rows] == [e["kind"] for e in events]
    assert [json.loads(r["payload"]) for r in rows] == [e["payload"] for e in events]
    assert all(r["verdict"] == (e["verdict"] or "") for r, e in zip(rows, events, strict=True))
    assert "X-Next-After-Id" not in response.headers


def test_audit_csv_pages_like_json(client: TestClient) -> None:
    first = client.get("/api/v1/audit", params={"format": "csv", "limit": 2})
    page = client.get("/api/v1/audit", params={"limit": 2}).json()

    assert first.headers["x-next-after-id"] == str(page["next_after_id"])
    assert [int(r["id"]) for r in csv.DictReader(io.StringIO(first.text))] == [
        e["id"] for e in page["events"]
    ]
    bad = client.get("/api/v1/audit", params={"format": "xml"})
    _assert_problem(bad, 422, "invalid_request")


def test_audit_csv_cells_never_start_a_formula(tmp_path: Path) -> None:
    clock = FakeClock()
    services = build(_settings(f"sqlite:///{tmp_path / 'csv.db'}"), clock=clock)
    try:
        services.store.append_audit(
            AuditEvent(
                time=clock.now(),
                actor="medic-engine",
                kind=AuditKind.LOOP_ERROR,
                subject_type=SubjectType.JOB,
                subject_id='=HYPERLINK("http://evil")',
                cluster="sim",
                payload={"error": "x"},
            )
        )
        text = _client(services).get("/api/v1/audit", params={"format": "csv"}).text
    finally:
        services.close()
    [row] = list(csv.DictReader(io.StringIO(text)))
    assert row["subject_id"] == '\'=HYPERLINK("http://evil")'


def test_audit_filters_by_node(tmp_path: Path) -> None:
    clock = FakeClock()
    services = build(_settings(f"sqlite:///{tmp_path / 'node.db'}"), clock=clock)
    try:
        for subject_type, subject in (
            (SubjectType.NODE, "node001"),
            (SubjectType.NODE, "node002"),
            (SubjectType.JOB, "node001"),
        ):
            services.store.append_audit(
                AuditEvent(
                    time=clock.now(),
                    actor="medic-engine",
                    kind=AuditKind.ALERT_FIRING,
                    subject_type=subject_type,
                    subject_id=subject,
                    cluster="sim",
                )
            )
        client = _client(services)
        on_node = client.get("/api/v1/audit", params={"node": "node001"}).json()["events"]
        both = client.get("/api/v1/audit", params={"node": "node001", "job": "1"})
    finally:
        services.close()
    assert [(e["subject_type"], e["subject_id"]) for e in on_node] == [("node", "node001")]
    assert "not both" in _assert_problem(both, 422, "invalid_input")["detail"]


def test_readyz_answers_503_when_the_store_does_not(scenario: Scenario) -> None:
    class Down:
        def get_cursor(self, source: str) -> str | None:
            raise StoreError("database postgresql://medic:***@db/medic: connection refused")

    down = dataclasses.replace(scenario.services, store=cast(Any, Down()))
    response = TestClient(create_app(down)).get("/readyz")

    body = _assert_problem(response, 503, "store_unavailable")
    assert "postgresql" not in body["detail"], "an open endpoint names no database"
    ready = TestClient(create_app(scenario.services)).get("/readyz").json()
    # the scenario's loop ran passes: this replica holds its cluster's two leases
    assert ready == {
        "status": "ready",
        "holder": scenario.services.loop.holder,
        "leases": {"loop/sim": True, "controller/sim": True},
    }


# --- the loop beside the API ----------------------------------------------------------------


def _loop_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "medic-loop" and t.is_alive()}


def test_run_loop_starts_and_stops_the_control_loop_with_the_app(tmp_path: Path) -> None:
    services = build(_settings(f"sqlite:///{tmp_path / 'live.db'}"), start_workload=True)
    before = _loop_threads()
    try:
        with _client(services, run_loop=True) as client:
            started = _loop_threads() - before
            assert len(started) == 1
            deadline = time.monotonic() + 10
            while not services.store.list_jobs(None) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(services.store.list_jobs(None)) == 2
            assert len(client.get("/api/v1/jobs").json()) == 2
            assert client.get("/healthz").status_code == 200
        assert not any(t.is_alive() for t in started)
    finally:
        services.close()


def test_without_run_loop_no_loop_thread_starts(scenario: Scenario) -> None:
    before = _loop_threads()
    with _client(scenario.services) as client:
        assert client.get("/healthz").status_code == 200
        assert _loop_threads() <= before
