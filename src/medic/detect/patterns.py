"""What every engine, the matcher and the catalogue share about a signature's pattern.

A pattern is Python ``re`` syntax, matched ASCII (``re.ASCII``: ``\\w``, ``\\d``, ``\\b`` and
``(?i)`` as in Hyperscan) against a line's body: the text after its rank prefix
(:func:`strip_rank_prefix`: srun's ``N:`` label, torchrun's and PyTorch's ``[rankN]:`` and
the like), at most :data:`MAX_MATCH_CHARS` characters of it. The same function gives a job line's
rank to the log sources (``medic.schedulers.slurm.logs.parse_rank``), so matching and placement
agree. This module holds those rules, the stdlib's own parse tree of a pattern
(:func:`parse_pattern`, exact ``re`` semantics, which the Hyperscan rewrite in
:mod:`medic.detect.hyperscan_rewrite` walks) and the literals a match must contain
(:func:`required_literals`, the engines' pre-filter). Pure: no I/O.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "HEAD_BYTES",
    "MAX_MATCH_CHARS",
    "PREFIX_FIRST_CHARS",
    "REPEATS",
    "UNBOUNDED",
    "best_literals",
    "compile_pattern",
    "literal_runs",
    "parse_pattern",
    "required_literals",
    "strip_rank_prefix",
]

_sre: Any = importlib.import_module("re._parser")  # the stdlib's own parser: exact re semantics
_C: Any = importlib.import_module("re._constants")

MAX_MATCH_CHARS = 16_384
"""Characters of a line that are matched; the rest is ignored."""
HEAD_BYTES = 4 * MAX_MATCH_CHARS + 4
"""Bytes of a line that always hold its first ``MAX_MATCH_CHARS`` characters once decoded."""
UNBOUNDED: int = int(_C.MAXREPEAT)
"""The upper bound of an unbounded repeat in a parse tree (:func:`parse_pattern`)."""
REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
"""The parse tree's repeat opcodes (by name): ``(low, high, subtree)`` arguments."""

# A rank prefix is srun --label's task number (``3: ``, padded with blanks), then up to four
# launcher prefixes: ``[rank3]:`` and ``[rank3] `` (PyTorch, many trainers), ``rank3:``, ``[3]:``
# (torchrun with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${rank}]:"), ``[1,3]<stderr>:`` (Open
# MPI's mpirun --tag-output: job and rank) and ``[3]<stdout>:`` (horovodrun): global ranks;
# ``[default3]:`` (torchrun --tee: role "default" and a LOCAL rank) and ``[node-a1:3]:`` (a host
# and a rank, as MPICH's -prepend-pattern "[%h:%r]:" prints; local or global is the site's
# choice): stripped but not reported.
PREFIX_FIRST_CHARS = frozenset("[r0123456789 \t")
"""The characters a line with a rank prefix can start with (the fast path of the check)."""
_LAUNCHER = re.compile(
    r"(?:\[(?:rank(?P<rank>[0-9]{1,7})|(?P<number>[0-9]{1,7})|default[0-9]{1,7})\]:"
    r"|\[rank(?P<bare>[0-9]{1,7})\] |rank(?P<plain>[0-9]{1,7}):"
    r"|\[(?:[0-9]{1,7},)?(?P<mpi>[0-9]{1,7})\]<std(?:out|err|diag)>:"
    r"|\[[A-Za-z][A-Za-z0-9._-]{0,62}:[0-9]{1,7}\]:)[ \t]*"
)
_MAX_LAUNCHER_PREFIXES = 4
_DIGITS = frozenset("0123456789")


def strip_rank_prefix(text: str) -> tuple[str, int | None]:
    """The line's body (without its rank prefix and leading blanks) and the global rank it names.

    The rank is the last global one among the launcher prefixes, else srun's label when the line
    has no launcher prefix at all (``3: [default3]: x`` names a task and a local rank, not a
    global rank: None). ASCII digits only.
    """
    first = text[:1]
    if first not in PREFIX_FIRST_CHARS:
        return text, None
    if first == " " or first == "\t":
        text = text.lstrip(" \t")
        first = text[:1]
    label: int | None = None
    pos = 0
    if first in _DIGITS:  # srun --label: "N: "
        colon = text.find(": ", 1, 9)
        if colon < 0 or not text[:colon].isascii() or not text[:colon].isdigit():
            return text, None
        label, pos = int(text[:colon]), colon + 2
        while text[pos : pos + 1] in (" ", "\t"):
            pos += 1
    elif first != "[" and first != "r":
        return text, None
    rank: int | None = None
    launched = False
    for _ in range(_MAX_LAUNCHER_PREFIXES):
        if text[pos : pos + 1] not in ("[", "r"):
            break
        found = _LAUNCHER.match(text, pos)
        if found is None:
            break
        launched, pos = True, found.end()
        if found.lastgroup is not None:
            rank = int(found[found.lastgroup])
    return (text[pos:] if pos else text), (rank if launched else label)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A signature's pattern as the matcher confirms it (``re.ASCII``). Raises ``re.error``."""
    return re.compile(pattern, re.ASCII)


@functools.lru_cache(maxsize=2048)
def parse_pattern(pattern: str) -> tuple[tuple[tuple[Any, Any], ...], int]:
    """The ``re`` parse tree of ``pattern`` (``(opcode, argument)`` pairs) and its flags."""
    tree = _sre.parse(pattern, re.ASCII)
    return tuple(tree), int(tree.state.flags)


def literal_runs(items: Sequence[tuple[Any, Any]]) -> list[set[str] | None]:
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
            found.append(best_literals(literal_runs(list(av[3]))))
        elif name == "ATOMIC_GROUP":
            found.append(best_literals(literal_runs(list(av))))
        elif name in REPEATS and av[0] >= 1:
            found.append(best_literals(literal_runs(list(av[2]))))
        elif name == "BRANCH":
            options = [best_literals(literal_runs(list(alt))) for alt in av[1]]
            found.append(None if None in options else {s for o in options if o for s in o})
    found.append({"".join(run)} if run else None)
    return found


def best_literals(candidates: list[set[str] | None]) -> set[str] | None:
    """The most selective of :func:`literal_runs`' sets: longest shortest string, then fewest."""
    usable = [c for c in candidates if c]
    return max(usable, key=lambda c: (min(map(len, c)), -len(c))) if usable else None


def required_literals(pattern: str) -> tuple[bytes, ...] | None:
    """Lowercase UTF-8 literals one of which every line the pattern matches contains (ASCII case
    folded), or None when no literal of three characters or more is required."""
    items, _ = parse_pattern(pattern)
    best = best_literals(literal_runs(items))
    if not best or min(map(len, best)) < 3:
        return None
    return tuple(sorted({s.encode("utf-8").lower() for s in best}))
