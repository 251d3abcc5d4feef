"""Regex engines behind one interface: which signatures may match which lines of a byte buffer.

An :class:`Engine` is built from the catalogue's patterns (Python ``re`` syntax, see
:mod:`medic.detect.patterns`) and scans a whole buffer of newline-separated lines at once,
returning ``(pattern index, end offset)`` candidates. Candidates are a *superset* filter: every
line on which pattern ``i`` matches the line's body (the text after its rank prefix, per
:func:`~medic.detect.patterns.strip_rank_prefix`) yields at least one candidate for ``i`` whose
byte ``end - 1`` lies on that line; the matcher confirms each candidate with Python ``re``
(:func:`~medic.detect.patterns.compile_pattern`) and extracts the fields. Engines, best first:

* :class:`HyperscanEngine`: all patterns in one Hyperscan database (``HS_FLAG_MULTILINE``, on
  bytes: any input is fine), whole chunks of about 1 MiB per call, a scratch per thread. Each
  pattern is first rewritten into one that matches at least as much and costs Hyperscan less
  (:func:`~medic.detect.hyperscan_rewrite.hyperscan_expression`). One more expression flags
  lines of ``MAX_MATCH_CHARS`` bytes or more, where a rewritten ``$`` is no filter (the matcher
  cuts such a line, and its ``$`` then holds at the cut): they get a candidate for each pattern
  whose expression tests for the line's end.
* :class:`Re2Engine` (google-re2) and :class:`ReEngine` (stdlib): line by line behind a literal
  pre-filter over the whole buffer (a literal each pattern requires, from its parse tree).

Matching is ASCII, so every engine gives the same answer. Pure: no I/O; Hyperscan and re2 are
optional imports.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from medic.detect.hyperscan_rewrite import HS_END, HS_START, hyperscan_expression
from medic.detect.patterns import (
    HEAD_BYTES,
    MAX_MATCH_CHARS,
    compile_pattern,
    required_literals,
    strip_rank_prefix,
)

__all__ = [
    "ENGINES",
    "Engine",
    "HyperscanEngine",
    "Re2Engine",
    "ReEngine",
    "available_engines",
    "hyperscan_errors",
    "make_engine",
]


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - depends on the platform
        return None  # the engine is then unavailable


_hs: Any = _optional("hyperscan")
_re2: Any = _optional("re2")

ENGINES = ("hyperscan", "re2", "re")
"""Engine names, best first."""
CHUNK_BYTES = 1 << 20
"""About how much of a buffer Hyperscan scans per call (always whole lines)."""
_END = HS_END.encode()
_LONG_LINE = b"[^\\n]{%d}" % MAX_MATCH_CHARS
"""A line of at least ``MAX_MATCH_CHARS`` bytes: its matched head may end before its last byte."""


class Engine(Protocol):
    """Finds candidate ``(pattern index, end offset)`` pairs in newline-separated text (UTF-8;
    invalid sequences read as U+FFFD, as ``bytes.decode(errors="replace")`` shows them)."""

    @property
    def name(self) -> str: ...

    def scan(self, data: bytes) -> list[tuple[int, int]]: ...


def _on_match(index: int, _start: int, end: int, _flags: int, hits: list[tuple[int, int]]) -> None:
    hits.append((index, end))


def hyperscan_errors(patterns: Sequence[str]) -> dict[int, str]:
    """Why Hyperscan cannot compile some of ``patterns`` (by index); empty when it can compile
    them all, or when Hyperscan is missing. The database is cached for the engine."""
    if _hs is None or not patterns:
        return {}
    expressions = tuple(hyperscan_expression(p) for p in patterns)
    with contextlib.suppress(_hs.error):
        _hs_database(expressions)
        return {}
    errors: dict[int, str] = {}
    for index, expression in enumerate(expressions):
        try:
            _hs_database((expression,))
        except _hs.error as exc:
            errors[index] = str(exc)
    return errors


def _at_end(expressions: Sequence[tuple[bytes, bool]]) -> tuple[int, ...]:
    """The expressions that test for a line end (:data:`HS_END`), which the raw buffer does not
    show where a line is cut at :data:`MAX_MATCH_CHARS` characters."""
    return tuple(i for i, (expression, _) in enumerate(expressions) if _END in expression)


@functools.lru_cache(maxsize=4)
def _hs_database(expressions: tuple[tuple[bytes, bool], ...]) -> Any:
    """One database for ``expressions`` (ids: their indexes), plus :data:`_LONG_LINE` (id: their
    count, at most one report per scan) when one of them tests for a line end."""
    flags = [
        _hs.HS_FLAG_MULTILINE | (_hs.HS_FLAG_CASELESS if caseless else 0)
        for _, caseless in expressions
    ]
    patterns = [e for e, _ in expressions]
    if _at_end(expressions):
        patterns.append(_LONG_LINE)
        flags.append(_hs.HS_FLAG_SINGLEMATCH)
    database = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    database.compile(
        expressions=patterns, ids=list(range(len(patterns))), elements=len(patterns), flags=flags
    )
    return database


class HyperscanEngine:
    """Every pattern in one Hyperscan database, scanned a chunk of whole lines at a time.

    A pattern Hyperscan still refuses after rewriting is replaced by one that flags every non-empty
    line (listed in ``fallbacks``): correct, only slower.
    """

    name = "hyperscan"

    def __init__(self, patterns: Sequence[str], *, chunk_bytes: int = CHUNK_BYTES) -> None:
        if _hs is None:
            raise ValueError("hyperscan is not installed")
        self.fallbacks = tuple(sorted(hyperscan_errors(patterns)))
        expressions = [hyperscan_expression(p) for p in patterns]
        for index in self.fallbacks:
            expressions[index] = (f"{HS_START}[^\\n]".encode(), False)
        self._database = _hs_database(tuple(expressions)) if expressions else None
        self._at_end = _at_end(expressions)
        self._guard = len(expressions) if self._at_end else -1  # the _LONG_LINE id
        self._chunk = max(1, chunk_bytes)
        self._local = threading.local()

    def scan(self, data: bytes) -> list[tuple[int, int]]:
        if self._database is None or not data:
            return []
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hs.Scratch(self._database)
        view, size, guard = memoryview(data), len(data), self._guard
        hits: list[tuple[int, int]] = []
        start = 0
        while start < size:
            stop = data.find(b"\n", start + self._chunk) + 1 or size
            found: list[tuple[int, int]] = []
            self._database.scan(
                view[start:stop], match_event_handler=_on_match, context=found, scratch=scratch
            )
            if guard >= 0 and (long := [end for i, end in found if i == guard]):
                found = [hit for hit in found if hit[0] != guard]
                found += self._long_lines(data, start, stop, start + long[0])
            hits.extend([(i, start + end) for i, end in found] if start else found)
            start = stop
        return hits

    def _long_lines(self, data: bytes, start: int, stop: int, first: int) -> list[tuple[int, int]]:
        """A candidate for every line-end test on each line of ``data[start:stop]`` holding
        ``MAX_MATCH_CHARS`` bytes or more (``first``: where the first such line reached that),
        relative to ``start``. On such a line the matcher's ``$`` also holds where the line is
        cut, so Hyperscan's ``$`` is no filter there."""
        found: list[tuple[int, int]] = []
        line = data.rfind(b"\n", start, first - 1) + 1 or start
        while line < stop:
            end = data.find(b"\n", line, stop)
            end = stop if end < 0 else end
            if end - line >= MAX_MATCH_CHARS:
                found.extend((index, end - start) for index in self._at_end)
            line = end + 1
        return found


