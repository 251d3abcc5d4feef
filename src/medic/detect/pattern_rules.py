"""The pattern rules of docs/signatures.md, checked statically on a pattern's ``re`` parse tree.

A signature's pattern must match within one line (no line break, negated classes exclude
``\\n``, no ``\\s``), hold no look-around, back-reference, atomic group, possessive quantifier
or inline flag other than a leading ``(?i)``, and nothing that backtracks catastrophically
(nested unbounded repeats). :func:`pattern_problem` says which rule a pattern breaks; the
catalogue loader (:mod:`medic.detect.catalogue_entry`) refuses such a signature. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from medic.detect.patterns import UNBOUNDED, parse_pattern

__all__ = ["pattern_problem"]

_SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BAD_CATEGORIES = (
    "CATEGORY_SPACE",
    "CATEGORY_NOT_SPACE",
    "CATEGORY_NOT_WORD",
    "CATEGORY_NOT_DIGIT",
)
_GLOBAL_FLAGS_OK = re.IGNORECASE | re.ASCII


def pattern_problem(pattern: str) -> str | None:
    """What breaks the pattern rules of docs/signatures.md, or None (``re`` must parse it)."""
    items, flags = parse_pattern(pattern)
    if flags & ~_GLOBAL_FLAGS_OK:
        return "inline flags other than a leading (?i) are not allowed"
    return _tree_problem(items, unbounded=False)


def _tree_problem(items: Sequence[tuple[Any, Any]], *, unbounded: bool) -> str | None:  # noqa: C901
    for op, av in items:
        name = str(op)
        problem: str | None = None
        if name == "LITERAL" and chr(av) in _SEPARATORS:
            problem = r"a pattern matches within one line: no \n, \r, \v or other line break"
        elif (name == "NOT_LITERAL" and av != ord("\n")) or (
            name == "IN" and str(av[0][0]) == "NEGATE" and not _has_newline(av)
        ):
            problem = r"a negated class must exclude \n: write [^...\n]"
        elif name == "IN" and any(str(v) in _BAD_CATEGORIES for k, v in av if str(k) == "CATEGORY"):
            problem = r"\s, \S, \W and \D are not allowed: use [ \t] for blanks or a class"
        elif name == "IN" and str(av[0][0]) != "NEGATE" and _has_newline(av, any_break=True):
            problem = r"a pattern matches within one line: no \n, \r, \v or other line break"
        elif name in ("ASSERT", "ASSERT_NOT"):
            problem = "look-around is not allowed"
        elif name in ("GROUPREF", "GROUPREF_EXISTS"):
            problem = "back-references are not allowed"
        elif name in ("ATOMIC_GROUP", "POSSESSIVE_REPEAT"):
            problem = "atomic groups and possessive quantifiers are not allowed"
        elif name == "SUBPATTERN":
            if av[1] or av[2]:
                problem = "inline flags other than a leading (?i) are not allowed"
            else:
                problem = _tree_problem(list(av[3]), unbounded=unbounded)
        elif name == "BRANCH":
            problem = next(
                (p for a in av[1] if (p := _tree_problem(list(a), unbounded=unbounded))), None
            )
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            endless = av[1] == UNBOUNDED
            if endless and unbounded:
                problem = "nested unbounded repeats (catastrophic backtracking): bound one of them"
            else:
                problem = _tree_problem(list(av[2]), unbounded=unbounded or endless)
        if problem is not None:
            return problem
    return None


def _has_newline(members: Sequence[tuple[Any, Any]], *, any_break: bool = False) -> bool:
    breaks = [ord(c) for c in (_SEPARATORS if any_break else "\n")]
    for kind, value in members:
        if str(kind) == "LITERAL" and value in breaks:
            return True
        if str(kind) == "RANGE" and any(value[0] <= b <= value[1] for b in breaks):
            return True
    return False
