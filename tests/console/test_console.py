"""The web console in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

medic's app runs under uvicorn on 127.0.0.1 over a simulated 8-node cluster in act mode with
repair enabled, on a FakeClock that a ticker thread advances (0.5 s and one loop pass every
0.1 s of real time) so the pages see live changes. Before the browser starts, job 1 loses a GPU
(Xid 79): medic requeues it away from the node and recommends a reboot that waits for approval;
a person's repair request on another node waits too.

Scenarios: sign in and read the overview (jobs, repairs, goodput, latencies); find the failing
job and read its timeline (the Xid evidence line); approve a repair and reject another; switch a
partition to act mode; find those changes in the audit search. Each page is screenshotted into
``tests/console/screenshots/`` (ignored by git).

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``) and the ``playwright`` package;
without them the tests skip, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from medic.api.app import create_app
from medic.config.loading import load_settings
from medic.domain.audit import AuditEvent, AuditKind, SubjectType
from medic.domain.cluster import JobState
from medic.domain.diagnosis import Severity
from medic.domain.faults import FaultKind
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    RepairAction,
    RepairRequest,
    RepairState,
    RequesterKind,
)
from medic.repair import intake, intake_common
from medic.services import Services
from medic.testing import FakeClock, LiveServer
from medic.wiring import build

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - reported by the fixture below
    sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).with_name("screenshots")
ADMIN = "ada"
TIMEOUT_MS = 10_000
PASS_SECONDS = 0.5
TICK_SECONDS = 0.1
XID_TEXT = "GPU has fallen off the bus"
ROW_IDS = "rows => rows.map(row => row.dataset.event)"

pytestmark = pytest.mark.timeout(120)


def _unavailable(why: str) -> None:
    """Skip, or fail under CI=true: CI must run the browser tests."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: the browser tests must run)")
    pytest.skip(why)


# --- the medic under test ------------------------------------------------------------------


@dataclass
class Console:
    url: str
    token: str
    services: Services
    failing_job: str
    bad_node: str
    medic_repair: int
    """medic's own recommendation (reboot the node that lost its GPU), pending approval."""
    user_repair: int
    """A person's request on another node, pending approval."""


class Ticker(threading.Thread):
    """Advances the FakeClock and runs one loop pass per tick, so the console sees live data."""

    def __init__(self, services: Services, clock: FakeClock) -> None:
        super().__init__(daemon=True, name="medic-ticker")
        self.services, self.clock = services, clock
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(TICK_SECONDS):
            self.clock.advance(PASS_SECONDS)
            self.services.loop.run_once()


def _passes(services: Services, clock: FakeClock, count: int) -> None:
    for _ in range(count):
        clock.advance(PASS_SECONDS)
        services.loop.run_once()


def _populate(services: Services, clock: FakeClock) -> tuple[str, str, int, int]:
    """Xid 79 in job 1 (act mode: requeued; a reboot recommended), and a person's request."""
    assert services.injector is not None
    _passes(services, clock, 20)
    fault = services.injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id="1")
    store: Any = services.store
    for _ in range(60):
        _passes(services, clock, 1)
        job = next(j for j in store.list_jobs(services.cluster) if j.id == fault.job_id)
        if store.list_repairs(node=fault.node) and job.state is JobState.RUNNING:
            break
    [medic_repair] = store.list_repairs(node=fault.node)
    assert medic_repair.state is RepairState.PENDING_APPROVAL

    busy = {n for j in store.list_jobs(services.cluster) for n in j.nodes} | {fault.node}
    other = next(n for n in store.list_nodes(services.cluster) if n.name not in busy)
    key = "detector:dcgm:diag"
    alert = Alert(
        cluster=ClusterName(services.cluster),
        node=NodeName(other.name),
        key=key,
        source=AlertSource.DETECTOR,
        summary="DCGM diagnostic level 3 failed",
        description="",
        severity=Severity.CRITICAL,
        detector="dcgm",
    )
    store.upsert_alert(alert, clock.now())
    request = RepairRequest(
        cluster=ClusterName(services.cluster),
        node=NodeName(other.name),
        action=RepairAction.REPROVISION,
        requested_by="bob",
        requester_kind=RequesterKind.USER,
        reason="DCGM diag failed twice",
        alert_keys=(key,),
        request_id="ticket-4711",
    )
    nodes = store.list_nodes(services.cluster)
    user_repair, _, _ = intake.submit_repair(
        store,
        request,
        clock.now(),
        cluster_nodes=len(nodes),
        node_pools=intake_common.node_pools(nodes),
    )
    assert user_repair.state is RepairState.PENDING_APPROVAL
    return fault.job_id, fault.node, medic_repair.id, user_repair.id


