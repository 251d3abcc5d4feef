"""``GET /api/v1/audit`` newest first: ``order=desc`` pages back with ``before_id`` (the next
page's cursor in ``next_before_id``, or ``X-Next-Before-Id`` for CSV), ``order=asc`` (the default)
forward with ``after_id``; both bounds apply in either order, with every filter."""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, cast

import pytest

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.auth import Role
from medic.services import Services
from medic.testing import FakeClock
from medic.wiring import build

from .auth_kit import bearer, grant

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # starlette's test client on httpx
    from fastapi.testclient import TestClient

EVENTS = 11
KINDS = (AuditKind.DETECTION, AuditKind.ADVICE, AuditKind.ALERT_FIRING)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    clock = FakeClock()
    url = f"sqlite:///{tmp_path_factory.mktemp('audit') / 'medic.db'}"
    services = build(load_settings(env={}, overrides={"store.url": url}), clock=clock)
    try:
        for n in range(EVENTS):
            clock.advance(1.0)
            services.store.append_audit(
                AuditEvent(
                    time=clock.now(),
                    actor="medic-engine",
                    kind=KINDS[n % len(KINDS)],
                    subject_type=SubjectType.JOB,
                    subject_id=str(n % 2),
                    cluster="sim",
                    payload={"n": n},
                )
            )
        secret = grant(services.store, Role.VIEWER, "audit-reader")
        yield TestClient(create_app(services), headers=bearer(secret))
    finally:
        services.close()


def _ids(client: TestClient, **params: Any) -> list[int]:
    response = client.get("/api/v1/audit", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    return [e["id"] for e in response.json()["events"]]


def _pages(client: TestClient, order: str, limit: int, **params: Any) -> list[list[int]]:
    """Every page of the search, following the cursor of ``order``."""
    cursor_param, cursor_field = ("after_id", "next_after_id")
    if order == "desc":
        cursor_param, cursor_field = ("before_id", "next_before_id")
    other = "next_before_id" if order == "asc" else "next_after_id"
    pages: list[list[int]] = []
    cursor: int | None = None
    for _ in range(EVENTS + 2):
        query = {**params, "order": order, "limit": limit}
        if cursor is not None:
            query[cursor_param] = cursor
        page = client.get("/api/v1/audit", params=query).json()
        pages.append([e["id"] for e in page["events"]])
        assert page[other] is None
        cursor = page[cursor_field]
        if cursor is None:
            return pages
        assert cursor == pages[-1][-1]
    pytest.fail("pagination never ended")


def test_the_default_order_is_oldest_first(client: TestClient) -> None:
    ids = _ids(client)
    assert len(ids) == EVENTS and ids == sorted(ids)
    assert _ids(client, order="asc") == ids


def test_newest_first_is_the_same_events_reversed(client: TestClient) -> None:
    assert _ids(client, order="desc") == _ids(client)[::-1]


@pytest.mark.parametrize("limit", [1, 3, 4, 11])
def test_newest_first_pages_back_with_before_id(client: TestClient, limit: int) -> None:
    pages = _pages(client, "desc", limit)

    assert [i for page in pages for i in page] == _ids(client)[::-1]
    assert all(len(page) == limit for page in pages[:-1]) and 0 < len(pages[-1]) <= limit
    assert [i for page in _pages(client, "asc", limit) for i in page] == _ids(client)


def test_newest_first_pages_keep_the_filters(client: TestClient) -> None:
    for filters in ({"job": "1"}, {"kind": "advice"}, {"job": "0", "kind": "detection"}):
        expected = _ids(client, **filters)[::-1]
        assert expected, filters
        assert [i for page in _pages(client, "desc", 2, **filters) for i in page] == expected


def test_after_id_and_before_id_bound_either_order(client: TestClient) -> None:
    ids = _ids(client)
    low, high = ids[2], ids[8]
    window = [i for i in ids if low < i < high]

    assert _ids(client, after_id=low, before_id=high) == window
    assert _ids(client, after_id=low, before_id=high, order="desc") == window[::-1]
    # Newest first down to a known id: what a console that shows the newest asks for.
    assert _ids(client, order="desc", after_id=ids[-3]) == ids[-2:][::-1]
    assert _ids(client, before_id=ids[0]) == []


def test_newest_first_respects_the_time_filters(client: TestClient) -> None:
    events = client.get("/api/v1/audit", params={"limit": 1000}).json()["events"]
    since = events[5]["time"]

    newest = client.get("/api/v1/audit", params={"order": "desc", "since": since, "limit": 2})

    assert [e["id"] for e in newest.json()["events"]] == [events[-1]["id"], events[-2]["id"]]
    assert [i for page in _pages(client, "desc", 2, since=since) for i in page] == [
        e["id"] for e in events[5:]
    ][::-1]


def test_csv_newest_first_names_the_next_page_in_x_next_before_id(client: TestClient) -> None:
    first = client.get("/api/v1/audit", params={"format": "csv", "order": "desc", "limit": 3})
    page = client.get("/api/v1/audit", params={"order": "desc", "limit": 3}).json()

    assert first.status_code == 200, first.text
    rows = [int(r["id"]) for r in csv.DictReader(io.StringIO(first.text))]
    assert rows == [e["id"] for e in page["events"]] == _ids(client)[::-1][:3]
    assert first.headers["x-next-before-id"] == str(page["next_before_id"]) == str(rows[-1])
    assert "x-next-after-id" not in first.headers

    last = client.get(
        "/api/v1/audit", params={"format": "csv", "order": "desc", "before_id": _ids(client)[1]}
    )
    assert "x-next-before-id" not in last.headers
    assert [int(r["id"]) for r in csv.DictReader(io.StringIO(last.text))] == [_ids(client)[0]]


def test_csv_oldest_first_still_names_the_next_page_in_x_next_after_id(
    client: TestClient,
) -> None:
    first = client.get("/api/v1/audit", params={"format": "csv", "limit": 3})

    assert first.headers["x-next-after-id"] == str(_ids(client)[2])
    assert "x-next-before-id" not in first.headers


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"order": "sideways"}, "order"),
        ({"order": "DESC"}, "order"),
        ({"before_id": "-1"}, "before_id"),
        ({"before_id": str(2**63)}, "before_id"),
        ({"until": "0.5"}, "until"),
        ({"since": "1767225600"}, "since"),
    ],
)
def test_bad_order_cursor_or_time_is_a_422_problem(
    client: TestClient, params: dict[str, str], parameter: str
) -> None:
    response = client.get("/api/v1/audit", params=params)

    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert parameter in response.json()["detail"]


def test_an_iso_time_without_seconds_is_still_a_time(client: TestClient) -> None:
    events = client.get("/api/v1/audit", params={"limit": 1000}).json()["events"]
    cut = (FakeClock().now() + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M")

    assert len(_ids(client, until=cut)) == len(events)


def test_the_page_documents_both_cursors() -> None:
    document = create_app(cast(Services, None)).openapi()
    page = document["components"]["schemas"]["AuditPage"]["properties"]
    params = {p["name"] for p in document["paths"]["/api/v1/audit"]["get"]["parameters"]}

    assert {"next_after_id", "next_before_id"} <= set(page)
    assert {"order", "after_id", "before_id"} <= params
