"""Regex engines behind one interface: which signatures may match which lines of a byte buffer.

An :class:`Engine` is built from the catalogue's patterns (Python ``re`` syntax) and scans a whole
buffer of newline-separated lines at once, returning ``(pattern index, end offset)`` candidates.
Candidates are a *superset* filter: every line on which pattern ``i`` matches the line's body (the
text after the ``[rankN]:`` prefix, per :func:`strip_rank_prefix`) yields at least one candidate
for ``i`` whose byte ``end - 1`` lies on that line; the matcher confirms each candidate with Python
``re`` (:func:`compile_pattern`) and extracts the fields. Engines, best first:

* :class:`HyperscanEngine`: all patterns in one Hyperscan database (``HS_FLAG_MULTILINE``, on
  bytes: any input is fine), whole chunks of about 1 MiB per call, a scratch per thread. Each
  pattern is rewritten from its ``re`` parse tree (:func:`hyperscan_expression`) into one that
  matches at least as much and costs Hyperscan less: ``^`` also accepts the rank prefix, named
  groups become plain ones, a character that may be non-ASCII is one to four bytes, long runs
  become unbounded, what Hyperscan lacks (look-around, back-references) is dropped, and parts
  that hold no selective literal are cut off (an optional tail, a ``^`` before a long literal,
  what precedes a ``.{0,300}`` gap). Hyperscan reports every end offset, hence the cut tails.
* :class:`Re2Engine` (google-re2) and :class:`ReEngine` (stdlib): line by line behind a literal
  pre-filter over the whole buffer (a literal each pattern requires, from its parse tree).

Matching is ASCII (``re.ASCII``: ``\\w``, ``\\d``, ``\\b`` and ``(?i)`` as in Hyperscan), so every
engine gives the same answer. Pure: no I/O; Hyperscan and re2 are optional imports.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

__all__ = [
    "ENGINES",
    "HEAD_BYTES",
    "MAX_MATCH_CHARS",
    "UNBOUNDED",
    "Engine",
    "HyperscanEngine",
    "Re2Engine",
    "ReEngine",
    "available_engines",
    "compile_pattern",
    "hyperscan_errors",
    "hyperscan_expression",
    "make_engine",
    "parse_pattern",
    "required_literals",
    "strip_rank_prefix",
]


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - depends on the platform
        return None  # the engine is then unavailable


_hs: Any = _optional("hyperscan")
_re2: Any = _optional("re2")
_sre: Any = importlib.import_module("re._parser")  # the stdlib's own parser: exact re semantics
_C: Any = importlib.import_module("re._constants")

ENGINES = ("hyperscan", "re2", "re")
"""Engine names, best first."""
MAX_MATCH_CHARS = 16_384
"""Characters of a line that are matched; the rest is ignored."""
HEAD_BYTES = 4 * MAX_MATCH_CHARS + 4
"""Bytes of a line that always hold its first ``MAX_MATCH_CHARS`` characters once decoded."""
CHUNK_BYTES = 1 << 20
"""About how much of a buffer Hyperscan scans per call (always whole lines)."""
UNBOUNDED: int = int(_C.MAXREPEAT)
"""The upper bound of an unbounded repeat in a parse tree (:func:`parse_pattern`)."""

# torchrun/srun prefixes: ``[rank3]:`` (global rank, kept) and ``[default3]:`` (torchrun --tee,
# a local rank, dropped).
_RANK_PREFIX = re.compile(r"\[(?:rank(?P<rank>[0-9]{1,7})|default[0-9]{1,7})\]:[ \t]*")
# What str.splitlines() ends a line on, besides \n: a body (the text a pattern sees) never
# contains one, so in a raw buffer they also start and end a body.
_SEPARATORS = r"[\r\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]"
_PREFIX = r"(?:\[(?:rank|default)[0-9]{1,7}\]:)?[ \t]*"
_HS_START = rf"(?:^|{_SEPARATORS}){_PREFIX}"
_HS_END = rf"(?:$|{_SEPARATORS})"


def strip_rank_prefix(text: str) -> tuple[str, int | None]:
    """The line without its leading ``[rankN]:`` / ``[defaultN]:`` prefix, and the global rank."""
    match = _RANK_PREFIX.match(text) if text[:1] == "[" else None
    if match is None:
        return text.lstrip(" \t"), None
    rank = match.group("rank")
    return text[match.end() :], int(rank) if rank is not None else None


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A signature's pattern as the matcher confirms it (``re.ASCII``). Raises ``re.error``."""
    return re.compile(pattern, re.ASCII)


