"""Run-time observe/act modes: ``GET/PUT /api/v1/policy/modes`` (operators switch, every change
audited) and the control loop deciding each job's mode from them: the job's comment, else its
partition's stored mode, else the cluster's stored mode, else ``scheduler.mode``."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.audit import AuditKind
from medic.domain.auth import Role
from medic.domain.cluster import JobSpec, Mode
from medic.domain.faults import FaultKind
from medic.domain.ids import ClusterName, JobId
from medic.services import Services
from medic.testing import FakeClock
from medic.wiring import build

from .auth_kit import bearer, grant

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

CLUSTER = ClusterName("sim")
ACT_COMMENT = json.dumps({"medic": {"mode": "act"}})


@dataclass
class Rig:
    services: Services
    clock: FakeClock
    client: TestClient
    operator: dict[str, str]
    viewer: dict[str, str]

    def passes(self, count: int) -> None:
        for _ in range(count):
            self.clock.advance(0.5)
            self.services.loop.run_once()

    def put(self, body: dict[str, Any], **params: str) -> Any:
        return self.client.put(
            "/api/v1/policy/modes", json=body, params=params, headers=self.operator
        )


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    overrides: dict[str, object] = {
        "store.url": f"sqlite:///{tmp_path / 'medic.db'}",
        "scheduler.mode": "observe",
        "sim.nodes": 8,
        "sim.partitions": 2,
    }
    clock = FakeClock()
    services = build(load_settings(env={}, overrides=overrides), clock=clock)
    client = TestClient(create_app(services))
    operator = bearer(grant(services.store, Role.OPERATOR, "alice"))
    viewer = bearer(grant(services.store, Role.VIEWER, "victor"))
    try:
        yield Rig(services, clock, client, operator, viewer)
    finally:
        services.close()


def test_modes_default_to_the_settings_and_round_trip(rig: Rig) -> None:
    assert rig.client.get("/api/v1/policy/modes", headers=rig.viewer).json() == {
        "cluster": "sim",
        "mode": None,
        "partitions": {},
        "default_mode": "observe",
        "effective_mode": "observe",
    }

    put = rig.put({"mode": "act", "partitions": {"p1": "observe"}})

    assert put.status_code == 200, put.text
    assert put.json() == {
        "cluster": "sim",
        "mode": "act",
        "partitions": {"p1": "observe"},
        "default_mode": "observe",
        "effective_mode": "act",
    }
    assert rig.client.get("/api/v1/policy/modes", headers=rig.viewer).json() == put.json()
    other = rig.client.get("/api/v1/policy/modes", params={"cluster": "c2"}, headers=rig.viewer)
    assert other.json()["mode"] is None, "modes are per cluster"


def test_every_change_is_audited_with_who_old_and_new(rig: Rig) -> None:
    rig.put({"mode": "act"})
    rig.put({"mode": "act"})  # the same again: nothing changed, nothing audited
    rig.put({"mode": "act", "partitions": {"p0": "observe"}})
    rig.put({})  # back to the settings

    events = rig.services.store.query_audit(kind=AuditKind.MODE_CHANGED)
    assert [(e.payload["old"], e.payload["new"]) for e in events] == [
        ({"mode": None, "partitions": {}}, {"mode": "act", "partitions": {}}),
        ({"mode": "act", "partitions": {}}, {"mode": "act", "partitions": {"p0": "observe"}}),
        ({"mode": "act", "partitions": {"p0": "observe"}}, {"mode": None, "partitions": {}}),
    ]
    assert {e.payload["by"] for e in events} == {"user:alice"}
    assert [e.mode for e in events] == [Mode.ACT, Mode.ACT, None]
    assert {(e.subject_type.value, e.subject_id, e.cluster) for e in events} == {
        ("cluster", "sim", "sim")
    }


def test_switching_modes_needs_an_operator(rig: Rig) -> None:
    detector = bearer(grant(rig.services.store, Role.DETECTOR, "nvsentinel"))
    for headers in (rig.viewer, detector):
        response = rig.client.put("/api/v1/policy/modes", json={"mode": "act"}, headers=headers)
        assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert rig.client.put("/api/v1/policy/modes", json={"mode": "act"}).status_code == 401
    assert rig.services.store.query_audit(kind=AuditKind.MODE_CHANGED) == []


@pytest.mark.parametrize(
    ("body", "params"),
    [
        ({"mode": "sometimes"}, {}),
        ({"partitions": {"p0": "maybe"}}, {}),
        ({"partitions": {"bad partition": "act"}}, {}),
        ({"extra": True}, {}),
        ({"mode": "act"}, {"cluster": "x" * 129}),
        ({"mode": "act"}, {"cluster": "bad cluster"}),
    ],
)
def test_bad_modes_are_422(rig: Rig, body: dict[str, Any], params: dict[str, str]) -> None:
    response = rig.put(body, **params)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_request"


def _advice_mode(rig: Rig, job: JobId) -> Mode:
    advice = rig.services.store.advice_for_job(CLUSTER, job)
    assert advice is not None, f"no advice for job {job}"
    return advice.mode


def test_the_loop_uses_partition_then_cluster_then_settings_with_the_comment_on_top(
    rig: Rig,
) -> None:
    workload = rig.services.workload
    injector = rig.services.injector
    assert workload is not None and injector is not None
    in_p0 = workload.submit(JobSpec(name="p0-job", num_nodes=1, partition="p0"))
    in_p1 = workload.submit(JobSpec(name="p1-job", num_nodes=1, partition="p1"))
    overridden = workload.submit(
        JobSpec(name="p1-act", num_nodes=1, partition="p1", comment=ACT_COMMENT)
    )
    rig.passes(20)  # the jobs run, watched in the settings' observe mode

    # Switched while the jobs run: the loop picks it up on its next pass.
    assert rig.put({"mode": "act", "partitions": {"p1": "observe"}}).status_code == 200
    for job in (in_p0, in_p1, overridden):
        injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id=job)
    rig.passes(10)

    assert _advice_mode(rig, in_p0) is Mode.ACT, "the cluster's stored mode beats the settings"
    assert _advice_mode(rig, in_p1) is Mode.OBSERVE, "the partition's mode beats the cluster's"
    assert _advice_mode(rig, overridden) is Mode.ACT, "the job's own comment beats them all"
    assert rig.services.store.list_actions(CLUSTER, in_p0), "act mode: medic acted"
    assert rig.services.store.list_actions(CLUSTER, in_p1) == [], "observe mode: only advice"


def test_without_stored_modes_the_settings_decide(rig: Rig) -> None:
    workload, injector = rig.services.workload, rig.services.injector
    assert workload is not None and injector is not None
    job = workload.submit(JobSpec(name="plain", num_nodes=1, partition="p0"))
    rig.passes(20)
    injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id=job)
    rig.passes(10)

    assert _advice_mode(rig, job) is Mode.OBSERVE
