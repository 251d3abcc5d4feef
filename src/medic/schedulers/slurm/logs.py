"""``SlurmLogSource``: tails the job output files and node kernel logs a Slurm cluster writes.

Job lines come from each watched job's ``log_paths`` (its expanded StdOut/StdErr; a file two jobs
share, a resubmission with the same ``--output``, is read for the live one); kernel lines
from ``slurm.kernel_log_template`` with ``{node}`` filled in, for every node whose file exists
(re-listed at most every ``RESCAN_SECONDS``) and the nodes of the jobs passed in. Only new bytes
are read. Where each file was left is kept in the store (``slurm-log:<path>`` ->
``<inode>:<offset>``), so a restarted medic resumes instead of rereading; a changed inode or a file
shorter than the offset (rotation, truncation) starts again at 0. A line is returned once it ends
with a newline (a job that ended gets its unterminated last line too); undecodable bytes are
replaced, and a line longer than ``MAX_LINE_BYTES`` is cut there and marked ``[truncated]``.

Without a stored cursor, the kernel logs present at the first call are read from their end (their
history predates medic); kernel logs that appear later and job output from their start.

Not every file is opened every pass: between full polls (every ``slurm.log_full_poll_seconds``)
only the files inotify names as written are read (:mod:`~medic.schedulers.slurm.filewatch`), with
new files, ended jobs' files, files in directories that cannot be watched, and files seen
growing without a notification (another host writing to a shared filesystem), which are read
every pass. At 14,500 files that is 0.03 s a pass instead of 0.1 s (``docs/scale.md``).

Files are read on this host: with ``slurm.runner: ssh`` the paths must be visible here too (a
shared filesystem); reading them through SSH is not implemented yet.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from medic.config.settings import SlurmSettings
from medic.detect.patterns import strip_rank_prefix
from medic.domain.cluster import Job
from medic.domain.ids import JobId, NodeName
from medic.domain.logs import LogLine, LogStream
from medic.ports import Clock, CursorStore
from medic.schedulers.slurm.filewatch import FileWatch

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_READ_BYTES",
    "RESCAN_SECONDS",
    "SlurmLogSource",
    "parse_rank",
]

MAX_LINE_BYTES = 64 * 1024
"""Longest line kept whole; the rest of a longer line is dropped."""
MAX_READ_BYTES = 4 * 1024 * 1024
"""Most bytes read from one file in one call (the rest comes on the next calls)."""
RESCAN_SECONDS = 30.0
"""How often the kernel-log template is globbed for nodes' files."""
TRUNCATED = " [truncated]"
CURSOR_PREFIX = "slurm-log:"
_EPOCH = datetime.fromtimestamp(0, UTC)

logger = logging.getLogger(__name__)


def parse_rank(text: str) -> int | None:
    """The global rank a job line's prefix names (``[rankN]:``, ``[rankN] ``, ``rankN:``,
    ``[N]:``, srun ``--label``'s ``N: ``; torchrun's ``[defaultN]:`` is a local rank: None).

    The signature matcher strips the same prefixes (:func:`medic.detect.patterns.strip_rank_prefix`
    is the one definition), so a line's rank and the text its signature sees always agree.
    """
    return strip_rank_prefix(text)[1]


@dataclass(slots=True)
class _Cursor:
    inode: int
    offset: int
    skipping: bool = False
    """Inside a line longer than MAX_LINE_BYTES whose head was already returned."""


@dataclass(frozen=True, slots=True)
class _Target:
    path: str
    stream: LogStream
    job_id: JobId | None
    node: NodeName | None
    flush: bool
    """Return an unterminated last line too (the job ended; nothing more will follow)."""


