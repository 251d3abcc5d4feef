"""Tailing with file notifications: only files inotify names are opened between full polls, the
lines are the ones polling reads, and a file written where inotify does not see is polled.

Real files in a temporary directory and the real kernel's inotify (Linux); no fake of either.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from medic.config.settings import SlurmSettings
from medic.domain.cluster import Job, JobState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.schedulers.slurm.logs import SlurmLogSource
from medic.testing import FakeClock

from .test_slurm_logs import Cursors, append

pytestmark = pytest.mark.skipif(not Path("/proc/sys/fs/inotify").exists(), reason="Linux only")


def _job(i: int, path: Path) -> Job:
    return Job(
        id=JobId(str(i)),
        cluster=ClusterName("c"),
        name=f"train-{i}",
        state=JobState.RUNNING,
        partition="p0",
        nodes=(NodeName(f"n{i:02d}"),),
        log_paths=(str(path),),
    )


def _world(tmp_path: Path, files: int = 20) -> tuple[list[Job], Path]:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "kern").mkdir()
    jobs = []
    for i in range(files):
        out = tmp_path / "jobs" / f"{i}.out"
        out.write_bytes(b"start\n")
        (tmp_path / "kern" / f"n{i:02d}.log").write_bytes(b"boot\n")
        jobs.append(_job(i, out))
    return jobs, tmp_path / "kern" / "{node}.log"


def _source(template: Path, clock: FakeClock, full_poll: float) -> SlurmLogSource:
    settings = SlurmSettings(kernel_log_template=str(template), log_full_poll_seconds=full_poll)
    return SlurmLogSource(Cursors(), settings, clock=clock)


def _opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = SlurmLogSource._read

    def counting(self: SlurmLogSource, target: object) -> object:
        seen.append(target.path)  # type: ignore[attr-defined]
        return real(self, target)  # type: ignore[arg-type]

    monkeypatch.setattr(SlurmLogSource, "_read", counting)
    return seen


def test_between_full_polls_only_the_files_written_are_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, template = _world(tmp_path)
    clock = FakeClock()
    logs = _source(template, clock, full_poll=60.0)
    opened = _opened(monkeypatch)
    first = logs.read_new(jobs)
    assert len(opened) == 40 and [ln.text for ln in first].count("start") == 20  # a full poll
    opened.clear()
    clock.advance(0.2)
    assert logs.read_new(jobs) == [] and opened == []  # nothing written: nothing opened
    append(tmp_path / "jobs" / "7.out", b"iteration 1\n")
    append(tmp_path / "kern" / "n03.log", b"NVRM: Xid 79\n")
    clock.advance(0.2)
    lines = logs.read_new(jobs)
    assert sorted(opened) == sorted(
        [str(tmp_path / "jobs" / "7.out"), str(tmp_path / "kern" / "n03.log")]
    )
    assert {(ln.job_id, ln.node, ln.text) for ln in lines} == {
        ("7", None, "iteration 1"),
        (None, "n03", "NVRM: Xid 79"),
    }
    opened.clear()
    clock.advance(60.0)
    logs.read_new(jobs)
    assert len(opened) == 40  # the full poll still opens everything


def test_notified_reading_returns_what_polling_returns(tmp_path: Path) -> None:
    jobs, template = _world(tmp_path, files=4)
    clock = FakeClock()
    notified, polled = _source(template, clock, 3600.0), _source(template, clock, 0.0)
    out = tmp_path / "jobs" / "1.out"
    steps = [
        lambda: append(out, b"a\nb\n"),
        lambda: append(out, b"partial "),
        lambda: append(out, b"line\n"),
        lambda: out.write_bytes(b"truncated\n"),  # truncation: from the start again
        lambda: (os.replace(out, tmp_path / "jobs" / "1.out.1"), out.write_bytes(b"rotated\n")),
        lambda: append(tmp_path / "kern" / "n02.log", b"mlx5_core: Link down\n"),
        lambda: None,
    ]
    for step in steps:
        step()
        clock.advance(0.2)
        theirs = [(ln.stream, ln.job_id, ln.node, ln.text) for ln in polled.read_new(jobs)]
        ours = [(ln.stream, ln.job_id, ln.node, ln.text) for ln in notified.read_new(jobs)]
        assert ours == theirs


def test_a_file_growing_without_notifications_is_read_every_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another host appending over NFS: no event. Simulated by swallowing the events."""
    jobs, template = _world(tmp_path, files=3)
    clock = FakeClock()
    logs = _source(template, clock, full_poll=1.0)
    logs.read_new(jobs)
    remote = tmp_path / "jobs" / "2.out"
    for n in range(2):  # two full polls that find it grown with no notification
        append(remote, f"remote {n}\n".encode())
        logs._watch.changed()
        clock.advance(1.0)
        assert [ln.text for ln in logs.read_new(jobs)] == [f"remote {n}"]
    opened = _opened(monkeypatch)
    append(remote, b"remote 2\n")
    logs._watch.changed()
    clock.advance(0.2)  # not a full poll
    assert [ln.text for ln in logs.read_new(jobs)] == ["remote 2"]
    assert opened == [str(remote)]
