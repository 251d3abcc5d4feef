"""Validate one signature entry of the YAML catalogue into a :class:`Signature`.

:func:`parse_signature` takes one mapping of a catalogue file, as YAML loaded it, and checks
everything docs/signatures.md lists for a single signature: keys (required, unknown), enum values,
canonical field names (:data:`CANONICAL_FIELDS`), the pattern rules
(:func:`~medic.detect.pattern_rules.pattern_problem`, then it must compile in ``re``), the roles'
constraints, every example matches with exactly its fields and no counter-example matches. The
first problem raises ``ConfigError(setting="<file>:<signature id>", message=<why>)``. Checks that
span signatures or files (unique ids, Hyperscan, which signature wins an example) are the
loader's, :mod:`medic.detect.catalogue`. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn, TypeVar

from medic.detect.pattern_rules import pattern_problem
from medic.detect.patterns import MAX_MATCH_CHARS, compile_pattern, strip_rank_prefix
from medic.detect.signatures import Example, NodeAction, Signature
from medic.domain.diagnosis import FaultDomain, JobAction, Role, Severity
from medic.domain.ids import SignatureId
from medic.errors import ConfigError

__all__ = ["CANONICAL_FIELDS", "parse_signature"]

_FIELD_NAMES = """xid pci rank peer step exit_code signal gpu status vendor_err pid recovery_action
device port errno iter_ms tokens_per_s compute_ms exception message code path opcode seconds loss
node checkpoint address fabric clique score effect task it_per_s iter_s compute_s
samples_per_s deviation"""
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
_E = TypeVar("_E", FaultDomain, Role, Severity, JobAction, NodeAction)


def _short(value: object, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def parse_signature(label: str, position: int, entry: object) -> Signature:  # noqa: C901
    """The signature of one catalogue entry (``position``: its index in the file ``label``).

    Raises ``ConfigError(setting="<file>:<signature id>")`` on the first problem.
    """
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
