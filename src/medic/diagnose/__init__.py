"""Offline diagnosis: a directory of one failed attempt's logs into a verdict (``medic diagnose``).

The directory holds one file per node, ``<node>.log`` (everything the node emitted: its ranks'
output with ``[rankN]:`` prefixes and its kernel lines), and optionally ``job.out`` (the job's
combined output). Other files are ignored. The same engine as the control loop runs on them: the
signature matcher (a :class:`~medic.ports.Diagnoser`), then :func:`medic.attribute.attribute`.

How lines are read:

- Files are read as bytes, split on ``\\n`` and decoded as UTF-8 with replacement: any input is
  accepted, line numbers are the file's own (1-based).
- A node file's lines are that node's. A ``job.out`` line is placed on the host it names (NCCL's
  ``host:pid:tid [gpu]`` prefix, a syslog ``host kernel:`` prefix, srun's ``srun: error: host:``)
  or, with a rank prefix (``[rankN]:``, srun's ``N:``, ...: ``strip_rank_prefix``), on the node
  that runs the rank: the ranks each node file shows first, then NCCL's communicator init lines
  (``comm 0x... rank 21 nranks 32 ...`` on a node: its global ranks), else the default layout
  (``rank // gpus_per_node`` indexes the node list, sorted with numbers compared as numbers, so
  ``node2`` sorts before ``node10``).
- A line a Ray driver printed for a worker (``(WorkerDict pid=23113, ip=10.20.0.13) ...``), and
  the remote traceback after a task error's header (``ray::WorkerDict.update() (pid=23113,
  ip=10.20.0.13, ...)``), are the worker's node's: the one its address names in the other Ray
  lines.
- Terminal colour codes (``\x1b[31m``, rich's tracebacks, Lightning's) are removed first.
- A line tagged with a job node's name (``node-a1: [rank0]: ...``: pdsh and clush, DeepSpeed's
  multi-node launcher) is that node's, read without its tag.
- Kernel lines are recognised by shape (a dmesg ``[ 1234.567890]`` or ``dmesg -T`` stamp, a
  syslog ``host kernel:`` prefix, ``NVRM:``, ``Xid``, ``mlx5_core``) unless they carry a rank
  prefix.
- Times come from the lines (:mod:`medic.diagnose.stamps`: ISO 8601 and nvidia-smi's ``2026/06/08
  09:00:00.000``, the HF example scripts' ``06/08/2026 09:00:00``, PyTorch's glog ``E0101
  00:10:00.123``, dora's ``[06-08 09:00:00]``, syslog, ``dmesg -T``); a line without one takes the
  previous line's in its file (the file's first one before it; a file without any takes the
  earliest of the directory), except a fault line followed closely by a stamped one: it takes that
  one's (it was printed as the failure happened). Glog and syslog stamps print no year: the first
  ISO date (or ``dmesg -T`` stamp) of the directory gives it. Clocks of different sources disagree,
  so the failure window in which stronger evidence wins is wider than the live loop's.

The progress lines are followed as the live loop follows them (:mod:`medic.detect.progress`), so
a job whose throughput fell below its own baseline for long enough gets the loop's slow-job
finding, and attribution can name the node whose own lines explain it
(:mod:`medic.attribute.slowdown`).

Where lines belong (hosts, tags, ranks, Ray workers) is gathered by
:mod:`medic.diagnose.placement`.

Raises :class:`~medic.errors.InputError` for a missing or empty directory, never for content.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

from medic.attribute import DEFAULT_GPUS_PER_NODE, attribute, recommended_node_action
from medic.config.settings import DetectSettings
from medic.detect.catalogue import node_actions
from medic.detect.matcher import SignatureDiagnoser, strip_rank_prefix
from medic.detect.progress import ProgressTracker
from medic.detect.signatures import Signature
from medic.diagnose.placement import HOST, Placement, host_name, ray_worker, untagged
from medic.diagnose.stamps import line_time, year_of
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, Role, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.logs import LogLine, LogStream
from medic.errors import InputError
from medic.ports import Diagnoser

__all__ = [
    "JOB_OUT",
    "OFFLINE_WINDOW_SECONDS",
    "Diagnosis",
    "EvidenceLine",
    "diagnose_directory",
    "natural_key",
]

JOB_OUT = "job.out"
OFFLINE_WINDOW_SECONDS = 300.0
"""Failure window for offline logs (the live loop uses 10 s): kernel, PyTorch and launcher clocks
of a post-mortem disagree by more than the loop's read delay."""

