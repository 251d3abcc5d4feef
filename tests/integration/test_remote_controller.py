"""Integration tests of the remote controller: ``run_controller`` over real HTTP.

The medic API runs in uvicorn on 127.0.0.1 (a thread of this process) over the harness's SQLite
store; advice is published straight into that store (the engine is not running, so only the remote
controller acts). The controller drives the simulated scheduler through a
:class:`~.conftest.RecordingScheduler` and keeps its ledger and audit trail on the server through
:class:`~medic.remote.MedicApiClient`, signed in with a controller token (``slurm-a``). Every
``once`` run is a fresh controller process.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from api.auth_kit import grant
from medic.api.advice import router as advice_router
from medic.api.app import create_app
from medic.cli import controller as controller_cli
from medic.cli.common import State
from medic.config.settings import ControllerSettings, Settings
from medic.control.executor import Controller
from medic.control.leases import LeaseKeeper
from medic.control.remote import run_controller
from medic.domain.actions import ActionStatus
from medic.domain.advice import Advice, AdviceAction, AdviceRequest, Reconciliation
from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.auth import Role
from medic.domain.cluster import JobState, Mode
from medic.domain.faults import FaultKind
from medic.domain.ids import JobId, NodeName
from medic.domain.leases import controller_lease
from medic.errors import ConfigError
from medic.ports import Scheduler
from medic.remote import MedicApiClient
from medic.services import Services
from medic.telemetry.metrics import NullMetrics
from medic.testing import LiveServer

from .conftest import CLUSTER, Crash, Harness, MakeHarness, RecordingScheduler

REQUEUE = ["requeue_hold", "set_excluded_nodes", "release"]
FAST = ControllerSettings(watchdog_timeout_seconds=120.0, poll_seconds=0.01)
CONTROLLER = "slurm-a"
"""The controller token's name: the API writes its audit events as ``controller:slurm-a``."""


# --- a real API server --------------------------------------------------------------------------
def services_of(h: Harness) -> Services:
    """The API's view of the harness: its store and clock (the loop is never run)."""
    return Services(
        settings=h.settings,
        cluster=CLUSTER,
        clock=h.clock,
        store=h.store,
        repair_store=h.store,
        tokens=h.store,
        modes=h.store,
        scheduler=h.sim.scheduler,
        logs=h.sim.logs,
        metrics=NullMetrics(),
        exposition=lambda: (b"", "text/plain"),
        loop=h.loop,
        injector=None,
        workload=None,
        close=lambda: None,
    )


def _live_api(services: Services, port: int = 0) -> LiveServer:
    """The medic API served by uvicorn on 127.0.0.1 in a background thread (real HTTP)."""
    app = create_app(services)
    if not any(getattr(r, "path", None) == "/api/v1/actions" for r in app.routes):
        app.include_router(advice_router)  # until create_app includes the advice router
    return LiveServer(app, port=port).start()


@dataclass
class Remote:
    """One harness, its API server and the remote controller's state directory."""

    h: Harness
    api: LiveServer
    journal: Path
    token: str
    clients: list[MedicApiClient] = field(default_factory=list)

    def client(self) -> MedicApiClient:
        client = MedicApiClient(self.api.url, timeout=5.0, token=self.token)
        self.clients.append(client)
        return client

    def run(self, scheduler: Scheduler, *, mode: Mode = Mode.ACT, passes: int = 1) -> None:
        """``passes`` fresh controller processes, one pass each."""
        for _ in range(passes):
            run_controller(
                scheduler=scheduler,
                ledger=self.client(),
                clock=self.h.clock,
                stop=threading.Event(),
                settings=FAST,
                mode=mode,
                journal_path=self.journal,
                once=True,
            )

    def restart_api(self) -> None:
        """Stop the server, then serve the same store again on the same port."""
        self.api.stop()
        self.api = _live_api(services_of(self.h), port=self.api.port)

    def proxy(self, **crash: int | None) -> RecordingScheduler:
        return RecordingScheduler(self.h.sim.scheduler, self.h.clock, **crash)

    def journal_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.journal.read_text(encoding="utf-8"))
        return data


class MakeRemote:
    def __init__(self, make_harness: MakeHarness, tmp_path: Path) -> None:
        self._make = make_harness
        self._tmp = tmp_path
        self.made: list[Remote] = []

    def __call__(self) -> Remote:
        h = self._make(mode=Mode.ACT)
        state = self._tmp / f"state-{len(self.made)}"
        token = grant(h.store, Role.CONTROLLER, CONTROLLER)
        remote = Remote(h, _live_api(services_of(h)), state / "journal-t.json", token)
        self.made.append(remote)
        return remote

    def close(self) -> None:
        for remote in self.made:
            for client in remote.clients:
                client.close()
            remote.api.stop()


