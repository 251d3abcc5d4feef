"""The node's kernel log: follow it, and turn lines the signature catalogue knows into findings.

Three followers, one interface (``read_new()`` returns the complete lines that arrived since the
last call, never blocks; ``close()``):

* :class:`KmsgFollower` reads ``/dev/kmsg`` from its end, one record per ``read``; a record
  overwritten before it was read (``EPIPE``) is counted and skipped;
* :class:`JournalFollower` runs ``journalctl -k -f -o short-iso -n 0`` and reads its output in a
  thread (restarted when it exits);
* :class:`FileFollower` tails a file from its end and follows rotation (a new inode, or the file
  shrinking) without losing the old file's last lines.

:class:`KernelClassifier` scans lines with :class:`~medic.detect.SignatureDiagnoser`; a root or
confirmation signature of the hardware, network or system-software domain becomes an event
finding: key ``xid:<code>`` for an Xid line (evidence: code, mnemonic, PCI address, the line),
else ``sig:<signature id>``.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import re
import subprocess
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import IO, Any, Protocol

from medic.agent.checks import CheckResult, CheckStatus
from medic.detect import Signature, SignatureDiagnoser, default_catalogue
from medic.domain.diagnosis import FaultDomain, Role
from medic.domain.ids import NodeName
from medic.domain.logs import LogLine, LogStream

__all__ = [
    "FileFollower",
    "JournalFollower",
    "KernelClassifier",
    "KmsgFollower",
    "LineSource",
    "kernel_signatures",
    "make_follower",
]

logger = logging.getLogger(__name__)

MAX_READ = 1 << 20
"""Bytes read per call at most, so a flood cannot stall the agent's checks."""
MAX_LINE = 8192


class LineSource(Protocol):
    def read_new(self) -> list[str]: ...

    def close(self) -> None: ...


class FileFollower:
    """New complete lines of ``path``, starting at its current end (``from_start``: at its
    beginning). A file that does not exist yet is read from its start once it appears."""

    def __init__(self, path: str, *, from_start: bool = False) -> None:
        self.path = path
        self._from_start = from_start
        self._fh: IO[bytes] | None = None
        self._inode: tuple[int, int] | None = None
        self._partial = b""
        self._opened_once = False
        if self._open() is None:
            self._opened_once = True  # created later: every line of it is new

    def _open(self) -> IO[bytes] | None:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - kept open between calls
        except FileNotFoundError:
            return None
        st = os.fstat(fh.fileno())
        if not self._opened_once and not self._from_start:
            fh.seek(0, os.SEEK_END)
        self._opened_once = True
        self._fh, self._inode, self._partial = fh, (st.st_dev, st.st_ino), b""
        return fh

    def _drain(self, fh: IO[bytes], budget: int) -> list[bytes]:
        data = fh.read(budget)
        if not data:
            return []
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        if len(self._partial) > MAX_LINE:  # a line with no end: pass on its head
            chunks.append(self._partial[:MAX_LINE])
            self._partial = b""
        return chunks

    def read_new(self) -> list[str]:
        fh = self._fh or self._open()
        if fh is None:
            return []
        raw = self._drain(fh, MAX_READ)
        try:
            st: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            st = None
        rotated = st is not None and (st.st_dev, st.st_ino) != self._inode
        if rotated:
            raw += self._drain(fh, MAX_READ)  # the old file's last lines
            if self._partial:
                raw.append(self._partial)
            fh.close()
            self._fh = None
            new = self._open()  # opened before: the new file is read from its start
            if new is not None:
                raw += self._drain(new, MAX_READ)
        elif st is not None and st.st_size < fh.tell():  # truncated in place (copytruncate)
            fh.seek(0)
            self._partial = b""
            raw += self._drain(fh, MAX_READ)
        return [line.decode("utf-8", "replace").rstrip("\r") for line in raw if line.strip()]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def parse_kmsg_record(record: bytes) -> str | None:
    """The message of one ``/dev/kmsg`` record (``prio,seq,usec,flags;message`` followed by
    continuation lines that start with a space), or None for an unparsable one."""
    head, sep, rest = record.partition(b";")
    if not sep or b"," not in head:
        return None
    message = rest.split(b"\n", 1)[0]
    return message.decode("utf-8", "replace")


