"""``/api/v1/clusters`` and ``/api/v1/goodput`` over a real SQLite store.

The simulated cluster ``sim`` runs in act mode and loses a GPU in job 1 (medic requeues it), so its
goodput has badput. Beside it, a cluster ``lab`` is written straight into the store with attempts
at known times, so its figures can be checked to the second:

* job L1, 4 nodes: attempt 0 runs from -1000 s, last progress at -700 s (steps 1..100, checkpoint
  at 80), requeued at -600 s; attempt 1 resumes from step 80 at -500 s and runs until now.
  Productive 240 + 500 s, wasted progress 60 s (20 of 100 steps of [-1000, -700]), stalled 100 s,
  downtime 100 s: a ratio of 740 / 1000.
* job L2, 2 nodes, running since -300 s and never reported progress: unmeasured.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.attempts import Progress
from medic.domain.auth import Role
from medic.domain.cluster import Job, JobState, Node, NodeState
from medic.domain.faults import FaultKind
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.measure.goodput import Cause, goodput
from medic.measure.history import window_intervals
from medic.services import Services
from medic.store import create_store
from medic.telemetry.state import StateCollector
from medic.testing import FakeClock
from medic.wiring import build

from .auth_kit import bearer, grant

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

PROBLEM_JSON = "application/problem+json"
LAB = ClusterName("lab")
PASS_SECONDS = 0.5
BADPUT_CAUSES = {"wasted_progress", "stalled", "downtime", "no_progress"}


@dataclass(frozen=True)
class Rig:
    services: Services
    client: TestClient
    now: datetime


def _lab_job(job_id: str, nodes: int, state: JobState, start: datetime | None, **kw: Any) -> Job:
    names = tuple(NodeName(f"lab{i}") for i in range(nodes)) if start is not None else ()
    return Job(
        JobId(job_id),
        LAB,
        f"train-{job_id}",
        state,
        "gpu",
        nodes=names,
        num_nodes=nodes,
        start_time=start,
        **kw,
    )


def _seed_lab(services: Services, now: datetime) -> None:
    store = services.store

    def t(seconds: float) -> datetime:
        return now + timedelta(seconds=seconds)

    store.sync_jobs(LAB, [_lab_job("L1", 4, JobState.RUNNING, t(-1000))], t(-1000))
    store.update_progress(
        LAB,
        JobId("L1"),
        0,
        Progress(first_step=1, last_step=100, last_checkpoint_step=80, last_progress_at=t(-700)),
    )
    store.sync_jobs(LAB, [_lab_job("L1", 4, JobState.PENDING, None, restart_count=1)], t(-600))
    store.sync_jobs(LAB, [_lab_job("L1", 4, JobState.RUNNING, t(-500), restart_count=1)], t(-500))
    store.update_progress(
        LAB,
        JobId("L1"),
        1,
        Progress(first_step=81, last_step=150, loaded_checkpoint_step=80, last_progress_at=t(-10)),
    )
    store.sync_jobs(LAB, [_lab_job("L2", 2, JobState.RUNNING, t(-300))], t(-300))


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    db = tmp_path_factory.mktemp("clusters") / "medic.db"
    clock = FakeClock()
    overrides: dict[str, object] = {
        "store.url": f"sqlite:///{db}",
        "scheduler.mode": "act",
        "sim.nodes": 8,
        "sim.jobs": 2,
        "sim.nodes_per_job": 2,
    }
    services = build(load_settings(env={}, overrides=overrides), clock=clock, start_workload=True)
    assert services.injector is not None

    def passes(count: int) -> None:
        for _ in range(count):
            clock.advance(PASS_SECONDS)
            services.loop.run_once()

    passes(40)
    services.injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id="1")
    passes(40)
    now = clock.now()
    _seed_lab(services, now)
    # a cluster another medic watches: nodes, no jobs yet
    services.store.ensure_cluster(ClusterName("gpu-b"), "slurm")
    services.store.sync_nodes(ClusterName("gpu-b"), [Node(NodeName("b1"), NodeState.IDLE)], now)
    secret = grant(services.store, Role.VIEWER, "viewer-clusters")
    try:
        yield Rig(services, TestClient(create_app(services), headers=bearer(secret)), now)
    finally:
        services.close()


def _ok(rig: Rig, path: str, **params: object) -> Any:
    response = rig.client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


# --- /api/v1/goodput -----------------------------------------------------------------------------
def test_goodput_of_a_cluster_with_known_attempts(rig: Rig) -> None:
    body = _ok(rig, "/api/v1/goodput", cluster="lab", window=3600, buckets=6)
    assert (body["cluster"], body["window_seconds"], body["bucket_seconds"]) == ("lab", 3600, 600)
    summary = body["summary"]
    assert summary["ratio"] == pytest.approx(0.74)
    assert summary["productive_node_seconds"] == pytest.approx(4 * 740)
    assert summary["badput"] == {
        "wasted_progress": pytest.approx(4 * 60),
        "stalled": pytest.approx(4 * 100),
        "downtime": pytest.approx(4 * 100),
        "no_progress": 0,
    }
    assert summary["badput_node_seconds"] == pytest.approx(4 * 260)
    assert (summary["productive_seconds"], summary["badput_seconds"]) == (
        pytest.approx(740),
        pytest.approx(260),
    )
    # L2 never reported progress: counted apart, not in the ratio
    assert summary["unmeasured_node_seconds"] == pytest.approx(2 * 300)
    assert (summary["jobs"], summary["unmeasured_jobs"]) == (1, 1)
    assert datetime.fromisoformat(summary["end"]) == rig.now
    assert datetime.fromisoformat(summary["start"]) == rig.now - timedelta(hours=1)


def test_the_goodput_series_covers_the_window_bucket_by_bucket(rig: Rig) -> None:
    body = _ok(rig, "/api/v1/goodput", cluster="lab", window=1000, buckets=10)
    series = body["series"]
    assert len(series) == 10
    assert series[0]["start"] == body["summary"]["start"]
    assert series[-1]["end"] == body["summary"]["end"]
    # [-1000, -800] productive, [-800, -700] 40 s kept then 60 s wasted, [-700, -600] stalled,
    # [-600, -500] down, then attempt 1 runs.
    ratios = [b["ratio"] for b in series]
    assert ratios == [pytest.approx(r) for r in (1.0, 1.0, 0.4, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0)]
    assert series[3]["badput"]["stalled"] == pytest.approx(400)
    assert series[4]["badput"]["downtime"] == pytest.approx(400)
    total = sum(b["productive_node_seconds"] for b in series)
    assert total == pytest.approx(body["summary"]["productive_node_seconds"])


def test_a_short_window_sees_only_the_running_attempt(rig: Rig) -> None:
    summary = _ok(rig, "/api/v1/goodput", cluster="lab", window=60, buckets=1)["summary"]
    assert summary["ratio"] == 1.0
    assert summary["productive_node_seconds"] == pytest.approx(4 * 60)


def test_the_simulated_cluster_lost_time_to_the_gpu_fault(rig: Rig) -> None:
    summary = _ok(rig, "/api/v1/goodput", cluster="sim")["summary"]
    assert summary["jobs"] == 2
    assert summary["ratio"] is not None and 0 < summary["ratio"] < 1
    assert summary["badput_node_seconds"] > 0


def test_goodput_of_every_cluster_by_default(rig: Rig) -> None:
    body = _ok(rig, "/api/v1/goodput", window=3600)
    assert body["cluster"] is None
    assert len(body["series"]) == 24  # the default
    assert body["summary"]["jobs"] == 3  # two simulated jobs and L1
    assert body["summary"]["unmeasured_jobs"] == 1


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"window": 59}, "window"),
        ({"window": 30 * 86400 + 1}, "window"),
        ({"window": "a day"}, "window"),
        ({"buckets": 0}, "buckets"),
        ({"buckets": 501}, "buckets"),
    ],
)
def test_goodput_bounds_are_checked(rig: Rig, params: dict[str, object], names: str) -> None:
    response = rig.client.get("/api/v1/goodput", params=params)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    problem = response.json()
    assert problem["code"] == "invalid_request"
    assert f"query.{names}" in problem["detail"]


def test_goodput_of_an_unknown_cluster_is_a_404(rig: Rig) -> None:
    response = rig.client.get("/api/v1/goodput", params={"cluster": "nowhere"})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert "nowhere" in response.json()["detail"]


# --- /api/v1/clusters ----------------------------------------------------------------------------
def test_clusters_lists_the_watched_cluster_and_those_in_the_store(rig: Rig) -> None:
    clusters = _ok(rig, "/api/v1/clusters")
    assert [c["name"] for c in clusters] == ["gpu-b", "lab", "sim"]
    other, lab, sim = clusters
    assert (sim["watched"], sim["scheduler"]) == (True, "sim")
    assert (lab["watched"], lab["scheduler"]) == (False, None), "known from its jobs only"
    assert (other["watched"], other["scheduler"]) == (False, "slurm")
    assert other["nodes"]["total"] == 1 and other["jobs"]["total"] == 0
    assert lab["goodput"]["ratio"] == pytest.approx(0.74)
    assert lab["jobs"] == {"total": 2, "by_state": {"running": 2}}


def test_one_cluster_has_its_counts_modes_breaker_and_goodput(rig: Rig) -> None:
    sim = _ok(rig, "/api/v1/clusters/sim")
    assert sim["nodes"]["total"] == 8
    assert sum(sim["nodes"]["by_state"].values()) == 8
    assert sum(sim["nodes"]["by_health"].values()) == 8
    assert set(sim["nodes"]["by_health"]) <= {
        "healthy",
        "degraded",
        "under_repair",
        "out_of_service",
    }
    assert sim["jobs"]["total"] == 2
    assert sim["modes"]["effective_mode"] == "act"
    assert sim["breaker"] == {
        "cluster": "sim",
        "tripped": False,
        "tripped_at": None,
        "reason": None,
        "reset_by": None,
        "reset_at": None,
    }
    assert sim["repairs"]["open"] == sum(sim["repairs"]["by_state"].values())
    goodput = sim["goodput"]
    assert set(goodput["badput"]) == BADPUT_CAUSES
    assert datetime.fromisoformat(goodput["end"]) - datetime.fromisoformat(
        goodput["start"]
    ) == timedelta(days=1)
    assert goodput == _ok(rig, "/api/v1/goodput", cluster="sim", window=86400)["summary"]


def test_an_unknown_cluster_is_a_404(rig: Rig) -> None:
    response = rig.client.get("/api/v1/clusters/nowhere")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    problem = response.json()
    assert problem["code"] == "not_found"
    assert "/api/v1/clusters" in problem["detail"]


def test_the_routes_need_a_token(rig: Rig) -> None:
    for path in ("/api/v1/clusters", "/api/v1/clusters/sim", "/api/v1/goodput"):
        response = rig.client.get(path, headers={"Authorization": ""})
        assert response.status_code == 401, path


def test_a_job_stuck_before_its_first_step_is_badput_not_unmeasured(tmp_path: Path) -> None:
    """Attempt 0 made progress long ago; attempt 1 started before the window and has printed
    nothing since: its time in the window is no-progress badput, decided on the job's whole
    history, not left out as unmeasured because the window holds no progress."""
    store = create_store(f"sqlite:///{tmp_path / 'medic.db'}")
    try:
        now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

        def t(seconds: float) -> datetime:
            return now + timedelta(seconds=seconds)

        stuck = _lab_job("S1", 2, JobState.RUNNING, t(-7200))
        store.sync_jobs(LAB, [stuck], t(-7200))
        progress = Progress(first_step=1, last_step=50, last_checkpoint_step=50)
        store.update_progress(LAB, JobId("S1"), 0, replace(progress, last_progress_at=t(-4000)))
        store.sync_jobs(LAB, [replace(stuck, state=JobState.PENDING, restart_count=1)], t(-3600))
        again = replace(stuck, start_time=t(-3000), restart_count=1)
        store.sync_jobs(LAB, [again], t(-3000))

        start = t(-600)
        found = window_intervals(store, LAB, store.list_jobs(LAB), start, now)
        summary = goodput(found, start, now)
        assert summary.unmeasured == 0 and summary.unmeasured_jobs == 0
        assert summary.badput[Cause.NO_PROGRESS] == pytest.approx(2 * 600)
    finally:
        store.close()


def test_the_goodput_gauge_is_the_last_hour_s_goodput(tmp_path: Path) -> None:
    """``medic_goodput_ratio``: a job that progressed all hour (2 nodes) beside one stuck before
    its first step since its restart (2 nodes): half the node time was productive."""
    store = create_store(f"sqlite:///{tmp_path / 'medic.db'}")
    try:
        now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

        def t(seconds: float) -> datetime:
            return now + timedelta(seconds=seconds)

        clock = FakeClock(now)
        healthy = _lab_job("H1", 2, JobState.RUNNING, t(-7200))
        stuck = _lab_job("S1", 2, JobState.RUNNING, t(-7200))
        store.sync_jobs(LAB, [healthy, stuck], t(-7200))
        progress = Progress(first_step=1, last_step=50, last_checkpoint_step=50)
        store.update_progress(LAB, JobId("S1"), 0, replace(progress, last_progress_at=t(-4000)))
        store.update_progress(LAB, JobId("H1"), 0, replace(progress, last_progress_at=t(-10)))
        restarted = replace(stuck, state=JobState.PENDING, restart_count=1)
        store.sync_jobs(LAB, [healthy, restarted], t(-3600))
        store.sync_jobs(
            LAB, [healthy, replace(stuck, start_time=t(-3000), restart_count=1)], t(-3000)
        )

        samples = {
            s.name: s.value
            for family in StateCollector(store, LAB, clock).collect()
            for s in family.samples
        }
        assert samples["medic_goodput_ratio"] == pytest.approx(0.5)
        found = window_intervals(store, LAB, store.list_jobs(LAB), t(-3600), now)
        assert goodput(found, t(-3600), now).ratio == pytest.approx(0.5)
    finally:
        store.close()