def _admin_token(services: Services) -> str:
    """An admin token from the token store (what ``medic tokens create --role admin`` does)."""
    from medic.api.auth import issue_token
    from medic.domain.auth import Role

    _, secret = issue_token(
        services.tokens, services.store, ADMIN, Role.ADMIN, services.clock.now(), "cli:test"
    )
    return secret


def _app(services: Services) -> Any:
    """create_app with the console mounted (by create_app itself, or here until it does)."""
    from medic.console import mount_console

    app = create_app(services)
    if not any(getattr(route, "name", None) == "console-static" for route in app.routes):
        mount_console(app)
    return app


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('console') / 'medic.db'}"
    settings = load_settings(
        env={},
        overrides={
            "store.url": db_url,
            "scheduler.mode": "act",
            "repair.enabled": True,
            "sim.nodes": 8,
            "sim.jobs": 2,
            "sim.nodes_per_job": 2,
            "sim.partitions": 2,
        },
    )
    # Recent virtual time, so the console's "last hour" windows hold the scenario's events.
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10))
    services = build(settings, clock=clock, start_workload=True)
    ticker = Ticker(services, clock)
    server = None
    try:
        job, node, medic_repair, user_repair = _populate(services, clock)
        token = _admin_token(services)
        server = LiveServer(_app(services)).start()
        url = server.url
        ticker.start()
        yield Console(url, token, services, job, node, medic_repair, user_repair)
    finally:
        ticker.stop.set()
        if ticker.is_alive():
            ticker.join(10)
        if server is not None:
            server.stop()
        services.close()


