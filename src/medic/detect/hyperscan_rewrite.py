"""Rewrites a signature's ``re`` pattern into a Hyperscan expression that is cheap to scan.

:class:`~medic.detect.engines.HyperscanEngine` only has to find *candidates* (the matcher confirms
each with ``re``), so :func:`hyperscan_expression` may widen a pattern but never narrow it. Working
from the pattern's ``re`` parse tree (:func:`~medic.detect.patterns.parse_pattern`), it emits an
expression on bytes (``HS_FLAG_MULTILINE``) in which ``^`` also accepts the rank prefix, named
groups become plain ones, a character that may be non-ASCII is one to four bytes, long runs become
unbounded, what Hyperscan lacks (look-around, back-references) is dropped, and parts that hold no
selective literal are cut off (an optional tail, a ``^`` before a long literal or before an
unbounded run, what precedes a ``.{0,300}`` gap). Hyperscan reports every end offset, hence the cut
tails; a tail that may only be the line's end (``(?:: (?P<message>.*)|$)``) stays, as ``:`` or
:data:`HS_END`, for which the engine also flags every line too long to show its end. Pure: no I/O,
and no Hyperscan import: the expressions are plain bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from medic.detect.patterns import REPEATS, UNBOUNDED, best_literals, literal_runs, parse_pattern

__all__ = ["HS_END", "HS_START", "hyperscan_expression"]

# What str.splitlines() ends a line on, besides \n: a body (the text a pattern sees) never
# contains one, so in a raw buffer they also start and end a body.
_SEPARATORS = r"[\r\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]"
# Every rank prefix strip_rank_prefix removes (srun's label, then launcher prefixes), widened.
_PREFIX = (
    r"[ \t]*(?:[0-9]{1,7}: [ \t]*)?"
    r"(?:(?:\[(?:rank|default)?[0-9]{1,7}\][: ]|rank[0-9]{1,7}:"
    r"|\[(?:[0-9]{1,7},)?[0-9]{1,7}\]<std(?:out|err|diag)>:"
    r"|\[[A-Za-z][A-Za-z0-9._-]{0,62}:[0-9]{1,7}\]:)[ \t]*){0,4}"
)
HS_START = rf"(?:^|{_SEPARATORS}){_PREFIX}"
"""Where ``^`` matches: a line start (or separator), then an optional rank prefix."""
HS_END = rf"(?:$|{_SEPARATORS})"
"""Where ``$`` matches: a line end or separator."""

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
        elif name in (*REPEATS, "SUBPATTERN", "BRANCH"):
            parts = [av[2]] if name in REPEATS else [av[3]] if name == "SUBPATTERN" else av[1]
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
    UTF-8 mode compiles ``.{0,400}`` for a minute, hence bytes.) A short run of one class stays
    bounded (``[a-z]{0,30}``): before a literal, Hyperscan checks that a few bytes back from it,
    where ``*`` would have it follow the run through the whole buffer.
    """
    out: list[str] = []
    for op, av in items:
        name = str(op)
        if name in _CHARS:
            text, wide = _one(op, av)
            out.append(text + "{1,4}" if wide else text)
        elif name in REPEATS:
            low, high, sub = av[0], av[1], list(av[2])
            single = len(sub) == 1 and str(sub[0][0]) in _CHARS
            run = high > _LONG or (high > 1 and not single)
            if low == 0 and run and (codes := _charset(sub)) is not None:
                out.append(_byte_class(codes) + "*")
            elif single:
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
            out.append(HS_START)
        elif name == "AT" and str(av) in ("AT_END", "AT_END_STRING"):
            out.append(HS_END)
        elif name == "AT" and str(av) == "AT_BOUNDARY":
            out.append(r"\b")
        # anything else (look-around, \B) is dropped, which only widens the match
    return "".join(out)


def _trim(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``items`` without the tail that can match nothing (an anchor, ``x?``, ``.{0,300}``), a
    trailing ``x{m,n}`` cut to ``x{m}``: a match of the original contains one of the trimmed
    pattern ending on the same line, and the trimmed one reports one end offset, not 300. An
    alternative that would be cut to nothing but ends the line stays whole (:func:`_line_end`)."""
    out = list(items)
    while out:
        op, av = out[-1]
        name = str(op)
        if name in ("AT", "ASSERT", "ASSERT_NOT") or (name in REPEATS and av[0] == 0):
            out.pop()
            continue
        if name in REPEATS:
            out[-1] = (op, (av[0], av[0], av[2]))
        elif name in ("SUBPATTERN", "BRANCH"):
            parts = [av[3]] if name == "SUBPATTERN" else av[1]
            trimmed = [_trim(list(part)) or _line_end(list(part)) for part in parts]
            if not all(trimmed):
                out.pop()
                continue
            out[-1] = (op, (*av[:3], trimmed[0]) if name == "SUBPATTERN" else (av[0], trimmed))
        break
    return out


def _line_end(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``items`` when it ends with ``$`` (the ``$`` of ``(?:: ?(?P<message>.*)|$)``), else
    nothing: "``Error`` then ``:`` or the line's end" is selective where "``Error``" is not. The
    matcher's ``$`` also holds where a line is cut at ``MAX_MATCH_CHARS`` characters, which the
    raw buffer does not show: the engine flags such lines for every expression holding
    :data:`HS_END`."""
    last = items[-1] if items else None
    if last is not None and str(last[0]) == "AT" and str(last[1]) in ("AT_END", "AT_END_STRING"):
        return items
    return []


def _is_gap(op: Any, av: Any) -> bool:
    """A long run of almost any character: ``.{0,300}``, ``[^,\\n]*``, ``[ -~]{0,400}``."""
    if str(op) not in REPEATS or len(av[2]) != 1 or (av[1] <= _LONG and av[1] != UNBOUNDED):
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
        literals = best_literals(literal_runs(rest))
        if (
            literals
            and min(map(len, literals)) >= 4
            and literals == best_literals(literal_runs(items))
        ):
            return rest
    return items


def _unanchored(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``items`` without a leading ``^`` and what can match nothing after it, when the rest
    holds the pattern's best literal and that has six characters or more: following every
    line start through ``[rankN]:`` costs Hyperscan more than finding ``FileNotFoundError``.
    Four characters are enough when an optional run follows the ``^`` (``^(?:\\w+\\.){0,8}``):
    Hyperscan would follow that run from every line start through the whole buffer."""
    if len(items) == 1 and str(items[0][0]) == "BRANCH":
        branch = items[0][1]
        return [(items[0][0], (branch[0], [_unanchored(list(alt)) for alt in branch[1]]))]
    rest = list(items)
    if not rest or str(rest[0][0]) != "AT" or "BEGINNING" not in str(rest[0][1]):
        return items
    shortest = 6
    while rest and (str(rest[0][0]) == "AT" or (str(rest[0][0]) in REPEATS and rest[0][1][0] == 0)):
        if str(rest.pop(0)[0]) in REPEATS:
            shortest = 4
    literals = best_literals(literal_runs(rest))
    best = best_literals(literal_runs(items))
    if literals and min(map(len, literals)) >= shortest and literals == best:
        return rest
    return items


def hyperscan_expression(pattern: str) -> tuple[bytes, bool]:
    """The Hyperscan expression for ``pattern`` (bytes, multiline) and whether it is caseless."""
    items, flags = parse_pattern(pattern)
    expression = _emit(_unanchored(_after_gap(_trim(list(items)) or list(items))))
    return expression.encode("utf-8"), bool(flags & re.IGNORECASE)
