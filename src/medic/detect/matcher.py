"""Signature matching: log lines in, detections out (the first ``Diagnoser``).

:class:`SignatureDiagnoser` compiles the catalogue once into an engine (:mod:`medic.detect.engines`:
Hyperscan when installed, else RE2, else stdlib ``re``) and scans a whole batch at a time: the
lines go into one newline-separated buffer, the engine reports which signatures may match which
buffer lines, and Python ``re`` confirms those on the hit lines only and extracts the fields. When
several signatures match one line, the highest ``priority`` wins, then catalogue order (a CUDA ECC
error before the NCCL watchdog line that wraps it, everything before the generic Python
exception).

A line carrying embedded line breaks (``str.splitlines``) is matched one physical line at a time,
so no pattern can match across them. Patterns see the line after its rank prefix (srun's ``N:``
label, ``[rankN]:`` and the others of :func:`~medic.detect.patterns.strip_rank_prefix`), whose
global rank becomes the detection's when the line carries none. A lone surrogate (text decoded
with ``surrogateescape``) reads as U+FFFD, as in :meth:`scan_bytes`.

Pure and total: no I/O, no clock reads, no logging, and it never raises on any text or bytes.
Lines longer than :data:`MAX_MATCH_CHARS` are matched on their head only (every known signature
sits at the start of its line), which also bounds the work per line.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from medic.detect.catalogue import default_catalogue
from medic.detect.engines import Engine, make_engine
from medic.detect.patterns import HEAD_BYTES, MAX_MATCH_CHARS, compile_pattern, strip_rank_prefix
from medic.detect.signatures import Signature
from medic.domain.diagnosis import Detection
from medic.domain.ids import SignatureId
from medic.domain.logs import LogLine

__all__ = [
    "MAX_MATCH_CHARS",
    "MAX_TEXT_CHARS",
    "FileHit",
    "SignatureDiagnoser",
    "strip_rank_prefix",
]

MAX_TEXT_CHARS = 2_000
"""Characters of the matched line kept in ``Detection.text`` (evidence, audit, API)."""

FileHit = tuple[int, Signature, dict[str, str], str]
"""A :meth:`SignatureDiagnoser.scan_bytes` result: 1-based line number, signature, fields, text."""

_Found = tuple[Signature, dict[str, str]]
_SURROGATE = re.compile("[\ud800-\udfff]")
_ASCII_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")
_BREAKS = (*_ASCII_BREAKS, "\x85", "\u2028", "\u2029")
"""Where ``str.splitlines`` ends a line, besides ``\\n``."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    signature: Signature
    search: Callable[[str], re.Match[str] | None]
    constants: dict[str, str]
    grouped: bool


