"""The schemathesis CLI (``st run``) over the OpenAPI document of a live server: what a user of
schemathesis would run against ``medic serve``, all four phases (examples, coverage, fuzzing and
the stateful phase, which chains operations along the links it infers from the responses).

The app runs as ``medic serve`` runs it (uvicorn, here in a thread on 127.0.0.1 and a free port)
over a SQLite store holding a small simulated cluster in act mode with one GPU fault injected and
handled, so there is a job, nodes, advice 1, repair 1 (pending approval), alerts, actions and audit
events for generated requests to reach. The CLI runs as a subprocess signed in with an admin token
and must exit 0: ``CHECKS`` are the checks it enforces (no 5xx above all). The in-process
counterpart, which also covers PostgreSQL and MySQL, is ``test_schemathesis.py``.

Every check is on but ``object_level_authorization`` (it needs a second user's credentials and
resources to swap) and ``max_response_time`` (no limit to hold). The OpenAPI document lists each
route's error statuses, all ``application/problem+json`` (``medic.api.openapi``); the request
schemas state the bounds the server enforces (token names, the repair policy's ranges, partition
names, the audit kinds a controller writes, how a step finishes); a 405 names every method of the
path in ``Allow``.

What a schema cannot state, and so what ``positive_data_acceptance`` takes as a 422 (``CONFIG``)
on four operations: a rule across parameters (``GET /api/v1/audit`` with both ``job`` and
``node``) and rules over stored data (``POST /api/v1/repairs`` for a cluster or node medic does
not know, or without a firing alert as evidence; ``POST /api/v1/actions`` naming advice of another
job; a reconciliation of a generation never published). Also unstated but out of the generators'
reach: reserved token names (``medic``, ``user:...``), ``agent:`` names for a detector only, and
the 16 KiB cap on a JSON payload or evidence.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.auth import Role
from medic.domain.faults import FaultKind
from medic.services import Services
from medic.testing import FakeClock, LiveServer
from medic.wiring import build

from .auth_kit import bearer, grant

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("schemathesis") is None,
    reason="schemathesis is not installed (it comes with the dev extra: pip install -e '.[dev]')",
)

ADMIN = "fuzz-admin-5f0c1e9a"
"""The token the run signs in with."""
VICTIM = "fuzz-victim"
"""The only token name ``DELETE /api/v1/tokens/{name}`` gets (a viewer token made for it): the
fuzzing and stateful phases reuse values from responses, so left free it revokes ``ADMIN`` and the
rest of the run sees only 401s."""
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "positive_data_acceptance",
    "negative_data_rejection",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
)
UNSTATED_RULES = (
    "GET /api/v1/audit",
    "POST /api/v1/actions",
    "POST /api/v1/repairs",
    "PUT /api/v1/advice/{advice_id}/reconciliation",
)
"""Operations whose schema-valid requests may still be refused with 422 (see above)."""
MAX_EXAMPLES = 25
"""Per operation in the fuzzing phase; the coverage phase sends its own fixed set."""
SEED = 1
CLI_TIMEOUT = 240.0

CONFIG = f"""\
[[operations]]
include-name = "DELETE /api/v1/tokens/{{name}}"
parameters = {{ "path.name" = "{VICTIM}" }}
phases.stateful.enabled = false

[[operations]]
include-name = [{", ".join(f'"{name}"' for name in UNSTATED_RULES)}]
checks.positive_data_acceptance.expected-statuses = [
  "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]
"""


@dataclass(frozen=True)
class Live:
    url: str
    token: str


def _cluster(url: str) -> tuple[Services, str]:
    """Services over ``url`` after a GPU fault was detected and acted on, and the admin secret."""
    clock = FakeClock()
    overrides: dict[str, object] = {
        "store.url": url,
        "sim.nodes": 4,
        "sim.jobs": 2,
        "sim.nodes_per_job": 1,
        "repair.enabled": True,
        "scheduler.mode": "act",
    }
    services = build(load_settings(env={}, overrides=overrides), clock=clock, start_workload=True)

    def passes(n: int) -> None:
        for _ in range(n):
            clock.advance(0.5)
            services.loop.run_once()

    passes(5)
    assert services.injector is not None
    job = min(j.id for j in services.scheduler.list_jobs())
    services.injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id=job)
    passes(10)
    grant(services.store, Role.VIEWER, VICTIM)
    return services, grant(services.store, Role.ADMIN, ADMIN)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    services, token = _cluster(f"sqlite:///{tmp_path_factory.mktemp('st') / 'medic.db'}")
    # As ``medic serve`` runs it (lifespan included), less the loop thread: the clock is a
    # FakeClock.
    try:
        with LiveServer(create_app(services), lifespan="auto") as server:
            yield Live(server.url, token)
    finally:
        services.close()


def test_schemathesis_cli_finds_no_server_error(live: Live, tmp_path: Path) -> None:
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    command = [
        *(sys.executable, "-m", "schemathesis.cli"),
        *("--config-file", "schemathesis.toml"),
        "run",
        f"{live.url}/api/openapi.json",
        *("--header", f"Authorization: Bearer {live.token}"),
        *("--checks", ",".join(CHECKS)),
        *("--phases", "examples,coverage,fuzzing,stateful"),
        *("--max-examples", str(MAX_EXAMPLES)),
        *("--seed", str(SEED)),
        *("--workers", "1"),  # reproducible; more workers also trip a Hypothesis thread race
        *("--request-timeout", "30"),
        *("--generation-database", "none"),
        *("--suppress-health-check", "all"),
        *("--output-sanitize", "false"),  # full reproductions; the token is this test's own
        "--no-color",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMATHESIS_")}
    env["NO_COLOR"] = "1"
    # In tmp_path: schemathesis keeps its caches (.schemathesis, .hypothesis) in the directory.
    run = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"schemathesis exited {run.returncode}:\n{output}"
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", output)
    assert selected is not None, output
    assert len(set(selected.groups())) == 1, f"not every operation was tested:\n{output}"

    # The run was signed in throughout: the admin token was never revoked.
    session = httpx.get(f"{live.url}/api/v1/session", headers=bearer(live.token), timeout=10)
    assert session.status_code == 200, f"{session.status_code} {session.text}\n{output}"