class KmsgFollower:
    """Records written to ``/dev/kmsg`` after the follower opened it."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.path = path
        self.overwritten = 0
        """Records the kernel overwrote before they were read (EPIPE)."""
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            try:
                os.lseek(fd, 0, os.SEEK_END)
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def read_new(self) -> list[str]:
        fd = self._open()
        lines: list[str] = []
        budget = MAX_READ
        while budget > 0:
            try:
                record = os.read(fd, MAX_LINE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.overwritten += 1
                    continue
                raise
            if not record:
                break
            budget -= len(record)
            message = parse_kmsg_record(record)
            if message:
                lines.append(message)
        return lines

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class JournalFollower:
    """Kernel messages from ``journalctl -k -f`` (starting now), read by a background thread."""

    COMMAND = ("journalctl", "-k", "-f", "-o", "short-iso", "-n", "0", "--no-pager")

    def __init__(self, command: Sequence[str] = COMMAND) -> None:
        self.command = tuple(command)
        self._lines: queue.Queue[str] = queue.Queue(maxsize=100_000)
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        proc = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        self._proc = proc
        self._thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self._thread.start()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("-- "):  # "-- No entries --", "-- Boot ... --"
                continue
            try:
                self._lines.put_nowait(line)
            except queue.Full:
                logger.warning("kernel log backlog full; dropping a line")

    def read_new(self) -> list[str]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                logger.warning("journalctl exited with %s; restarting it", self._proc.returncode)
            self._start()
        lines = []
        while True:
            try:
                lines.append(self._lines.get_nowait())
            except queue.Empty:
                return lines

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None


def make_follower(spec: str) -> LineSource:
    """``kmsg``, ``journal`` or ``file:PATH``."""
    if spec == "kmsg":
        return KmsgFollower()
    if spec == "journal":
        return JournalFollower()
    if spec.startswith("file:") and len(spec) > len("file:"):
        return FileFollower(spec[len("file:") :])
    raise ValueError(f"kernel log source {spec!r}: use kmsg, journal or file:PATH")


# --- classification ------------------------------------------------------------------------------
_DOMAINS = frozenset({FaultDomain.HARDWARE, FaultDomain.NETWORK, FaultDomain.SYSTEM_SOFTWARE})
_ROLES = frozenset({Role.ROOT, Role.CONFIRMATION})
_MNEMONIC = re.compile(r"^([A-Z][A-Z0-9_]{2,}(?:/[A-Z][A-Z0-9_]{2,})*): ")
_MAX_LINES = 5


def kernel_signatures() -> tuple[Signature, ...]:
    """The signature catalogue (its Xid titles carry NVIDIA's mnemonics)."""
    return default_catalogue()


class KernelClassifier:
    """Kernel lines of ``node`` in, event findings out (one per key and batch)."""

    def __init__(self, node: str, signatures: Iterable[Signature] | None = None) -> None:
        self.node = NodeName(node)
        try:
            self._diagnoser = SignatureDiagnoser(
                kernel_signatures() if signatures is None else signatures
            )
        except ValueError as exc:
            if signatures is not None:
                raise
            logger.warning("merged catalogue rejected (%s); using the built-in one", exc)
            self._diagnoser = SignatureDiagnoser()
        self._by_id = {s.id: s for s in self._diagnoser.signatures}

    def classify(self, lines: Sequence[str], now: datetime | None = None) -> list[CheckResult]:
        when = now or datetime.now(UTC)
        batch = [
            LogLine(LogStream.KERNEL, text, when, node=self.node, seq=i)
            for i, text in enumerate(lines)
        ]
        grouped: dict[str, tuple[Signature, dict[str, str], list[str]]] = {}
        for detection in self._diagnoser.scan(batch):
            if detection.role not in _ROLES or detection.domain not in _DOMAINS:
                continue
            signature = self._by_id[detection.signature_id]
            code = _xid(detection.fields, signature)
            key = f"xid:{code}" if code is not None else f"sig:{signature.id}"
            entry = grouped.setdefault(key, (signature, dict(detection.fields), []))
            entry[2].append(detection.text)
        return [self._finding(key, *entry) for key, entry in grouped.items()]

    def _finding(
        self, key: str, signature: Signature, fields: dict[str, str], texts: list[str]
    ) -> CheckResult:
        code = _xid(fields, signature)
        match = _MNEMONIC.match(signature.title)
        mnemonic = match.group(1) if match else None
        evidence: dict[str, Any] = {
            "line": texts[0],
            "lines": texts[:_MAX_LINES],
            "occurrences": len(texts),
            "signature": signature.id,
            "title": signature.title,
            "domain": signature.domain.value,
            "role": signature.role.value,
            "fields": fields,
        }
        if code is not None:
            evidence.update(xid=code, mnemonic=mnemonic, pci=fields.get("pci"))
            summary = (
                signature.title
                if f"Xid {code}" in signature.title
                else (f"Xid {code}: {signature.title}")
            )
        else:
            summary = signature.title
        if signature.node_action is not None:
            evidence["node_action"] = signature.node_action.value
        if fields.get("recovery_action"):  # Xid 154's printed action: the mapping reads it first
            evidence["recovery_action"] = fields["recovery_action"]
        description = (
            f"The kernel of {self.node} logged: {texts[0][:400]}"
            f" ({signature.title}; reference: {signature.reference})"
        )
        return CheckResult(
            key=key,
            status=CheckStatus.FAILING,
            summary=summary[:200],
            description=description,
            severity=signature.severity,
            evidence=evidence,
            xid=code,
            event=True,
        )


def _xid(fields: dict[str, str], signature: Signature) -> int | None:
    value = fields.get("xid", "")
    if value.isdigit():
        return int(value)
    return signature.xid