@functools.lru_cache(maxsize=2048)
def parse_pattern(pattern: str) -> tuple[tuple[tuple[Any, Any], ...], int]:
    """The ``re`` parse tree of ``pattern`` (``(opcode, argument)`` pairs) and its flags."""
    tree = _sre.parse(pattern, re.ASCII)
    return tuple(tree), int(tree.state.flags)


# --- pattern rewriting for Hyperscan (from the parse tree) -------------------------------------

_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
_CHARS = ("LITERAL", "NOT_LITERAL", "ANY", "IN")
_ATOMS = (*_CHARS, "SUBPATTERN", "BRANCH", "ATOMIC_GROUP")
_LONG = 64  # bytes: a longer bounded run of one class is made unbounded
_ALL = frozenset(range(256))
_HIGH = frozenset(range(128, 256))
_ASCII_SETS = {  # re.ASCII's classes; \s never holds \n here: no match spans two lines
    "CATEGORY_DIGIT": frozenset(range(48, 58)),
    "CATEGORY_WORD": frozenset(c for c in range(128) if chr(c).isalnum() or c == 95),
    "CATEGORY_SPACE": frozenset((9, 10, 11, 12, 13, 32)),
}


def _charset(items: Sequence[tuple[Any, Any]]) -> set[int] | None:
    """Every byte a match of ``items`` may hold (a non-ASCII character: any byte >= 0x80), or
    None when ``items`` holds more than characters, groups and repeats (an anchor)."""
    codes: set[int] = set()
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            codes.update(chr(av).encode("utf-8", "surrogatepass"))
        elif name in ("NOT_LITERAL", "ANY"):
            codes.update(_ALL)
        elif name == "IN":
            members: set[int] = set()
            for kind, value in av:
                if str(kind) == "CATEGORY":
                    base = _ASCII_SETS[str(value).replace("NOT_", "")]
                    members.update(_ALL - base if "NOT_" in str(value) else base)
                elif str(kind) in ("LITERAL", "RANGE"):
                    low, high = (value, value) if str(kind) == "LITERAL" else value
                    members.update(range(low, min(high, 127) + 1), _HIGH if high > 127 else ())
            codes.update(_ALL - members | _HIGH if str(av[0][0]) == "NEGATE" else members)
        elif name in (*_REPEATS, "SUBPATTERN", "BRANCH"):
            parts = [av[2]] if name in _REPEATS else [av[3]] if name == "SUBPATTERN" else av[1]
            for inner in map(_charset, map(list, parts)):
                if inner is None:
                    return None
                codes.update(inner)
        else:
            return None
    return codes - {10}


def _byte_class(codes: set[int]) -> str:
    if codes == _ALL - {10}:
        return r"[^\n]"
    ranges: list[list[int]] = []
    for code in sorted(codes):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "[" + "".join(f"\\x{a:02x}" + (f"-\\x{b:02x}" if b > a else "") for a, b in ranges) + "]"


def _quantifier(low: int, high: int) -> str:
    if high == UNBOUNDED:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    if low == high:
        return "" if low == 1 else f"{{{low}}}"
    return "?" if (low, high) == (0, 1) else f"{{{low},{high}}}"


def _one(op: Any, av: Any) -> tuple[str, bool]:
    """One character as bytes: the expression and whether it may take several bytes."""
    if str(op) == "LITERAL":
        char = chr(av)
        if char.isascii():
            return (char if char.isalnum() or char in " _" else f"\\x{av:02x}"), False
        return "(?:" + "".join(
            f"\\x{b:02x}" for b in char.encode("utf-8", "surrogatepass")
        ) + ")", False
    codes = _charset([(op, av)]) or set()
    return _byte_class(codes), bool(codes & _HIGH)


