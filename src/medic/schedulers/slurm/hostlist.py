"""Slurm host lists: ``node[1-3,5]`` <-> ``node1, node2, node3, node5``.

Pure string functions, so the adapter needs no ``scontrol show hostnames`` round trip. They follow
Slurm's rules: a bracket holds comma-separated numbers and ``lo-hi`` ranges; a range keeps the
width of its lower bound (``gpu[08-10]`` is ``gpu08, gpu09, gpu10``); several brackets in one name
expand to their product (``r[1-2]n[1-2]``); commas outside brackets separate names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from medic.errors import InputError

__all__ = ["compress_hostlist", "expand_hostlist"]

MAX_HOSTS = 100_000
"""Refuse to expand a list longer than this (a typo such as ``node[1-10000000]``)."""

_TRAILING_NUMBER = re.compile(r"^(?P<prefix>.*?)(?P<digits>\d+)$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise InputError("hostlist", f"unbalanced ']' in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise InputError("hostlist", f"unbalanced '[' in {text!r}")
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _bracket_values(body: str, text: str) -> list[str]:
    """The numbers a bracket body such as ``1-3,05`` stands for, as zero-padded strings."""
    values: list[str] = []
    for item in body.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise InputError("hostlist", f"bad range {item!r} in {text!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise InputError("hostlist", f"descending range {item!r} in {text!r}")
        if last - first >= MAX_HOSTS:
            raise InputError("hostlist", f"range {item!r} is longer than {MAX_HOSTS} hosts")
        values.extend(str(n).zfill(len(lo)) for n in range(first, last + 1))
    return values


def _expand_one(name: str, text: str) -> list[str]:
    open_at = name.find("[")
    if open_at < 0:
        if "]" in name:
            raise InputError("hostlist", f"unbalanced ']' in {text!r}")
        return [name]
    close_at = name.find("]", open_at)
    if close_at < 0:
        raise InputError("hostlist", f"unbalanced '[' in {text!r}")
    head, body, rest = name[:open_at], name[open_at + 1 : close_at], name[close_at + 1 :]
    tails = _expand_one(rest, text)
    return [head + value + tail for value in _bracket_values(body, text) for tail in tails]


def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """Every host name in a Slurm host list, in order, without duplicates.

    ``None``, ``""`` and Slurm's ``(null)`` give ``()``. Raises ``InputError`` for a malformed
    list (unbalanced brackets, a range that is not numeric or runs backwards, more than
    ``MAX_HOSTS`` names).
    """
    if text is None or text.strip() in ("", "(null)", "None"):
        return ()
    names: list[str] = []
    for part in _split_top_level(text.strip()):
        names.extend(_expand_one(part, text))
        if len(names) > MAX_HOSTS:
            raise InputError("hostlist", f"{text!r} names more than {MAX_HOSTS} hosts")
    return tuple(dict.fromkeys(names))


def _ranges(numbers: list[int], width: int) -> str:
    """``[1, 2, 3, 5]`` -> ``1-3,5`` (each number zero-padded to ``width``)."""
    spans: list[tuple[int, int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], n)
        else:
            spans.append((n, n))
    return ",".join(
        f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}" for lo, hi in spans
    )


def _group_key(prefix: str, digits: str, padded: dict[str, set[int]]) -> tuple[str, int]:
    """Which bracket a number joins: a zero-padded one fixes its width; a plain number joins a
    padded group of its prefix when it is at least that wide (``gpu10`` joins ``gpu[08-09]``),
    else the plain group (width 0)."""
    if digits.startswith("0") and len(digits) > 1:
        return prefix, len(digits)
    widths = [w for w in padded.get(prefix, ()) if w <= len(digits)]
    return prefix, max(widths, default=0)


def compress_hostlist(names: Iterable[str]) -> str:
    """The usual Slurm form of ``names`` (numbers sorted within each prefix).

    Names that end in a number are grouped by prefix and zero-padding: ``node01, node02, node10``
    -> ``node[01-02,10]``; ``node9, node10`` -> ``node[9-10]``. ``expand_hostlist`` of the result
    gives the same set of names back.
    """
    unique = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    split = {name: _TRAILING_NUMBER.match(name) for name in unique}
    padded: dict[str, set[int]] = {}
    for match in split.values():
        if match and match["digits"].startswith("0") and len(match["digits"]) > 1:
            padded.setdefault(match["prefix"], set()).add(len(match["digits"]))
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in unique:
        match = split[name]
        if match is None:
            order.append(name)
            continue
        key = _group_key(match["prefix"], match["digits"], padded)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(match["digits"]))
    parts: list[str] = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        numbers = groups[item]
        body = _ranges(numbers, width)
        parts.append(f"{prefix}{body}" if len(set(numbers)) == 1 else f"{prefix}[{body}]")
    return ",".join(parts)