class SignatureDiagnoser:
    """Matches lines against a signature catalogue (the packaged YAML one by default).

    ``engine`` is an engine name (``"hyperscan"``, ``"re2"``, ``"re"``), an :class:`Engine` built
    from these signatures' patterns in this order, or None for the best one available.

    Raises ``ValueError`` at construction for a broken catalogue (duplicate id, invalid regex) or
    an unavailable engine: that is a programming error, not input.
    """

    def __init__(
        self, signatures: Iterable[Signature] | None = None, engine: Engine | str | None = None
    ) -> None:
        if signatures is None:
            signatures = default_catalogue()
        compiled: list[_Compiled] = []
        seen: set[SignatureId] = set()
        for signature in signatures:
            if signature.id in seen:
                raise ValueError(f"duplicate signature id {signature.id!r}")
            seen.add(signature.id)
            try:
                regex = compile_pattern(signature.pattern)
            except (re.error, ValueError) as exc:  # ValueError: (?u) against re.ASCII
                raise ValueError(f"{signature.id}: invalid pattern: {exc}") from exc
            constants = dict(signature.constants)
            entry = _Compiled(signature, regex.search, constants, regex.groups > 0)
            compiled.append(entry)
        self._compiled = tuple(compiled)
        # Confirmation order: priority first (highest wins), then catalogue order.
        self._by_rank = tuple(
            sorted(range(len(compiled)), key=lambda i: -compiled[i].signature.priority)
        )
        self._rank = [0] * len(compiled)
        for position, index in enumerate(self._by_rank):
            self._rank[index] = position
        patterns = [c.signature.pattern for c in compiled]
        self._engine = make_engine(patterns, engine) if isinstance(engine, str | None) else engine

    @property
    def signatures(self) -> tuple[Signature, ...]:
        return tuple(c.signature for c in self._compiled)

    @property
    def engine(self) -> str:
        """The name of the engine in use."""
        return self._engine.name

    def scan(self, lines: Sequence[LogLine]) -> list[Detection]:
        """Detections for the lines that match a signature, in input order (``attempt`` = -1)."""
        owners, segments, buffer = _buffer(lines)
        detections: list[Detection] = []
        for index, _start, _stop, candidates in self._hit_lines(buffer):
            segment = segments[index]
            body, prefix_rank = strip_rank_prefix(segment)
            found = self._confirm(body, candidates)
            if found is not None:
                detections.append(_detection(owners[index], segment, prefix_rank, *found))
        return detections

    def scan_bytes(self, data: bytes) -> list[FileHit]:
        """Every matching line of a whole file's bytes: (1-based line number, signature, fields,
        text). Lines end at ``\\n``; invalid UTF-8 reads as U+FFFD; a line that holds other line
        breaks (``\\r``, ...) gives one result per physical line that matches."""
        hits: list[FileHit] = []
        confirm = self._confirm
        for index, start, stop, candidates in self._hit_lines(data):
            end = stop if stop - start <= HEAD_BYTES else start + HEAD_BYTES
            text = data[start:end].decode("utf-8", "replace")
            if len(text) > MAX_MATCH_CHARS:
                text = text[:MAX_MATCH_CHARS]
            for segment in text.splitlines():
                found = confirm(strip_rank_prefix(segment)[0], candidates)
                if found is not None:
                    hits.append((index + 1, found[0], found[1], segment[:MAX_TEXT_CHARS]))
        return hits

    def match_text(self, text: str) -> _Found | None:
        """The first signature matching one physical line (rank prefix allowed), with its fields."""
        segments = text[:MAX_MATCH_CHARS].splitlines()
        body, _ = strip_rank_prefix(segments[0] if segments else "")
        return self._confirm(body, self._by_rank)

    def _hit_lines(self, buffer: bytes) -> list[tuple[int, int, int, list[int]]]:
        """(0-based line index, start, stop, candidate signatures in rank order) of each line the
        engine hit, in buffer order; ``stop`` is past the line's newline."""
        hits = self._engine.scan(buffer)
        hits.sort(key=itemgetter(1))
        lines: list[tuple[int, int, int, list[int]]] = []
        find, rfind, count, size = buffer.find, buffer.rfind, buffer.count, len(buffer)
        line = start = stop = 0
        candidates: list[int] = []
        for index, end in hits:
            if end > stop:  # byte end - 1 is past the current line
                new_start = rfind(b"\n", 0, end - 1) + 1
                line += count(b"\n", start, new_start)
                start, stop = new_start, (find(b"\n", end - 1) + 1 or size)
                candidates = [index]
                lines.append((line, start, stop, candidates))
            elif index not in candidates:
                candidates.append(index)
        for entry in lines:
            if len(entry[3]) > 1:
                entry[3].sort(key=self._rank.__getitem__)
        return lines

    def _confirm(self, body: str, candidates: Iterable[int]) -> _Found | None:
        """The first candidate (in rank order) whose pattern matches ``body``."""
        if not body:
            return None
        for index in candidates:
            entry = self._compiled[index]
            match = entry.search(body)
            if match is not None:
                if not entry.grouped:
                    return entry.signature, dict(entry.constants)
                fields = {k: v.strip() for k, v in match.groupdict().items() if v is not None}
                if entry.constants:
                    fields.update(entry.constants)
                return entry.signature, fields
        return None


def _buffer(lines: Sequence[LogLine]) -> tuple[Sequence[LogLine], list[str], bytes]:
    """The physical lines to match, one per line of the buffer, as (the log line each comes
    from, its text), and the buffer. When every text is one physical line of at most
    ``MAX_MATCH_CHARS`` characters (the usual case), these are the texts themselves, joined: no
    per-line object is made. Else each text is cut and split as the module docstring says."""
    texts = [line.text for line in lines]
    joined = "\n".join(texts)
    if (
        joined.count("\n") == len(texts) - 1
        and max(map(len, texts), default=0) <= MAX_MATCH_CHARS
        and not any(b in joined for b in (_ASCII_BREAKS if joined.isascii() else _BREAKS))
    ):
        with contextlib.suppress(UnicodeEncodeError):  # lone surrogates: as below
            return lines, texts, joined.encode("utf-8")
    pairs = [(line, s) for line in lines for s in line.text[:MAX_MATCH_CHARS].splitlines()]
    segments = [s for _, s in pairs]
    try:
        buffer = "\n".join(segments).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (surrogateescape input): U+FFFD, as in a file
        segments = [_SURROGATE.sub("\ufffd", s) for s in segments]
        buffer = "\n".join(segments).encode("utf-8")
    return [line for line, _ in pairs], segments, buffer


def _detection(
    line: LogLine,
    segment: str,
    prefix_rank: int | None,
    signature: Signature,
    fields: dict[str, str],
) -> Detection:
    return Detection(
        job_id=line.job_id,
        attempt=-1,
        signature_id=signature.id,
        domain=signature.domain,
        role=signature.role,
        severity=signature.severity,
        action=signature.action,
        time=line.time,
        node=line.node,
        rank=line.rank if line.rank is not None else prefix_rank,
        implicates_node=signature.implicates_node,
        text=segment[:MAX_TEXT_CHARS],
        fields=fields,
        seq=line.seq,
    )