class SlurmLogSource:
    """``LogSource`` port over local files (see the module docstring)."""

    def __init__(self, store: CursorStore, settings: SlurmSettings, *, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._template = settings.kernel_log_template
        self._cursors: dict[str, _Cursor] = {}
        self._kernel_nodes: dict[str, NodeName] = {}
        self._scanned_at: datetime | None = None
        self._seq = 0
        self._started = False
        """After the first call: kernel logs that appear later are read from their start."""
        self._full_poll = settings.log_full_poll_seconds
        self._watch = FileWatch(enabled=self._full_poll > 0)
        self._polled_at: datetime | None = None
        self._notified: set[str] = set()
        """Files notifications named since the last full poll."""
        self._unexplained: dict[str, int] = {}
        """Files seen growing at consecutive full polls without a notification."""
        self._behind: set[str] = set()
        """Files with more to read than one read takes (``MAX_READ_BYTES``): read next pass."""
        self._remote: set[str] = set()
        """Files written where notifications do not reach (another host): read every pass."""

    def read_new(self, jobs: Sequence[Job]) -> Sequence[LogLine]:
        targets = list(self._targets(jobs))
        self._watch.watch(t.path for t in targets)
        changed = self._watch.changed()
        if changed is not None:
            self._notified |= changed
        now = self._clock.now()
        full = (
            changed is None
            or self._polled_at is None
            or (now - self._polled_at).total_seconds() >= self._full_poll
        )
        if full:
            self._polled_at = now
        lines: list[LogLine] = []
        for target in targets:
            path = target.path
            noticed = changed is not None and path in changed
            if not (
                full
                or noticed
                or path in self._remote
                or target.flush
                or path not in self._cursors
                or path in self._behind
                or not self._watch.watched(path)
            ):
                continue  # no notification, nothing new: not even opened
            read = self._read(target)
            if full and changed is not None:
                self._note_growth(path, grew=bool(read), noticed=path in self._notified)
            lines.extend(read)
        if full:
            self._notified = set()
        self._started = True
        return lines

    def _note_growth(self, path: str, *, grew: bool, noticed: bool) -> None:
        """At a full poll: a file that grew with no notification since the previous full poll,
        twice in a row, is written where inotify does not see (another host, on a shared
        filesystem); read it every pass from then on."""
        if not grew or noticed:
            self._unexplained.pop(path, None)
            return
        count = self._unexplained.get(path, 0) + 1
        self._unexplained[path] = count
        if count >= 2 and path not in self._remote:
            self._remote.add(path)
            logger.info("%s grows without file notifications: read at every pass", path)

    # --- what to read --------------------------------------------------------------------
    def _targets(self, jobs: Sequence[Job]) -> Iterator[_Target]:
        owners: dict[str, Job] = {}
        for job in jobs:
            for path in job.log_paths:
                if path not in owners or _writes_now(job, owners[path]):
                    owners[path] = job
        for path, job in owners.items():
            yield _Target(path, LogStream.JOB, job.id, None, job.state.is_terminal)
        if not self._template:
            return
        nodes = dict(self._scan_kernel_logs())
        for job in jobs:
            for node in job.nodes:
                nodes.setdefault(self._template.replace("{node}", node), node)
        for path, node in sorted(nodes.items()):
            yield _Target(path, LogStream.KERNEL, None, node, False)

    def _scan_kernel_logs(self) -> dict[str, NodeName]:
        now = self._clock.now()
        if self._scanned_at is None or (now - self._scanned_at).total_seconds() >= RESCAN_SECONDS:
            self._scanned_at = now
            head, _, tail = self._template.partition("{node}")
            pattern = re.compile(re.escape(head) + r"(?P<node>[^/]+)" + re.escape(tail) + "$")
            found: dict[str, NodeName] = {}
            for path in glob.glob(glob.escape(head) + "*" + glob.escape(tail)):
                match = pattern.match(path)
                if match:
                    found[path] = NodeName(match["node"])
            self._kernel_nodes = found
        return self._kernel_nodes

    # --- reading -------------------------------------------------------------------------
    def _cursor(self, target: _Target, inode: int, size: int) -> _Cursor:
        cursor = self._cursors.get(target.path)
        if cursor is None:
            saved = self._store.get_cursor(CURSOR_PREFIX + target.path)
            cursor = _parse_cursor(saved)
            if cursor is None:
                history = target.stream is LogStream.KERNEL and not self._started
                start = size if history else 0
                cursor = _Cursor(inode, start)
            self._cursors[target.path] = cursor
        if cursor.inode != inode or size < cursor.offset:
            cursor.inode, cursor.offset, cursor.skipping = inode, 0, False
        return cursor

    def _read(self, target: _Target) -> list[LogLine]:
        try:
            with open(target.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                cursor = self._cursor(target, stat.st_ino, stat.st_size)
                before = cursor.offset
                handle.seek(cursor.offset)
                data = handle.read(min(stat.st_size - cursor.offset, MAX_READ_BYTES))
        except OSError:
            return []  # not written yet, or gone: nothing to read
        at_end = before + len(data) >= stat.st_size
        if at_end:
            self._behind.discard(target.path)
        else:
            self._behind.add(target.path)
        texts = self._split(cursor, data, target.flush and at_end)
        if cursor.offset != before:
            self._store.set_cursor(CURSOR_PREFIX + target.path, f"{cursor.inode}:{cursor.offset}")
        return [self._line(target, text) for text in texts]

    def _split(self, cursor: _Cursor, data: bytes, flush: bool) -> list[str]:
        """Complete lines of ``data`` (read at ``cursor``); advances the cursor past them."""
        texts: list[str] = []
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            if cursor.skipping:
                if end < 0:
                    pos = len(data)
                    break
                cursor.skipping = False
                pos = end + 1
                continue
            if end < 0:
                rest = data[pos:]
                if len(rest) > MAX_LINE_BYTES:
                    texts.append(_decode(rest[:MAX_LINE_BYTES]) + TRUNCATED)
                    cursor.skipping = True
                    pos = len(data)
                elif flush and rest:
                    texts.append(_decode(rest))
                    pos = len(data)
                break
            raw = data[pos:end]
            cut = len(raw) > MAX_LINE_BYTES
            texts.append(_decode(raw[:MAX_LINE_BYTES]) + (TRUNCATED if cut else ""))
            pos = end + 1
        cursor.offset += pos
        return texts

    def _line(self, target: _Target, text: str) -> LogLine:
        self._seq += 1
        rank = parse_rank(text) if target.stream is LogStream.JOB else None
        return LogLine(
            stream=target.stream,
            text=text,
            time=self._clock.now(),
            node=target.node,
            job_id=target.job_id,
            rank=rank,
            seq=self._seq,
        )


def _writes_now(job: Job, other: Job) -> bool:
    """Of two jobs with the same output file (a resubmission with the same ``--output`` and
    ``--open-mode=append``), whether ``job`` is the one whose lines the file gets now: a live job
    over an ended one, else the later submission. The file has one cursor, so its new lines go
    to one job only."""
    if job.state.is_terminal != other.state.is_terminal:
        return not job.state.is_terminal
    return (job.submit_time or _EPOCH, job.id) > (other.submit_time or _EPOCH, other.id)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


def _parse_cursor(value: str | None) -> _Cursor | None:
    inode, _, offset = (value or "").partition(":")
    if not inode.isdigit() or not offset.isdigit():
        return None
    return _Cursor(int(inode), int(offset))
