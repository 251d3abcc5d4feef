"""The documentation promises what the code does: audit kinds, the two commands, CI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from medic.domain.audit import AuditKind
from medic.domain.repair_rules import RepairRule

ROOT = Path(__file__).resolve().parents[1]
AUDIT_DOC = ROOT / "docs" / "audit-events.md"
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
MAKEFILE = ROOT / "Makefile"

_KIND_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")
_RULE_SECTION = "## Repair rule ids"


def _documented_kinds() -> list[str]:
    """The first cell of every row of the audit-kind table (``| `kind` | actor | ... |``)."""
    return [
        match.group(1)
        for line in AUDIT_DOC.read_text(encoding="utf-8").split(_RULE_SECTION, 1)[0].splitlines()
        if (match := _KIND_ROW.match(line.strip()))
    ]


def test_the_audit_table_has_rows() -> None:
    assert len(_documented_kinds()) >= len(AuditKind) > 0


@pytest.mark.parametrize("kind", list(AuditKind), ids=str)
def test_every_audit_kind_is_documented(kind: AuditKind) -> None:
    assert kind.value in _documented_kinds(), f"add a row for `{kind.value}` to {AUDIT_DOC.name}"


def test_every_documented_kind_exists_once() -> None:
    documented = _documented_kinds()
    known = {kind.value for kind in AuditKind}

    assert [k for k in documented if k not in known] == []
    assert len(documented) == len(set(documented)), "a kind is documented twice"


def test_audit_rows_have_every_column() -> None:
    header = "| kind | actor | written when | payload |"
    kinds = AUDIT_DOC.read_text(encoding="utf-8").split(_RULE_SECTION, 1)[0]
    lines = [line.strip() for line in kinds.splitlines()]
    assert header in lines
    rows = [line for line in lines if _KIND_ROW.match(line)]
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 4 and all(cells), row
        actors = {a.strip() for a in cells[1].split(",")}
        known = {"medic-engine", "medic-controller", "controller:NAME", "user:NAME", "cli:USER"}
        assert actors <= known, row


def test_readme_names_the_two_commands() -> None:
    readme = README.read_text(encoding="utf-8")

    assert "make demo" in readme
    assert "make test" in readme


def test_makefile_defines_the_readme_targets() -> None:
    targets = {
        line.split(":", 1)[0]
        for line in MAKEFILE.read_text(encoding="utf-8").splitlines()
        if re.match(r"^[A-Za-z][\w-]*:", line)
    }

    assert {"demo", "test"} <= targets


def test_ci_runs_make_test() -> None:
    commands = [
        line.split("#", 1)[0].strip() for line in CI_RUN.read_text(encoding="utf-8").splitlines()
    ]

    assert "make test" in commands
    assert CI_RUN.stat().st_mode & 0o111, ".ci/run must be executable"


def _documented_rules() -> list[str]:
    text = AUDIT_DOC.read_text(encoding="utf-8").split(_RULE_SECTION, 1)[-1]
    return [m.group(1) for line in text.splitlines() if (m := _KIND_ROW.match(line.strip()))]


def test_every_repair_rule_is_documented_once() -> None:
    documented = _documented_rules()
    assert sorted(documented) == sorted(rule.value for rule in RepairRule)
