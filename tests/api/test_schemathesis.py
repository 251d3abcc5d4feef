"""Schemathesis over the whole OpenAPI document (``/api/openapi.json``), in process against the
ASGI app, signed in with an admin token: no generated request, valid or not, may get a 5xx.

The app runs over a store holding a small simulated cluster after a few loop passes, so reads find
jobs, nodes, advice and audit events: SQLite always, and PostgreSQL and MariaDB/MySQL when
``MEDIC_TEST_POSTGRES_URL`` / ``MEDIC_TEST_MYSQL_URL`` name disposable databases (those are
stricter: PostgreSQL refuses NUL in text and 64-bit values in 32-bit columns, MySQL over-long
values). Examples are bounded (``MAX_EXAMPLES`` per operation, fewer on the servers) so the whole
run stays within about a minute.

The schemathesis CLI itself (``st run``, all its phases, stateful included) against a live uvicorn
server is ``test_schemathesis_cli.py``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.test_store import ENGINES, _drop_everything
from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.auth import Role
from medic.services import Services
from medic.testing import FakeClock
from medic.wiring import build

from .auth_kit import bearer, grant

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # schemathesis' own dependencies warn at import
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error

MAX_EXAMPLES = 25
SERVER_EXAMPLES = 8
ADMIN = "fuzz-admin-5f0c1e9a"
"""Unguessable, so a generated ``DELETE /api/v1/tokens/{name}`` never revokes it."""


@dataclass(frozen=True)
class Target:
    headers: dict[str, str]
    app: Any
    examples: int


@pytest.fixture(scope="module", params=ENGINES)
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    if request.param == "sqlite":
        url, examples = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'medic.db'}", MAX_EXAMPLES
    else:
        url, examples = os.environ[request.param], SERVER_EXAMPLES
        _drop_everything(url)
    clock = FakeClock()
    overrides: dict[str, object] = {
        "store.url": url,
        "sim.nodes": 4,
        "sim.jobs": 2,
        "sim.nodes_per_job": 1,
        "repair.enabled": True,
    }
    services = build(load_settings(env={}, overrides=overrides), clock=clock, start_workload=True)
    for _ in range(5):
        clock.advance(0.5)
        services.loop.run_once()
    headers = bearer(grant(services.store, Role.ADMIN, ADMIN))
    try:
        yield Target(headers, create_app(services), examples)
    finally:
        services.close()


@pytest.fixture(scope="module")
def api_schema(target: Target) -> Any:
    return schemathesis.openapi.from_asgi("/api/openapi.json", target.app)


def _operations() -> list[str]:
    """Every operation of the OpenAPI document, as ``METHOD /path`` (read from the routes alone:
    the document needs no store)."""
    document = create_app(cast(Services, None)).openapi()
    return [
        f"{method.upper()} {path}"
        for path, item in sorted(document["paths"].items())
        for method in sorted(item)
    ]


# schemathesis' own pytest integration does not run on pytest 9 yet: each operation's examples
# are drawn with Hypothesis here, positive (valid per the schema) and negative alike.
@pytest.mark.parametrize("label", _operations())
def test_no_request_gets_a_server_error(label: str, api_schema: Any, target: Target) -> None:
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None, label
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    @given(case=cases)
    @settings(
        max_examples=target.examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=target.headers, checks=[not_a_server_error])

    run()