def _emit(items: Sequence[tuple[Any, Any]]) -> str:  # noqa: C901 - one branch per opcode
    """A parse tree as a Hyperscan expression on bytes that matches at least as much.

    A character that may be non-ASCII is one to four bytes (``.`` is ``[^\\n]{1,4}``); a long
    run of one class, or an optional repeat of a group of characters, is an unbounded run of
    their bytes (``.{0,300}`` is ``[^\\n]*``): far cheaper for Hyperscan, and only wider. (Its
    UTF-8 mode compiles ``.{0,400}`` for a minute, hence bytes.)
    """
    out: list[str] = []
    for op, av in items:
        name = str(op)
        if name in _CHARS:
            text, wide = _one(op, av)
            out.append(text + "{1,4}" if wide else text)
        elif name in _REPEATS:
            low, high, sub = av[0], av[1], list(av[2])
            if low == 0 and high > 1 and (codes := _charset(sub)) is not None:
                out.append(_byte_class(codes) + "*")
            elif len(sub) == 1 and str(sub[0][0]) in _CHARS:
                text, wide = _one(*sub[0])
                if high != UNBOUNDED and high * (4 if wide else 1) > _LONG:
                    low, high = min(low, _LONG), UNBOUNDED
                out.append(
                    text + _quantifier(low, 4 * high if wide and high != UNBOUNDED else high)
                )
            else:
                atom = len(sub) == 1 and str(sub[0][0]) in _ATOMS
                out.append((_emit(sub) if atom else f"(?:{_emit(sub)})") + _quantifier(low, high))
        elif name == "SUBPATTERN":
            add, remove = av[1] & re.IGNORECASE, av[2] & re.IGNORECASE
            out.append(f"(?{'i' if add else '-i' if remove else ''}:{_emit(list(av[3]))})")
        elif name == "ATOMIC_GROUP":
            out.append(f"(?:{_emit(list(av))})")
        elif name in ("BRANCH", "GROUPREF_EXISTS"):
            alternatives = av[1] if name == "BRANCH" else [av[1], av[2] or []]
            out.append("(?:" + "|".join(_emit(list(alt)) for alt in alternatives) + ")")
        elif name == "GROUPREF":
            out.append(r"[^\n]*")
        elif name == "AT" and str(av) in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
            out.append(_HS_START)
        elif name == "AT" and str(av) in ("AT_END", "AT_END_STRING"):
            out.append(_HS_END)
        elif name == "AT" and str(av) == "AT_BOUNDARY":
            out.append(r"\b")
        # anything else (look-around, \B) is dropped, which only widens the match
    return "".join(out)


def _trim(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``items`` without the tail that can match nothing (an anchor, ``x?``, ``.{0,300}``), a
    trailing ``x{m,n}`` cut to ``x{m}``: a match of the original contains one of the trimmed
    pattern ending on the same line, and the trimmed one reports one end offset, not 300."""
    out = list(items)
    while out:
        op, av = out[-1]
        name = str(op)
        if name in ("AT", "ASSERT", "ASSERT_NOT") or (name in _REPEATS and av[0] == 0):
            out.pop()
            continue
        if name in _REPEATS:
            out[-1] = (op, (av[0], av[0], av[2]))
        elif name in ("SUBPATTERN", "BRANCH"):
            parts = [av[3]] if name == "SUBPATTERN" else av[1]
            trimmed = [_trim(list(part)) for part in parts]
            if not all(trimmed):
                out.pop()
                continue
            out[-1] = (op, (*av[:3], trimmed[0]) if name == "SUBPATTERN" else (av[0], trimmed))
        break
    return out


def _is_gap(op: Any, av: Any) -> bool:
    """A long run of almost any character: ``.{0,300}``, ``[^,\\n]*``, ``[ -~]{0,400}``."""
    if str(op) not in _REPEATS or len(av[2]) != 1 or (av[1] <= _LONG and av[1] != UNBOUNDED):
        return False
    return len(_charset(list(av[2])) or ()) >= 90


def _after_gap(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """What follows the last gap of ``items`` when it holds the pattern's best literal (four
    characters or more): Hyperscan then looks for that literal instead of following every
    ``: `` of the buffer into a ``.{0,300}``, and drops no selective part."""
    if len(items) == 1 and str(items[0][0]) == "BRANCH":
        branch = items[0][1]
        return [(items[0][0], (branch[0], [_after_gap(list(alt)) for alt in branch[1]]))]
    gaps = [i for i, (op, av) in enumerate(items) if _is_gap(op, av)]
    if gaps:
        rest = items[gaps[-1] + 1 :]
        literals = _best(_literal_runs(rest))
        if literals and min(map(len, literals)) >= 4 and literals == _best(_literal_runs(items)):
            return rest
    return items


def _unanchored(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``items`` without a leading ``^`` and what can match nothing after it, when the rest
    holds the pattern's best literal and that has six characters or more: following every
    line start through ``[rankN]:`` costs Hyperscan more than finding ``FileNotFoundError``."""
    if len(items) == 1 and str(items[0][0]) == "BRANCH":
        branch = items[0][1]
        return [(items[0][0], (branch[0], [_unanchored(list(alt)) for alt in branch[1]]))]
    rest = list(items)
    if not rest or str(rest[0][0]) != "AT" or "BEGINNING" not in str(rest[0][1]):
        return items
    while rest and (
        str(rest[0][0]) == "AT" or (str(rest[0][0]) in _REPEATS and rest[0][1][0] == 0)
    ):
        rest.pop(0)
    literals = _best(_literal_runs(rest))
    if literals and min(map(len, literals)) >= 6 and literals == _best(_literal_runs(items)):
        return rest
    return items


