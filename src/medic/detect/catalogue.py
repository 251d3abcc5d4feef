"""Load and validate the YAML signature catalogue (schema and rules: docs/signatures.md).

:func:`load_catalogue` reads every ``*.yaml`` file of a directory, sorted by name (default: the
package's ``catalogue/`` directory through ``importlib.resources``: reading that package data is
the only I/O in ``medic.detect``), and returns the signatures in file order, then in-file order.
Everything the document lists is checked, and a bad file stops medic: the first problem raises
``ConfigError(setting="<file>:<signature id>", message=<why>)``, on one line. Checked: keys
(required, unknown, duplicate), enum values, unique ids across files, canonical field names, the
pattern rules (statically on the ``re`` parse tree, then it must compile in ``re`` and, when
installed, in Hyperscan), every example matches with exactly its fields and is won by its own
signature over the whole catalogue, no counter-example matches.

``python -m medic.detect.catalogue [DIR]`` validates a directory and prints the count per file
(exit status 2 and the error on stderr when a file is wrong).
"""

from __future__ import annotations

import functools
import importlib.resources
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

from medic.detect.engines import (
    MAX_MATCH_CHARS,
    UNBOUNDED,
    compile_pattern,
    hyperscan_errors,
    parse_pattern,
    strip_rank_prefix,
)
from medic.detect.signatures import Example, NodeAction, Signature
from medic.domain.diagnosis import FaultDomain, JobAction, Role, Severity
from medic.domain.ids import SignatureId
from medic.errors import ConfigError

__all__ = [
    "CANONICAL_FIELDS",
    "default_catalogue",
    "load_catalogue",
    "main",
    "pattern_problem",
]

_FIELD_NAMES = """xid pci rank peer step exit_code signal gpu status vendor_err pid recovery_action
device port errno iter_ms tokens_per_s compute_ms exception message code path opcode seconds loss
node checkpoint"""
CANONICAL_FIELDS = frozenset(_FIELD_NAMES.split())
"""Field names a pattern's named groups and a signature's constants may use (docs/signatures.md;
``checkpoint`` is the document's own ``constants`` example)."""

_REQUIRED = (
    *("id", "title", "domain", "role", "severity", "implicates", "action", "pattern"),
    *("reference", "examples"),
)
_OPTIONAL = ("node_action", "xid", "priority", "constants", "fields", "counter_examples")
_ID = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")
_IMPLICATES = {"emitter": True, "none": False}
_SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BAD_CATEGORIES = (
    "CATEGORY_SPACE",
    "CATEGORY_NOT_SPACE",
    "CATEGORY_NOT_WORD",
    "CATEGORY_NOT_DIGIT",
)
_GLOBAL_FLAGS_OK = re.IGNORECASE | re.ASCII
_E = TypeVar("_E", FaultDomain, Role, Severity, JobAction, NodeAction)


_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it


class _Loader(_SAFE_LOADER):  # type: ignore[misc]
    """The safe loader, refusing a key given twice in one mapping."""