OFFLINE_SLOW_SAMPLES = 10
"""Progress samples in a row a post-mortem's slow job needs when its slowness lasted less than
the live ``straggler_seconds`` (twice the throughput watch's smoothing window: the median fell
and stayed down until the log ended)."""

_BATCH = 20_000
_UNTIMED = datetime.min.replace(tzinfo=UTC)
_KERNEL = re.compile(
    r"^\s*\[\s*\d{1,10}\.\d{1,9}\]|^\[\w{3} \w{3} [ \d]?\d \d\d:\d\d:\d\d \d{4}\]"
    r"|^(?:<\d{1,3}>)?\w{3} {1,2}\d{1,2} \d\d:\d\d:\d\d \S{1,64} kernel: |NVRM: |\bXid\b|mlx5_core"
)


@dataclass(frozen=True, slots=True)
class EvidenceLine:
    """One line of evidence, where it is in the directory."""

    node: NodeName | None
    file: str
    line: int
    """1-based line number in ``file`` (0, and ``file`` empty, for a finding derived from many
    lines, such as a slow job)."""
    signature: str
    text: str


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The verdict on a log directory, with its evidence located in the files."""

    path: str
    verdict: Verdict
    node_action: str | None
    """Node repair the verdict calls for on its implicated nodes (``reset_gpu``, ``reboot`` ...)."""
    evidence: tuple[EvidenceLine, ...]
    nodes: tuple[NodeName, ...]
    files: tuple[str, ...]
    lines: int
    detections: int

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: verdict fields, then evidence lines."""
        v = self.verdict
        return {
            "domain": v.domain.value,
            "action": v.action.value,
            "implicated_nodes": sorted(v.implicated_nodes, key=natural_key),
            "root_signature": v.root_signature,
            "confidence": round(v.confidence, 3),
            "node_action": self.node_action,
            "summary": v.summary,
            "evidence": [
                {"node": e.node, "file": e.file, "line": e.line, "signature": e.signature,
                 "text": e.text}
                for e in self.evidence
            ],
        }  # fmt: skip


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key comparing digit runs as numbers (``node2`` < ``node10``)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


@dataclass(slots=True)
class _File:
    name: str
    path: Path
    node: NodeName | None
    first_seq: int = 0
    first_time: datetime | None = None
    printed: bool = False
    """Whether the file has any non-blank line."""
    run_starts: list[int] = field(default_factory=list)
    """Each run of unstamped lines that a stamped line ends: its first (global) line number ..."""
    run_ends: list[int] = field(default_factory=list)
    """... the number of the stamped line that ends it ..."""
    run_end_times: list[datetime] = field(default_factory=list)
    """... and that line's time (kept per run, not per line: memory follows the runs)."""


def _files(directory: Path) -> list[_File]:
    if not directory.exists():
        raise InputError(str(directory), "no such directory")
    if not directory.is_dir():
        raise InputError(str(directory), "not a directory")
    found = [
        _File(p.name, p, NodeName(p.name[: -len(".log")]))
        for p in directory.iterdir()
        if p.name.endswith(".log") and len(p.name) > 4 and not p.name.startswith(".")
        and p.is_file()
    ]  # fmt: skip
    found.sort(key=lambda f: natural_key(f.name))
    if (directory / JOB_OUT).is_file():
        found.append(_File(JOB_OUT, directory / JOB_OUT, None))
    if not found:
        raise InputError(str(directory), "no <node>.log files and no job.out")
    try:
        if all(f.path.stat().st_size == 0 for f in found):
            raise InputError(str(directory), "every log file is empty")
    except OSError as exc:
        raise InputError(str(directory), f"cannot read: {exc.strerror or exc}") from None
    return found


def _lines(path: Path) -> Iterator[str]:
    try:
        with path.open("rb") as handle:
            for raw in handle:
                yield raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None