@pytest.fixture
def make_remote(make_harness: MakeHarness, tmp_path: Path) -> Iterator[MakeRemote]:
    maker = MakeRemote(make_harness, tmp_path)
    yield maker
    maker.close()


# --- scenario -----------------------------------------------------------------------------------
def advance(h: Harness, seconds: float) -> None:
    h.clock.advance(seconds)
    h.sim.advance()


def publish(
    h: Harness, job: JobId, action: AdviceAction, exclude: frozenset[NodeName], attempt: int = 0
) -> Advice:
    request = AdviceRequest(
        cluster=CLUSTER,
        job_id=job,
        attempt=attempt,
        action=action,
        exclude_nodes=exclude,
        reason=f"test: {action.value}",
        mode=Mode.ACT,
        rule="test",
    )
    return h.store.publish_advice(request, h.clock.now())


def broken_job(h: Harness) -> tuple[JobId, NodeName, Advice]:
    """A running job that lost a GPU, and advice to requeue it without that node."""
    job = h.submit("train-a")
    advance(h, 13)
    bad = h.inject(FaultKind.GPU_FELL_OFF_BUS, job).node
    assert bad is not None
    advance(h, 1)
    return job, bad, publish(h, job, AdviceAction.REQUEUE, frozenset({bad}))


def shape(events: list[AuditEvent]) -> list[tuple[object, ...]]:
    """What must match between the embedded and the remote controller's audit records."""
    return [
        (
            e.kind,
            e.action,
            e.subject_type,
            e.subject_id,
            e.cluster,
            e.mode,
            sorted(k for k in e.payload if k != "component"),
            e.payload.get("key"),
            e.payload.get("status"),
        )
        for e in events
    ]


def assert_recovered(h: Harness, job: JobId, bad: NodeName) -> None:
    state = h.job(job)
    assert state.restart_count == 1
    assert not state.held
    assert state.excluded_nodes == frozenset({bad})
    assert state.state is JobState.RUNNING
    assert bad not in state.nodes


# --- tests ----------------------------------------------------------------------------------------
def test_remote_controller_converges_a_requeue_like_the_embedded_one(
    make_remote: MakeRemote,
) -> None:
    remote = make_remote()
    h = remote.h
    job, bad, advice = broken_job(h)
    scheduler = remote.proxy()

    remote.run(scheduler)

    assert scheduler.names() == REQUEUE
    assert_recovered(h, job, bad)
    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.CONVERGED
    assert stored.observed_generation == stored.generation
    assert remote.journal_data()["holds"] == []  # nothing left for the watchdog

    # The same scenario with the embedded controller writing to its store directly.
    embedded = make_remote().h
    job2, bad2, advice2 = broken_job(embedded)
    assert (job2, bad2, advice2.id) == (job, bad, advice.id)
    lease = LeaseKeeper(
        embedded.store, controller_lease(CLUSTER), clock=embedded.clock, ttl_seconds=8.0
    )
    assert lease.hold() is not None
    Controller(
        scheduler=embedded.scheduler, ledger=embedded.store, clock=embedded.clock, lease=lease
    ).reconcile(advice2)

    remote_events, local_events = h.audit(job), embedded.audit(job2)
    assert shape(remote_events) == shape(local_events)
    assert {e.actor for e in remote_events} == {f"controller:{CONTROLLER}"}
    assert {e.payload["component"] for e in remote_events} == {"medic-controller"}
    assert {e.actor for e in local_events} == {"medic-controller"}
    assert [e.time for e in remote_events] == sorted(e.time for e in remote_events)

    def ledger(hh: Harness, j: JobId) -> list[tuple[object, ...]]:
        return [(a.key, a.kind, a.status, a.job_id, a.advice_id, a.cluster) for a in hh.actions(j)]

    assert ledger(h, job) == ledger(embedded, job2)
    assert {a.status for a in h.actions(job)} == {ActionStatus.SUCCEEDED}


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("where", ["after", "before"])
def test_a_killed_controller_is_finished_by_the_next_without_repeating_or_skipping(
    make_remote: MakeRemote, where: str, n: int
) -> None:
    remote = make_remote()
    h = remote.h
    job, bad, advice = broken_job(h)
    first = remote.proxy(**{f"crash_{where}": n})
    with pytest.raises(Crash):
        remote.run(first)
    done = n if where == "after" else n - 1
    assert first.names() == REQUEUE[:done]

    # A new controller process (a new lease holder) acts once the dead one's lease ran out.
    advance(h, FAST.lease_seconds + 1)
    second = remote.proxy()
    remote.run(second, passes=2)

    assert first.names() + second.names() == REQUEUE, "a step was repeated or lost"
    assert_recovered(h, job, bad)
    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.CONVERGED
    # Every step succeeded, the one the dead controller issued too (its outcome found from the
    # scheduler by the next one); none is recorded as skipped, which would say nothing went out.
    records = {r.kind.value: r.status for r in h.actions(job)}
    assert set(records) == {"requeue_hold", "exclude_nodes", "release"}
    assert set(records.values()) == {ActionStatus.SUCCEEDED}
    data = remote.journal_data()
    assert data["holds"] == []
    assert data["history"] == [], "the watchdog must not act on a recovery that completed"


