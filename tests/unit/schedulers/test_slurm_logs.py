"""SlurmLogSource on real temporary files: appends, partial lines, truncation, rotation, restarts
from the stored cursor, undecodable bytes, huge lines, kernel logs and rank prefixes."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from medic.config.settings import SlurmSettings
from medic.detect.patterns import strip_rank_prefix
from medic.domain.cluster import Job, JobState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.logs import LogLine, LogStream
from medic.schedulers.slurm.logs import (
    MAX_LINE_BYTES,
    RESCAN_SECONDS,
    TRUNCATED,
    SlurmLogSource,
    parse_rank,
)
from medic.testing import FakeClock


class Cursors:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get_cursor(self, source: str) -> str | None:
        return self.values.get(source)

    def set_cursor(self, source: str, value: str) -> None:
        self.values[source] = value


def job(path: Path, state: JobState = JobState.RUNNING, nodes: tuple[str, ...] = ()) -> Job:
    return Job(
        id=JobId("7"),
        cluster=ClusterName("c"),
        name="train",
        state=state,
        partition="gpu",
        nodes=tuple(NodeName(n) for n in nodes),
        log_paths=(str(path),),
    )


def texts(lines: list[LogLine] | tuple[LogLine, ...]) -> list[str]:
    return [line.text for line in lines]


@pytest.fixture
def cursors() -> Cursors:
    return Cursors()


FULL_POLL = 1.0


@pytest.fixture(autouse=True, params=[1.0, 0.0], ids=["notified", "polled"])
def _reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test twice: files read when inotify names them (the fake clock never reaches the
    next full poll), and every file read every pass."""
    monkeypatch.setattr(sys.modules[__name__], "FULL_POLL", request.param)


def source(cursors: Cursors, template: str = "", clock: FakeClock | None = None) -> SlurmLogSource:
    settings = SlurmSettings(kernel_log_template=template, log_full_poll_seconds=FULL_POLL)
    return SlurmLogSource(cursors, settings, clock=clock or FakeClock())


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_reads_only_new_complete_lines(tmp_path: Path, cursors: Cursors) -> None:
    out = tmp_path / "train-7.out"
    append(out, b"[rank0]: one\n[rank1]: two\n")
    logs = source(cursors)
    lines = list(logs.read_new([job(out)]))
    assert texts(lines) == ["[rank0]: one", "[rank1]: two"]
    assert [(line.rank, line.job_id, line.node, line.stream) for line in lines] == [
        (0, "7", None, LogStream.JOB),
        (1, "7", None, LogStream.JOB),
    ]
    assert lines[0].seq < lines[1].seq
    assert list(logs.read_new([job(out)])) == []
    append(out, b"three\npart")
    assert texts(list(logs.read_new([job(out)]))) == ["three"]
    append(out, b"ial\n")
    assert texts(list(logs.read_new([job(out)]))) == ["partial"]


def test_an_ended_job_gets_its_unterminated_last_line(tmp_path: Path, cursors: Cursors) -> None:
    out = tmp_path / "o.out"
    append(out, b"done\nno newline")
    logs = source(cursors)
    assert texts(list(logs.read_new([job(out)]))) == ["done"]
    assert texts(list(logs.read_new([job(out, JobState.FAILED)]))) == ["no newline"]
    assert list(logs.read_new([job(out, JobState.FAILED)])) == []


def test_truncation_starts_again_at_zero(tmp_path: Path, cursors: Cursors) -> None:
    out = tmp_path / "o.out"
    append(out, b"a long first line\nsecond\n")
    logs = source(cursors)
    logs.read_new([job(out)])
    out.write_bytes(b"new\n")  # same inode, shorter than the offset
    assert texts(list(logs.read_new([job(out)]))) == ["new"]


def test_rotation_starts_the_new_file_at_zero(tmp_path: Path, cursors: Cursors) -> None:
    out = tmp_path / "o.out"
    append(out, b"old 1\nold 2\nold 3\n")
    logs = source(cursors)
    logs.read_new([job(out)])
    os.rename(out, tmp_path / "o.out.1")
    append(out, b"fresh, longer than nothing at all\n")
    assert texts(list(logs.read_new([job(out)]))) == ["fresh, longer than nothing at all"]


def test_a_restarted_source_resumes_from_the_stored_cursor(
    tmp_path: Path, cursors: Cursors
) -> None:
    out = tmp_path / "o.out"
    append(out, b"before\n")
    source(cursors).read_new([job(out)])
    assert cursors.values == {f"slurm-log:{out}": f"{out.stat().st_ino}:7"}
    append(out, b"after\n")
    assert texts(list(source(cursors).read_new([job(out)]))) == ["after"]


def test_a_stale_cursor_for_a_replaced_file_is_ignored(tmp_path: Path, cursors: Cursors) -> None:
    out = tmp_path / "o.out"
    append(out, b"whole file\n")
    cursors.set_cursor(f"slurm-log:{out}", f"{out.stat().st_ino + 1}:5")
    assert texts(list(source(cursors).read_new([job(out)]))) == ["whole file"]
    cursors.set_cursor(f"slurm-log:{out}", "garbage")
    assert texts(list(source(Cursors()).read_new([job(out)]))) == ["whole file"]