def _base_year(files: list[_File]) -> int:
    """The year of the directory's first printed date (see :func:`~medic.diagnose.stamps.year_of`):
    a glog line of a JAX or PyTorch job and its node's ``dmesg -T`` Xid must fall in the same
    year to be compared."""
    for f in files:
        year = year_of(islice(_lines(f.path), 500))
        if year is not None:
            return year
    return 2000  # any leap year: relative order is all that matters without a printed year


def _line(
    text: str, tagged: NodeName | None, f: _File, known: frozenset[NodeName], when: datetime,
    seq: int,
) -> LogLine:  # fmt: skip
    """One line (already without its colour codes and host tag, ``tagged`` the host) as read."""
    body, rank = strip_rank_prefix(text)
    kernel = rank is None and _KERNEL.search(text[:200]) is not None
    node = f.node or tagged
    if node is None and (match := HOST.match(body)):
        name = match.group("nccl") or match.group("syslog") or match.group("srun")
        node = host_name(name or match.group("stepd"), known)
    stream = LogStream.KERNEL if kernel else LogStream.JOB
    return LogLine(stream, text, when, node, None, rank, seq)


def diagnose_directory(
    path: str | Path,
    *,
    diagnoser: Diagnoser | None = None,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    rank_nodes: Mapping[int, NodeName] | None = None,
    window_seconds: float = OFFLINE_WINDOW_SECONDS,
) -> Diagnosis:
    """Diagnose one attempt from its log directory (see the module docstring).

    ``diagnoser`` defaults to the built-in signature matcher; ``rank_nodes`` overrides the rank to
    node mapping read from the node files. Raises ``InputError`` for a missing directory, one
    without log files, or one whose log files are all empty.
    """
    directory = Path(path)
    files = _files(directory)
    engine = diagnoser if diagnoser is not None else SignatureDiagnoser()
    node_files = frozenset(f.node for f in files if f.node is not None)
    year = _base_year(files)
    detections: list[Detection] = []
    where = Placement(node_files)
    seq = 0
    for f in files:
        f.first_seq = seq + 1
        where.new_file()
        last: datetime | None = None
        run_start: int | None = None  # first line of the current run of unstamped lines
        batch: list[LogLine] = []
        for raw in _lines(f.path):
            # The tag and colours go first: a glog stamp after "host: " opens the line then.
            text, tagged = untagged(raw, node_files)
            text, ray_ip = ray_worker(text)
            seq += 1
            f.printed = f.printed or bool(text.strip())
            stamp = line_time(strip_rank_prefix(text)[0], year)
            if stamp is not None:
                last = stamp
                f.first_time = f.first_time or stamp
                if run_start is not None:
                    f.run_starts.append(run_start)
                    f.run_ends.append(seq)
                    f.run_end_times.append(stamp)
                    run_start = None
            elif run_start is None:
                run_start = seq
            line = _line(text, tagged, f, node_files, last or _UNTIMED, seq)
            where.note(line, f.node, stamp is not None, ray_ip)
            batch.append(line)
            if len(batch) >= _BATCH:
                detections += engine.scan(batch)
                batch = []
        detections += engine.scan(batch)
    nodes = sorted(node_files or where.hosts, key=natural_key)
    detections = where.placed(_timed(detections, files))
    job = Job(
        id=JobId(directory.resolve().name or str(directory)),
        cluster=ClusterName("offline"),
        name=directory.resolve().name,
        state=JobState.UNKNOWN,
        partition="",
        nodes=tuple(NodeName(n) for n in nodes),
        num_nodes=len(nodes),
    )
    now = max((d.time for d in detections), default=datetime(year, 1, 1, tzinfo=UTC))
    detections += _slowness(detections, now)
    verdict = attribute(
        job,
        0,
        detections,
        now=now,
        window_seconds=window_seconds,
        rank_nodes={**where.rank_nodes(), **(rank_nodes or {})},
        gpus_per_node=gpus_per_node,
        silent_nodes=_silent(files),
    )
    return Diagnosis(
        path=str(directory),
        verdict=verdict,
        node_action=recommended_node_action(verdict, node_actions(_signatures(engine))),
        evidence=tuple(_locate(d, files) for d in verdict.evidence),
        nodes=job.nodes,
        files=tuple(f.name for f in files),
        lines=seq,
        detections=len(detections),
    )