def test_remote_controller_stops_a_job(make_remote: MakeRemote) -> None:
    remote = make_remote()
    h = remote.h
    job = h.submit("train-a")
    advance(h, 13)
    advice = publish(h, job, AdviceAction.STOP, frozenset())
    scheduler = remote.proxy()

    remote.run(scheduler, passes=2)

    assert scheduler.names() == ["cancel"]
    assert h.job(job).state is JobState.CANCELLED
    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.CONVERGED
    assert not remote.journal.exists()  # no hold: nothing was journalled for the watchdog


def test_observe_mode_controller_issues_nothing(make_remote: MakeRemote) -> None:
    remote = make_remote()
    h = remote.h
    job, _, advice = broken_job(h)
    scheduler = remote.proxy()

    remote.run(scheduler, mode=Mode.OBSERVE, passes=3)

    assert scheduler.calls == []
    assert h.actions(job) == []
    assert h.audit(job) == []
    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.PENDING


def test_stop_ends_the_loop_after_the_pass_in_flight(make_remote: MakeRemote) -> None:
    remote = make_remote()
    h = remote.h
    job, bad, _ = broken_job(h)
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            run_controller(
                scheduler=h.scheduler,
                ledger=remote.client(),
                clock=h.clock,
                stop=stop,
                settings=FAST,
                mode=Mode.ACT,
                journal_path=remote.journal,
            )
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    thread = threading.Thread(target=loop)
    thread.start()
    deadline = time.monotonic() + 10
    while h.scheduler.names() != REQUEUE and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert not thread.is_alive(), "run_controller did not return after stop"
    assert errors == []
    assert_recovered(h, job, bad)


def test_one_controller_per_state_directory(make_remote: MakeRemote) -> None:
    remote = make_remote()
    from medic.control.journal import Journal

    with Journal.open(remote.journal), pytest.raises(ConfigError, match="another medic"):
        remote.run(remote.proxy())


def test_medic_controller_command_converges_with_the_configured_scheduler(
    make_remote: MakeRemote, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    remote = make_remote()
    h = remote.h
    job, bad, advice = broken_job(h)
    seen: list[Settings] = []

    def build_scheduler(settings: Settings) -> Scheduler:
        seen.append(settings)
        return h.scheduler

    import medic.cli.controller

    monkeypatch.setattr(medic.cli.controller, "build_scheduler", build_scheduler)
    monkeypatch.delenv("MEDIC_CONFIG", raising=False)
    app = typer.Typer()

    @app.callback()
    def _root(ctx: typer.Context) -> None:
        ctx.obj = State(config_path=None, log_level="warning")

    controller_cli.register(app)
    args = ["controller", "--api", remote.api.url, "--cluster", CLUSTER, "--once"]
    args += ["--state-dir", str(tmp_path / "cli"), "--mode", "act"]
    monkeypatch.delenv("MEDIC_TOKEN", raising=False)

    without = CliRunner().invoke(app, args)
    assert without.exit_code == 2 and "--token" in without.output, without.output
    assert h.scheduler.names() == []

    monkeypatch.setenv("MEDIC_TOKEN", remote.token)
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 0, result.output
    assert [s.scheduler.cluster for s in seen] == [CLUSTER]
    assert h.scheduler.names() == REQUEUE
    assert_recovered(h, job, bad)
    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.CONVERGED
    assert (tmp_path / "cli" / f"journal-{CLUSTER}.json").exists()


def test_a_revoked_controller_token_is_refused_and_nothing_is_done(
    make_remote: MakeRemote,
) -> None:
    remote = make_remote()
    h = remote.h
    job, _, advice = broken_job(h)
    h.store.revoke_token(CONTROLLER, h.clock.now())
    scheduler = remote.proxy()

    remote.run(scheduler, passes=2)  # every call is refused (401): nothing is done, no crash

    assert scheduler.calls == [] and h.actions(job) == []
    stored = h.store.get_advice(advice.id)
    assert stored is not None and stored.status is Reconciliation.PENDING
    denied = h.store.query_audit(kind=AuditKind.ACCESS_DENIED, limit=100)
    assert denied and {e.payload["why"] for e in denied} == {"token revoked"}
    assert {e.payload["principal"] for e in denied} == {CONTROLLER}
