"""Bad input that broke the control loop by only being sent: a log line holding NUL (PostgreSQL
refused it: a job line lost its detection, a kernel line failed the whole pass and every line read
in it), and a job comment holding a 5,000-digit integer (a plain ValueError on every pass, the job
never watched). Log lines run on every engine (``contract.test_store.ENGINES``)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from contract.test_store import ENGINES, _drop_everything
from medic.config.settings import SchedulerSettings, Settings
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, Mode
from medic.domain.ids import JobId
from medic.domain.logs import LogLine, LogStream
from medic.schedulers.sim import SimCluster
from medic.store import create_store
from medic.testing import FakeClock

from .conftest import CLUSTER, SIM, Harness, MakeHarness, RecordingLogs, RecordingScheduler

WARM_UP = 5.0


class ExtraLogs(RecordingLogs):
    """The simulator's lines, plus the lines a test adds (read once, on the next pass)."""

    def __init__(self, inner: RecordingLogs) -> None:
        super().__init__(inner)
        self.extra: list[LogLine] = []

    def read_new(self, jobs: Sequence[Job]) -> Sequence[LogLine]:
        lines = [*super().read_new(jobs), *self.extra]
        self.extra = []
        return lines


@pytest.fixture(params=ENGINES)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'medic.db'}"
    else:
        url = os.environ[request.param]
        _drop_everything(url)
    clock = FakeClock()
    cluster = SimCluster(clock, SIM, cluster=CLUSTER)
    store = create_store(url)
    h = Harness(
        clock=clock,
        sim=cluster,
        store=store,
        scheduler=RecordingScheduler(cluster.scheduler, clock),
        logs=ExtraLogs(RecordingLogs(cluster.logs)),
        settings=Settings(scheduler=SchedulerSettings(cluster=CLUSTER, mode=Mode.OBSERVE), sim=SIM),
    )
    yield h
    store.close()


def _add(h: Harness, *lines: LogLine) -> None:
    assert isinstance(h.logs, ExtraLogs)
    h.logs.extra.extend(lines)


# --- 2. NUL in a matching log line --------------------------------------------------------------
def test_matching_lines_with_nul_are_detected_and_the_pass_survives(harness: Harness) -> None:
    h = harness
    job = h.submit("nul")
    h.run(WARM_UP)
    node = h.job(job).nodes[-1]
    now = h.clock.now()
    _add(
        h,
        LogLine(
            LogStream.JOB,
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory.\x00 Tried to allocate 2 GiB",
            now,
            node,
            job,
        ),
        LogLine(
            LogStream.KERNEL,
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=\x00, name=python, GPU has fallen off the bus.",
            now,
            node,
        ),
    )
    h.run(1.0)  # raised on PostgreSQL: the kernel line's write failed the pass

    found = {d.signature_id: d for d in h.detections(job)}
    assert {"cuda.oom", "xid.fallen_off_bus"} <= set(found)
    assert "\ufffd Tried" in found["cuda.oom"].text
    assert all("\x00" not in d.text for d in found.values())
    assert all(r.errors == 0 for r in h.reports)
    assert not h.audit(kind=AuditKind.LOOP_ERROR)


# --- 4. an integer too long to read in a job comment -------------------------------------------
HUGE = "9" * 5000


def test_an_over_long_integer_in_a_job_comment_is_recorded_once(make_harness: MakeHarness) -> None:
    h = make_harness()
    comment = f'{{"medic": {{"max_attempts_without_progress": {HUGE}}}}}'
    job = h.submit("huge", comment=comment)
    h.run(10.0)  # 50 passes

    [event] = h.audit(job, AuditKind.JOB_OPTIONS_INVALID)
    assert "medic.max_attempts_without_progress" in event.payload["error"]
    assert "5000 digits" in event.payload["error"]
    assert h.audit(job, AuditKind.LOOP_ERROR) == [], "not an error row on every pass"
    assert all(r.errors == 0 for r in h.reports)


def test_an_over_long_integer_outside_medic_options_leaves_the_job_watched(
    make_harness: MakeHarness,
) -> None:
    h = make_harness()
    job = h.submit("owner", comment=f'{{"ticket": {HUGE}, "medic": {{"mode": "observe"}}}}')
    h.run(WARM_UP)
    assert h.audit(job, AuditKind.JOB_OPTIONS_INVALID) == []
    assert h.audit(job, AuditKind.LOOP_ERROR) == []
    assert h.store.list_attempts(CLUSTER, JobId(job))[0].progress.last_step is not None, "watched"


# --- 6. repeated evidence ------------------------------------------------------------------------
def test_identical_lines_are_counted_not_stored_once_per_line(harness: Harness) -> None:
    h = harness
    # The 100,000 on SQLite; the servers run the same upsert on fewer, for time.
    repeats = 100_000 if h.store.url.startswith("sqlite") else 10_000
    job = h.submit("spam")
    h.run(WARM_UP)
    node = h.job(job).nodes[-1]
    line = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    for _ in range(2):  # within a pass and across passes
        now = h.clock.now()
        _add(h, *(LogLine(LogStream.JOB, line, now, node, job) for _ in range(repeats // 2)))
        h.run(0.2)
    h.run(3.0)

    [oom] = [d for d in h.detections(job) if d.signature_id == "cuda.oom"]
    assert oom.count == repeats
    assert oom.last_seen is not None and oom.last_seen > oom.time
    assert len(h.detections(job)) < 10, "one row per distinct detection, not per line"
    assert all(r.errors == 0 for r in h.reports)
    [verdict] = h.verdicts(job)
    assert verdict.root_signature == "cuda.oom", "attribution reads the counted evidence as before"