def _signatures(engine: Diagnoser) -> tuple[Signature, ...] | None:
    """The engine's catalogue when it is a signature matcher (a site's own signatures included),
    else None (the packaged one)."""
    return engine.signatures if isinstance(engine, SignatureDiagnoser) else None


def _slowness(detections: list[Detection], now: datetime) -> list[Detection]:
    """The live loop's straggler findings (a slow node by its compute time, a job slower than its
    own baseline), from the attempt's progress lines in time order, at the end of the logs."""
    tracker = ProgressTracker(attempt=0)
    for d in sorted(detections, key=lambda d: (d.time, d.seq)):
        tracker.observe(d)
    settings = DetectSettings()
    found = []
    while (
        finding := tracker.check_straggler(now, settings, slow_samples=OFFLINE_SLOW_SAMPLES)
    ) is not None:
        found.append(finding)
    return found


def _silent(files: list[_File]) -> frozenset[NodeName]:
    """Node files with nothing in them, when another node's file has lines (a node that never
    started its part); none when no node printed anything (every line in job.out)."""
    nodes = [f for f in files if f.node is not None]
    if not any(f.printed for f in nodes):
        return frozenset()
    return frozenset(f.node for f in nodes if f.node is not None and not f.printed)


def _file_of(seq: int, files: list[_File], starts: list[int]) -> _File:
    """The file holding line ``seq`` (files are numbered consecutively, in order; ``starts`` are
    their first line numbers)."""
    return files[max(bisect_right(starts, seq) - 1, 0)]


_FAULT_ROLES = frozenset({Role.ROOT, Role.CASCADE, Role.CONFIRMATION})
_NEXT_STAMP_LINES = 50
"""How far (in lines) the next stamped line may be for an unstamped fault line to take its time."""


def _timed(detections: list[Detection], files: list[_File]) -> list[Detection]:
    """Times for the detections of lines that carry none.

    An unstamped line was printed between the stamps before and after it. A fault line (an NCCL
    WARN, a CUDA error) is printed as the fault happens, and the stamped lines of the same
    failure follow it closely: it takes the next stamp of its file when one comes within
    :data:`_NEXT_STAMP_LINES` lines, so that a launch-time stamp an hour earlier never makes it
    look first. Other unstamped lines keep the previous stamp; without any, the file's first
    time. A file with no stamp at all (a job.out of srun's error lines) cannot be ordered
    against the others: its lines take the time the stamped files' first fault line says the
    failure began (then the directory's earliest), so that neither side wins by a clock it does
    not have.
    """
    starts = [f.first_seq for f in files]
    result = []
    for d in detections:
        f = _file_of(d.seq, files, starts)
        if d.role in _FAULT_ROLES and d.seq > 0:
            i = bisect_right(f.run_ends, d.seq)  # the first run that ends after this line
            if (
                i < len(f.run_ends)
                and f.run_starts[i] <= d.seq
                and f.run_ends[i] - d.seq <= _NEXT_STAMP_LINES
            ):
                d = replace(d, time=f.run_end_times[i])
        if d.time == _UNTIMED and f.first_time is not None:
            d = replace(d, time=f.first_time)
        result.append(d)
    began = min((d.time for d in result if d.role in _FAULT_ROLES and d.time != _UNTIMED),
                default=None)  # fmt: skip
    earliest = min((f.first_time for f in files if f.first_time), default=None)
    fallback = began or earliest or datetime(2000, 1, 1, tzinfo=UTC)
    return [replace(d, time=fallback) if d.time == _UNTIMED else d for d in result]


def _locate(d: Detection, files: list[_File]) -> EvidenceLine:
    if d.seq <= 0:  # a derived finding (a slow job) that no single line says
        return EvidenceLine(d.node, "", 0, d.signature_id, d.text)
    f = _file_of(d.seq, files, [f.first_seq for f in files])
    line = d.seq - f.first_seq + 1 if d.seq >= f.first_seq else 0
    return EvidenceLine(d.node, f.name, line, d.signature_id, d.text)