# --- the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if sync_playwright is None:
        _unavailable("the playwright package is missing (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser, console: Console) -> Iterator[Page]:
    context = browser.new_context(base_url=console.url, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    foreign: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(console.url) else foreign.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # shown by pytest when a test fails: what the browser said and which requests failed
    page.on("console", lambda m: print(f"browser {m.type}: {m.text}"))
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on(
        "response",
        lambda r: print(f"HTTP {r.status} {r.request.method} {r.url}") if r.status >= 400 else None,
    )
    try:
        yield page
    finally:
        context.close()
    assert foreign == [], f"the console loaded something from elsewhere: {foreign}"
    assert errors == [], f"JavaScript or Content-Security-Policy errors: {errors}"


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, console: Console) -> None:
    page.goto("/")
    page.get_by_label("API token").fill(console.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Console pages")).to_be_visible()
    expect(page.get_by_text(f"{ADMIN} (admin)")).to_be_visible()


def go(page: Page, name: str) -> None:
    page.get_by_role("navigation").get_by_role("link", name=name, exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name)


# --- scenarios -----------------------------------------------------------------------------


def test_signing_in_with_a_token_opens_the_overview(page: Page, console: Console) -> None:
    page.goto("/")
    expect(page.get_by_role("heading", name="Sign in to medic")).to_be_visible()
    shoot(page, "00-sign-in")

    page.get_by_label("API token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Sign-in refused")

    sign_in(page, console)
    expect(page.get_by_role("heading", level=1)).to_have_text("Overview")
    cards = page.locator("#overview-cards")
    expect(cards.locator("#jobs-running")).to_contain_text("of 2 running")
    expect(cards.locator("#open-repairs")).to_contain_text("2 open")
    expect(cards.locator("#breaker-state")).to_contain_text("closed")
    expect(cards).to_contain_text("degraded")
    figures = page.locator("#latency-figures")
    expect(figures).to_be_visible()
    expect(figures.locator("tbody tr").first.locator("td").first).not_to_have_text("0")
    expect(page.locator("#latency-chart canvas").first).to_be_visible()
    # goodput in the window: a percentage (the jobs report iterations), badput by cause, a chart
    expect(page.locator("#goodput-ratio")).to_have_text(
        re.compile(r"^\s*(\d{1,3}\.\d %|no progress seen yet)\s*$")
    )
    expect(page.locator("#goodput-ratio")).to_contain_text("%")
    expect(page.locator("#badput-figures tbody tr")).to_have_count(4)
    expect(page.locator("#badput-figures tr[data-cause='downtime']")).to_contain_text("node")
    expect(page.locator("#goodput-chart canvas").first).to_be_visible()
    expect(cards).not_to_contain_text("Goodput is not measured")
    # which process holds the control work: the fixture's loop took both leases of its cluster
    leases = page.locator("#leases-table tbody tr")
    expect(leases).to_have_count(2)
    expect(leases.filter(has_text="loop/")).to_contain_text(console.services.loop.holder or "-")
    page.get_by_label("Window", exact=True).select_option("86400")
    expect(page.locator("#goodput-ratio")).to_contain_text("%")
    shoot(page, "01-overview")

    # the session survives a reload (the cookie), and signing out ends it
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text("Overview")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in to medic")).to_be_visible()
    page.reload()
    expect(page.get_by_role("heading", name="Sign in to medic")).to_be_visible()


def test_the_failing_job_and_its_timeline_show_the_xid_evidence(
    page: Page, console: Console
) -> None:
    sign_in(page, console)
    go(page, "Jobs")
    row = page.locator(f"#jobs-table tr[data-job='{console.failing_job}']")
    expect(row).to_contain_text("detections")
    expect(row).to_contain_text("xid")
    page.get_by_label("only jobs with anomalies").check()
    expect(page.locator("#jobs-table tbody tr")).to_have_count(1)
    shoot(page, "02-jobs")

    row.get_by_role("link", name=console.failing_job, exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Job {console.failing_job} timeline")
    evidence = page.locator("pre.evidence", has_text=XID_TEXT)
    expect(evidence.first).to_be_visible()
    expect(evidence.first).to_contain_text("Xid")
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("Attempt 0")
    expect(timeline).to_contain_text("Attempt 1")
    expect(timeline).to_contain_text("requeue")
    expect(timeline).to_contain_text(console.bad_node)
    expect(timeline.locator("#timeline-events")).to_contain_text("action-succeeded")
    expect(timeline).to_contain_text("after the first detection")
    shoot(page, "03-timeline")


def test_approving_and_rejecting_repairs_changes_their_state(page: Page, console: Console) -> None:
    sign_in(page, console)
    go(page, "Nodes")
    card = page.locator(f"li.node[data-node='{console.bad_node}']")
    expect(card).to_contain_text("degraded")
    expect(card).to_contain_text("xid:79")
    expect(page.locator("#alerts-table")).to_contain_text("xid:79")
    shoot(page, "04-nodes")

    go(page, "Repairs")
    pending = page.locator("#pending-repairs")
    medic_row = pending.locator(f"tr[data-repair='{console.medic_repair}']")
    user_row = pending.locator(f"tr[data-repair='{console.user_repair}']")
    expect(medic_row).to_contain_text("reboot")
    expect(user_row).to_contain_text("reprovision")
    shoot(page, "05-repairs")

    # change the person's request to a GPU reset, then reject it with a note
    user_row.get_by_label("Action").select_option("reset_gpu")
    user_row.get_by_role("button", name="Change action").click()
    expect(page.get_by_role("status")).to_contain_text("action changed")
    expect(pending.locator(f"tr[data-repair='{console.user_repair}']")).to_contain_text("reset gpu")
    row = pending.locator(f"tr[data-repair='{console.user_repair}']")
    row.get_by_label("Note").fill("rerun the diagnostic first")
    row.get_by_role("button", name="Reject").click()
    expect(page.get_by_role("status")).to_contain_text(f"Repair {console.user_repair} rejected")
    expect(
        page.locator(f"#finished-repairs tr[data-repair='{console.user_repair}']")
    ).to_contain_text("rejected")

    # approve medic's reboot: it leaves the queue and runs through its lifecycle
    medic_row.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text(f"Repair {console.medic_repair} approved")
    expect(pending.locator(f"tr[data-repair='{console.medic_repair}']")).to_have_count(0)
    moved = page.locator(f"tr[data-repair='{console.medic_repair}']")
    expect(moved).to_contain_text(f"approved by {ADMIN}")
    shoot(page, "06-repairs-approved")

    go(page, "Nodes")
    lifecycle = page.locator(f"#node-repairs tr[data-repair='{console.medic_repair}']")
    expect(lifecycle.locator("ol.steps li")).to_have_count(7)
    expect(lifecycle).not_to_contain_text("pending approval")
    shoot(page, "07-nodes-repairing")

    store: Any = console.services.store
    assert store.get_repair(console.medic_repair).state is not RepairState.PENDING_APPROVAL
    assert store.get_repair(console.user_repair).state is RepairState.REJECTED


def test_switching_a_partition_to_act_mode(page: Page, console: Console) -> None:
    sign_in(page, console)
    go(page, "Policy")
    row = page.locator("#modes-table tr[data-scope='partition'][data-name='p1']")
    expect(row).to_be_visible()
    # the cluster acts, so the partition first gets a mode of its own (observe), then act
    row.get_by_role("button", name="Switch p1 to observe").click()
    expect(page.get_by_role("status")).to_contain_text("Partition p1 now in observe mode")
    expect(row.locator("td.mode")).to_contain_text("observe")
    row.get_by_role("button", name="Switch p1 to act").click()
    expect(page.get_by_role("status")).to_contain_text("Partition p1 now in act mode")
    expect(row.locator("td.mode")).to_contain_text("act")
    expect(row.locator("td.mode")).not_to_contain_text("follows the cluster")

    # the auto-approval checklist round-trips through PUT /api/v1/policy/repair
    form = page.locator("#repair-policy-form")
    form.get_by_label("reset gpu").check()
    form.get_by_label("Xid 48").check()
    form.get_by_role("button", name="Save the checklist").click()
    expect(page.get_by_role("status")).to_contain_text("checklist")
    expect(form.get_by_label("reset gpu")).to_be_checked()
    expect(form.get_by_label("remove")).to_be_disabled()
    shoot(page, "08-policy")


def test_the_changes_are_in_the_audit_search(page: Page, console: Console) -> None:
    sign_in(page, console)
    go(page, "Audit")
    form = page.get_by_role("search", name="Search the audit trail")
    form.get_by_label("Kind").fill("repair-approved")
    form.get_by_role("button", name="Search").click()
    table = page.locator("#audit-table")
    expect(table).to_contain_text(f"user:{ADMIN}")
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(page.get_by_role("link", name="Export these results as CSV")).to_have_attribute(
        "href", re.compile(r"format=csv.*|.*format=csv")
    )

    form.get_by_label("Kind").fill("")
    form.get_by_label("Node").fill(console.bad_node)
    form.get_by_role("button", name="Search").click()
    expect(table).to_contain_text("repair-approved")
    expect(table).to_contain_text("repair-recommended")

    # the whole trail, newest first, paged back 100 at a time: over a page of newer events first
    store = console.services.store
    for n in range(120):
        store.append_audit(
            AuditEvent(
                time=console.services.clock.now(),
                actor="medic-engine",
                kind=AuditKind.LOOP_ERROR,
                subject_type=SubjectType.CLUSTER,
                subject_id=console.services.cluster,
                cluster=console.services.cluster,
                payload={"error": f"filler {n}"},
            )
        )
    newest = store.query_audit(order="desc", limit=1)[0].id or 0
    form.get_by_label("Node").fill("")
    form.get_by_role("button", name="Search").click()
    expect(table.locator(f'tr[data-event="{newest}"]')).to_be_visible()
    expect(page.locator("#audit-count")).to_contain_text("newest first")
    first = table.locator("tbody tr").first.get_attribute("data-event")
    assert int(first or 0) >= newest, "the newest event is on top"
    older = page.get_by_role("button", name="Older events")
    while older.is_visible():
        older.click()
        # the page arrived: the button is enabled again (and hidden after the last page)
        expect(page.locator("#audit-older")).to_be_enabled()
    ids = [int(i) for i in table.locator("tbody tr").evaluate_all(ROW_IDS)]
    trail = store.query_audit(order="desc", before_id=ids[0] + 1, limit=1000)
    assert len(ids) > 100 and ids == [e.id for e in trail], "every event once, newest first"
    expect(table).to_contain_text("repair-rejected")
    expect(table).to_contain_text("repair-action-changed")
    expect(table).to_contain_text("p1")
    shoot(page, "09-audit")


def test_an_operator_resets_a_tripped_breaker_from_the_overview(
    page: Page, console: Console
) -> None:
    store = console.services.store
    cluster = ClusterName(console.services.cluster)
    closed = store.get_breaker(cluster)
    tripped = replace(
        closed,
        tripped=True,
        tripped_at=console.services.clock.now(),
        reason="trip: 3 node(s) repaired automatically in the last 0:10:00",
    )
    store.set_breaker(tripped, expected_tripped=False)
    sign_in(page, console)
    expect(page.locator("#breaker-state")).to_contain_text("tripped")
    page.get_by_label("Note").fill("PDU firmware rolled back")
    page.get_by_role("button", name="Reset the breaker").click()
    expect(page.get_by_role("status")).to_contain_text("Circuit breaker of")
    expect(page.locator("#breaker-state")).to_contain_text("closed")
    assert not store.get_breaker(cluster).tripped
    (reset,) = store.query_audit(kind=AuditKind.BREAKER_RESET, limit=10)
    assert "PDU firmware rolled back" in str(reset.payload)
    shoot(page, "10-breaker-reset")


def test_an_operator_resolves_an_alert_from_the_nodes_page(page: Page, console: Console) -> None:
    store = console.services.store
    node = NodeName("node002")
    alert = store.upsert_alert(
        Alert(
            cluster=ClusterName(console.services.cluster),
            node=node,
            key="agent:thermal",
            source=AlertSource.AGENT,
            summary="GPU 3 at 92 C",
            description="thermal",
            severity=Severity.WARNING,
            detector="agent:node002",
        ),
        console.services.clock.now(),
    )
    sign_in(page, console)
    go(page, "Nodes")
    row = page.locator(f"#alerts-table tr[data-alert='{alert.id}']")
    expect(row).to_contain_text("agent:thermal")
    row.get_by_role("button", name="Resolve").click()
    expect(page.get_by_role("status")).to_contain_text("Alert agent:thermal on node002 resolved")
    expect(row.get_by_role("button", name="Resolve")).to_have_count(0)  # redrawn: resolved
    (event,) = [
        e
        for e in store.query_audit(kind=AuditKind.ALERT_RESOLVED, limit=100)
        if e.payload.get("alert_id") == alert.id
    ]
    assert event.actor == f"user:{ADMIN}" and event.payload["why"] == f"resolved by user:{ADMIN}"