def _mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=True))


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _short(value: object, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


class _Check:
    """Validates one signature entry; :meth:`fail` raises the ``ConfigError`` naming it."""

    def __init__(self, label: str, position: int, entry: object) -> None:
        sid = entry.get("id") if isinstance(entry, dict) else None
        self.where = f"{label}:{sid if isinstance(sid, str) and sid else f'#{position + 1}'}"
        if not isinstance(entry, dict):
            self.fail("a signature must be a mapping")
        self.entry: dict[str, Any] = entry

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(self.where, message)

    def text(self, key: str) -> str:
        value = self.entry.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail(f"{key} must be a non-empty string, got {_short(value)}")
        return value

    def enum(self, key: str, kind: type[_E]) -> _E:
        value = self.entry.get(key)
        try:
            return kind(str(value))
        except ValueError:
            allowed = " | ".join(m.value for m in kind)
            self.fail(f"{key} must be one of {allowed}, got {_short(value)}")

    def integer(self, key: str, default: int | None) -> int | None:
        value = self.entry.get(key, default)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            self.fail(f"{key} must be an integer, got {_short(value)}")
        return value

    def strings(self, value: object, what: str) -> dict[str, str]:
        """A mapping of field names to string values (integers are accepted and converted)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(f"{what} must be a mapping of field: value, got {_short(value)}")
        out: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str) or isinstance(item, bool):
                self.fail(f"{what}: {_short(key)} must map a field name to a string")
            if not isinstance(item, str | int):
                self.fail(f"{what}: {key} must be a string (quote it), got {_short(item)}")
            out[key] = str(item)
        return out


def _body(check: _Check, line: object, what: str) -> str:
    if not isinstance(line, str) or not line.strip():
        check.fail(f"{what} must be a non-empty string, got {_short(line)}")
    segments = line.splitlines()
    if len(segments) != 1:
        check.fail(f"{what} must be one line: {_short(line)}")
    return strip_rank_prefix(segments[0])[0][:MAX_MATCH_CHARS]


def _pattern(check: _Check) -> re.Pattern[str]:
    pattern = check.text("pattern")
    try:
        regex = compile_pattern(pattern)
        problem = pattern_problem(pattern)
    except (re.error, ValueError) as exc:
        check.fail(f"pattern does not compile in Python re: {exc}")
    if problem is not None:
        check.fail(f"pattern: {problem}")
    if regex.search("") is not None:
        check.fail("pattern matches the empty string")
    unknown = [g for g in regex.groupindex if g not in CANONICAL_FIELDS]
    if unknown:
        check.fail(f"named groups must use canonical field names, not {', '.join(unknown)}")
    return regex


def _roles(check: _Check, signature: Signature) -> None:
    if signature.role is Role.CASCADE and signature.implicates_node:
        check.fail("a cascade never implicates the emitter (implicates: none)")
    if signature.role in (Role.PROGRESS, Role.NOISE) and (
        signature.action is not JobAction.NONE or signature.domain is not FaultDomain.NONE
    ):
        check.fail(f"a {signature.role.value} signature has action none and domain none")
    if signature.action is JobAction.STOP and signature.domain is not FaultDomain.APPLICATION:
        check.fail("only an application signature may stop the job (action: stop)")


def _signature(label: str, position: int, entry: object) -> Signature:  # noqa: C901
    check = _Check(label, position, entry)
    keys = set(check.entry)
    if unknown := sorted(map(str, keys - set(_REQUIRED) - set(_OPTIONAL))):
        check.fail(f"unknown key(s): {', '.join(unknown)}")
    if missing := [k for k in _REQUIRED if k not in keys]:
        check.fail(f"missing key(s): {', '.join(missing)}")
    sid = check.text("id")
    if _ID.fullmatch(sid) is None:
        check.fail("id must be lowercase letters, digits, underscores and dots")
    regex = _pattern(check)
    groups = tuple(sorted(regex.groupindex, key=regex.groupindex.__getitem__))
    if "fields" in keys:
        listed = check.entry["fields"]
        if not isinstance(listed, list) or set(map(str, listed)) != set(groups):
            check.fail(f"fields {_short(listed)} must list the named groups {list(groups)}")
    constants = check.strings(check.entry.get("constants"), "constants")
    if bad := [k for k in constants if k not in CANONICAL_FIELDS or k in groups]:
        check.fail(f"constants {', '.join(bad)}: not a canonical field or also a named group")
    implicates = check.entry.get("implicates")
    if implicates not in _IMPLICATES:
        check.fail(f"implicates must be one of emitter | none, got {_short(implicates)}")
    reference = check.text("reference")
    if not reference.startswith(("https://", "docs/")):
        check.fail("reference must be an https:// address or a docs/ path")
    node_action = check.enum("node_action", NodeAction) if "node_action" in keys else None
    examples_raw = check.entry["examples"]
    if not isinstance(examples_raw, list) or not examples_raw:
        check.fail("examples must be a non-empty list")
    examples: list[Example] = []
    for number, item in enumerate(examples_raw, 1):
        what = f"example {number}"
        if isinstance(item, dict):
            if extra := sorted(map(str, set(item) - {"line", "fields"})):
                check.fail(f"{what}: unknown key(s): {', '.join(extra)}")
            line, expected = item.get("line"), check.strings(item.get("fields"), what + " fields")
        else:
            line, expected = item, {}
        match = regex.search(_body(check, line, what))
        if match is None:
            check.fail(f"{what} does not match the pattern: {_short(line)}")
        got = {k: v.strip() for k, v in match.groupdict().items() if v is not None}
        if {**got, **constants} != {**expected, **constants}:
            check.fail(f"{what} extracts {got}, expected {expected}")
        examples.append(Example(str(line), tuple(sorted(expected.items()))))
    counters = check.entry.get("counter_examples") or []
    if not isinstance(counters, list):
        check.fail("counter_examples must be a list of lines")
    for number, line in enumerate(counters, 1):
        if regex.search(_body(check, line, f"counter-example {number}")) is not None:
            check.fail(f"counter-example {number} matches the pattern: {_short(line)}")
    signature = Signature(
        id=SignatureId(sid),
        title=check.text("title"),
        domain=check.enum("domain", FaultDomain),
        role=check.enum("role", Role),
        severity=check.enum("severity", Severity),
        implicates_node=_IMPLICATES[implicates],
        action=check.enum("action", JobAction),
        pattern=regex.pattern,
        reference=reference,
        node_action=node_action,
        xid=check.integer("xid", None),
        priority=check.integer("priority", 0) or 0,
        constants=tuple(constants.items()),
        fields=groups,
        examples=tuple(examples),
        counter_examples=tuple(str(c) for c in counters),
    )
    _roles(check, signature)
    return signature


def _parse_file(label: str, stem: str, text: str) -> list[Signature]:
    try:
        document = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(label, f"invalid YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(document, dict):
        raise ConfigError(label, "expected a mapping with the keys area and signatures")
    if extra := sorted(map(str, set(document) - {"area", "signatures"})):
        raise ConfigError(label, f"unknown top-level key(s): {', '.join(extra)}")
    if document.get("area") != stem:
        raise ConfigError(
            label, f"area must be the file's stem {stem!r}, got {document.get('area')!r}"
        )
    entries = document.get("signatures")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(label, "signatures must be a non-empty list")
    return [_signature(label, n, entry) for n, entry in enumerate(entries)]


def _files(directory: Path | None) -> list[tuple[str, str, str]]:
    """(label, stem, text) of each catalogue file, sorted by name."""
    if directory is None:
        root = importlib.resources.files("medic.detect") / "catalogue"
        entries = [e for e in root.iterdir() if e.name.endswith(".yaml")] if root.is_dir() else []
        where = "medic/detect/catalogue"
    else:
        if not directory.is_dir():
            raise ConfigError(str(directory), "not a directory")
        entries = list(directory.glob("*.yaml"))
        where = str(directory)
    if not entries:
        raise ConfigError(where, "no *.yaml catalogue file")
    files = sorted(entries, key=lambda e: e.name)
    return [(f"{where}/{e.name}", e.name[: -len(".yaml")], e.read_text("utf-8")) for e in files]


def _load(directory: Path | None) -> list[tuple[str, list[Signature]]]:
    loaded: list[tuple[str, list[Signature]]] = []
    origin: dict[str, str] = {}
    for label, stem, text in _files(directory):
        signatures = _parse_file(label, stem, text)
        for signature in signatures:
            if signature.id in origin:
                raise ConfigError(
                    f"{label}:{signature.id}", f"duplicate id (also in {origin[signature.id]})"
                )
            origin[signature.id] = label
        loaded.append((label, signatures))
    signatures = [s for _, group in loaded for s in group]
    for index, error in hyperscan_errors([s.pattern for s in signatures]).items():
        where = f"{origin[signatures[index].id]}:{signatures[index].id}"
        raise ConfigError(where, f"pattern does not compile in Hyperscan: {error}")
    _check_winners(signatures, origin)
    return loaded


def _check_winners(signatures: list[Signature], origin: dict[str, str]) -> None:
    """Each example must be won by its own signature: priority first, then catalogue order."""
    ranked = sorted(signatures, key=lambda s: -s.priority)
    regexes = {s.id: compile_pattern(s.pattern) for s in signatures}
    for signature in signatures:
        for number, example in enumerate(signature.examples, 1):
            body = strip_rank_prefix(example.line.splitlines()[0])[0][:MAX_MATCH_CHARS]
            winner = next(s for s in ranked if regexes[s.id].search(body))
            if winner.id != signature.id:
                raise ConfigError(
                    f"{origin[signature.id]}:{signature.id}",
                    f"example {number} is won by {winner.id} (priority {winner.priority}, in"
                    f" {origin[winner.id]}): raise this priority or narrow {winner.id}",
                )


@functools.cache
def default_catalogue() -> tuple[Signature, ...]:
    """The packaged catalogue, loaded and validated once per process (about a second)."""
    return load_catalogue()


def load_catalogue(directory: Path | None = None) -> tuple[Signature, ...]:
    """Every signature of the catalogue directory (default: the package's), validated.

    Raises ``ConfigError`` naming the file, the signature and the problem.
    """
    return tuple(s for _, group in _load(directory) for s in group)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m medic.detect.catalogue [DIR]``: validate, print the count per file."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        loaded = _load(Path(args[0]) if args else None)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for label, signatures in loaded:
        print(f"{label}: {len(signatures)}")
    print(f"total: {sum(len(group) for _, group in loaded)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