class ReEngine:
    """Stdlib ``re``: a literal pre-filter over the whole buffer, then the patterns line by line."""

    name = "re"

    def __init__(self, patterns: Sequence[str]) -> None:
        self._regexes = [compile_pattern(p) for p in patterns]
        self._literals = [required_literals(p) for p in patterns]
        self._always = [i for i, lits in enumerate(self._literals) if lits is None]
        every = sorted({lit for lits in self._literals if lits for lit in lits}, key=len)
        alternation = b"|".join(re.escape(lit) for lit in reversed(every))
        self._prefilter = re.compile(alternation, re.IGNORECASE) if every else None

    def _lines(self, data: bytes) -> Iterator[tuple[int, int]]:
        """(start, stop) of each line worth a look; stop excludes the newline."""
        start, size, prefilter = 0, len(data), self._prefilter
        while start < size:
            if not self._always:
                if prefilter is None or (hit := prefilter.search(data, start)) is None:
                    return
                start = data.rfind(b"\n", 0, hit.start()) + 1
            stop = data.find(b"\n", start)
            stop = size if stop < 0 else stop
            if stop > start:
                yield start, stop
            start = stop + 1

    def _allowed(self, raw: bytes) -> list[int]:
        if self._prefilter is None or self._prefilter.search(raw) is None:
            return self._always
        lowered = raw.lower()
        gated = [i for i, ls in enumerate(self._literals) if ls and any(x in lowered for x in ls)]
        return sorted(self._always + gated)

    def _match(self, body: str, allowed: list[int]) -> list[int]:
        return [i for i in allowed if self._regexes[i].search(body) is not None]

    def scan(self, data: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        for start, stop in self._lines(data):
            raw = data[start : min(stop, start + HEAD_BYTES)]
            allowed = self._allowed(raw)
            if not allowed:
                continue
            found: set[int] = set()
            for segment in raw.decode("utf-8", "replace")[:MAX_MATCH_CHARS].splitlines():
                body, _ = strip_rank_prefix(segment)
                if body:
                    found.update(self._match(body, allowed))
            hits.extend((i, stop) for i in sorted(found))
        return hits


class Re2Engine(ReEngine):
    """google-re2: the same line loop with one ``re2.Set`` per line instead of one search per
    pattern; a pattern RE2 refuses (look-around, ``{0,1200}``) stays with ``re``."""

    name = "re2"

    def __init__(self, patterns: Sequence[str]) -> None:
        if _re2 is None:
            raise ValueError("google-re2 is not installed")
        super().__init__(patterns)
        options = _re2.Options()
        options.log_errors, options.max_mem = False, 1 << 30
        self._set = _re2.Set.SearchSet(options)
        self._in_set: list[int] = []
        self._outside: list[int] = []
        for index, pattern in enumerate(patterns):
            try:  # RE2 reads the re syntax but for {,n} (a literal to RE2) and what it refuses
                if "{," in pattern:
                    raise _re2.error(pattern)
                self._set.Add(pattern)
                self._in_set.append(index)
            except _re2.error:
                self._outside.append(index)
        try:
            self._set.Compile()
        except _re2.error:  # too big for RE2's memory budget: stdlib re for all
            self._in_set, self._outside = [], list(range(len(patterns)))

    def _match(self, body: str, allowed: list[int]) -> list[int]:
        found = [self._in_set[j] for j in self._set.Match(body) or ()] if self._in_set else []
        rest = [i for i in self._outside if i in allowed and self._regexes[i].search(body)]
        return found + rest


def available_engines() -> tuple[str, ...]:
    """The engines that can run here, best first."""
    return tuple(n for n in ENGINES if {"hyperscan": _hs, "re2": _re2}.get(n, True) is not None)


def make_engine(patterns: Sequence[str], name: str | None = None) -> Engine:
    """The named engine (``hyperscan``, ``re2`` or ``re``), or the best available one.

    Raises ``ValueError`` for an unknown or unavailable engine.
    """
    chosen = name if name is not None else available_engines()[0]
    kinds: dict[str, Callable[[Sequence[str]], Engine]] = {
        "hyperscan": HyperscanEngine,
        "re2": Re2Engine,
        "re": ReEngine,
    }
    if chosen not in kinds:
        raise ValueError(f"unknown engine {chosen!r}: expected one of {', '.join(ENGINES)}")
    return kinds[chosen](patterns)