def test_undecodable_bytes_are_replaced(tmp_path: Path, cursors: Cursors) -> None:
    out = tmp_path / "o.out"
    append(out, b"\xff\xfe NVRM: Xid 79 \xc3\r\n")
    (line,) = source(cursors).read_new([job(out)])
    assert line.text == "\ufffd\ufffd NVRM: Xid 79 \ufffd"


def test_huge_lines_are_cut_and_marked(tmp_path: Path, cursors: Cursors) -> None:
    out = tmp_path / "o.out"
    append(out, b"x" * (MAX_LINE_BYTES + 10) + b"\nnext\n")
    logs = source(cursors)
    first, second = logs.read_new([job(out)])
    assert first.text == "x" * MAX_LINE_BYTES + TRUNCATED and second.text == "next"
    # An unterminated huge line: its head now, its tail skipped when it ends.
    append(out, b"y" * (MAX_LINE_BYTES + 1))
    assert texts(list(logs.read_new([job(out)]))) == ["y" * MAX_LINE_BYTES + TRUNCATED]
    append(out, b"yyyy")
    assert list(logs.read_new([job(out)])) == []
    append(out, b"yy\nafter\n")
    assert texts(list(logs.read_new([job(out)]))) == ["after"]


def test_missing_files_are_skipped(tmp_path: Path, cursors: Cursors) -> None:
    assert list(source(cursors).read_new([job(tmp_path / "not-yet.out")])) == []
    assert cursors.values == {}


def test_kernel_logs_are_found_by_template_and_read_from_their_end(
    tmp_path: Path, cursors: Cursors
) -> None:
    template = str(tmp_path / "{node}" / "kern.log")
    for node in ("node1", "node2"):
        (tmp_path / node).mkdir()
        append(tmp_path / node / "kern.log", b"old history\n")
    clock = FakeClock()
    logs = source(cursors, template, clock)
    assert list(logs.read_new([])) == []
    append(tmp_path / "node2" / "kern.log", b"NVRM: Xid (PCI:0000:1b:00): 79, GPU fell off\n")
    (line,) = logs.read_new([])
    assert (line.stream, line.node, line.job_id, line.rank) == (
        LogStream.KERNEL,
        "node2",
        None,
        None,
    )
    # A node that appears later is found at the next rescan, or at once when a job runs there.
    (tmp_path / "node3").mkdir()
    append(tmp_path / "node3" / "kern.log", b"boot\n")
    assert list(logs.read_new([])) == []
    append(tmp_path / "node3" / "kern.log", b"xid\n")
    out = tmp_path / "o.out"
    lines = logs.read_new([job(out, nodes=("node3",))])
    assert [(line.node, line.text) for line in lines] == [("node3", "boot"), ("node3", "xid")]
    clock.advance(RESCAN_SECONDS)
    append(tmp_path / "node3" / "kern.log", b"later\n")
    assert texts(list(logs.read_new([]))) == ["later"]


@pytest.mark.parametrize(
    ("text", "rank"),
    [
        ("[rank3]: loss 1.0", 3),
        ("0: hello", 0),
        ("  12: hello", 12),
        ("12: [rank5]: both", 5),
        ("plain line", None),
        ("[default3]: torchrun local rank", None),
        ("time 12: not a label", None),
        ("[rank0] step 10 loss 2.3", 0),  # no colon, then a blank
        ("rank7: saved checkpoint at step 5", 7),
        ("[5]: x", 5),  # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${rank}]:"
        ("12: [rank12]: x", 12),
        ("3: [default3]: x", None),  # srun's task and torchrun's local rank: no global rank
        ("0: [default0]:[rank8]: x", 8),
        ("  [rank4]: x", 4),
        ("[rank0]", None),
        ("[Rank 0] step=1, skipped=0", None),
        ("12:34:56 not a label", None),
    ],
)
def test_parse_rank(text: str, rank: int | None) -> None:
    assert parse_rank(text) == rank
    assert parse_rank(text) == strip_rank_prefix(text)[1]  # the matcher's rank, by construction


def test_labelled_lines_carry_their_rank(tmp_path: Path, cursors: Cursors) -> None:
    logs = source(cursors)
    out = tmp_path / "o.out"
    append(out, b"0: [default0]:[rank8]: iter 5: loss 2.1\n 3: saved checkpoint at step 9\n")
    append(out, b"3: [default3]: step 10 loss 2.0\n")
    lines = list(logs.read_new([job(out)]))
    assert [(line.rank, line.text) for line in lines] == [
        (8, "0: [default0]:[rank8]: iter 5: loss 2.1"),
        (3, " 3: saved checkpoint at step 9"),
        (None, "3: [default3]: step 10 loss 2.0"),
    ]


def test_a_resubmission_sharing_the_output_file_gets_its_new_lines(
    tmp_path: Path, cursors: Cursors
) -> None:
    # The same --output with --open-mode=append for an ended job and its resubmission: the
    # file's new lines are the live job's, whichever order squeue lists them in.
    out = tmp_path / "train.out"
    out.write_text("old run's last line\n")
    ended = replace(job(out, JobState.CANCELLED), id=JobId("11"))
    live = replace(job(out), id=JobId("12"))
    src = source(cursors)
    assert [(line.job_id, line.text) for line in src.read_new([live, ended])] == [
        ("12", "old run's last line")
    ]
    with out.open("a") as handle:
        handle.write("new run's first line\n")
    assert [(line.job_id, line.text) for line in src.read_new([ended, live])] == [
        ("12", "new run's first line")
    ]