def hyperscan_expression(pattern: str) -> tuple[bytes, bool]:
    """The Hyperscan expression for ``pattern`` (bytes, multiline) and whether it is caseless."""
    items, flags = parse_pattern(pattern)
    expression = _emit(_unanchored(_after_gap(_trim(list(items)) or list(items))))
    return expression.encode("utf-8"), bool(flags & re.IGNORECASE)


def _literal_runs(items: Sequence[tuple[Any, Any]]) -> list[set[str] | None]:
    """For each element of a sequence: a set of strings one of which a match must contain."""
    found: list[set[str] | None] = []
    run: list[str] = []
    for op, av in items:
        name = str(op)
        if name == "LITERAL" and chr(av) not in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029":
            run.append(chr(av))
            continue
        found.append({"".join(run)} if run else None)
        run = []
        if name == "SUBPATTERN":
            found.append(_best(_literal_runs(list(av[3]))))
        elif name == "ATOMIC_GROUP":
            found.append(_best(_literal_runs(list(av))))
        elif name in _REPEATS and av[0] >= 1:
            found.append(_best(_literal_runs(list(av[2]))))
        elif name == "BRANCH":
            options = [_best(_literal_runs(list(alt))) for alt in av[1]]
            found.append(None if None in options else {s for o in options if o for s in o})
    found.append({"".join(run)} if run else None)
    return found


def _best(candidates: list[set[str] | None]) -> set[str] | None:
    usable = [c for c in candidates if c]
    return max(usable, key=lambda c: (min(map(len, c)), -len(c))) if usable else None


def required_literals(pattern: str) -> tuple[bytes, ...] | None:
    """Lowercase UTF-8 literals one of which every line the pattern matches contains (ASCII case
    folded), or None when no literal of three characters or more is required."""
    items, _ = parse_pattern(pattern)
    best = _best(_literal_runs(items))
    if not best or min(map(len, best)) < 3:
        return None
    return tuple(sorted({s.encode("utf-8").lower() for s in best}))


# --- engines ------------------------------------------------------------------------------------


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


@functools.lru_cache(maxsize=4)
def _hs_database(expressions: tuple[tuple[bytes, bool], ...]) -> Any:
    database = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    database.compile(
        expressions=[e for e, _ in expressions],
        ids=list(range(len(expressions))),
        elements=len(expressions),
        flags=[
            _hs.HS_FLAG_MULTILINE | (_hs.HS_FLAG_CASELESS if caseless else 0)
            for _, caseless in expressions
        ],
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
            expressions[index] = (f"{_HS_START}[^\\n]".encode(), False)
        self._database = _hs_database(tuple(expressions)) if expressions else None
        self._chunk = max(1, chunk_bytes)
        self._local = threading.local()

    def scan(self, data: bytes) -> list[tuple[int, int]]:
        if self._database is None or not data:
            return []
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hs.Scratch(self._database)
        view, size = memoryview(data), len(data)
        hits: list[tuple[int, int]] = []
        start = 0
        while start < size:
            stop = data.find(b"\n", start + self._chunk) + 1 or size
            found: list[tuple[int, int]] = []
            self._database.scan(
                view[start:stop], match_event_handler=_on_match, context=found, scratch=scratch
            )
            hits.extend([(i, start + end) for i, end in found] if start else found)
            start = stop
        return hits


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
