"""The YAML catalogue loader: what a valid file gives, and one clear error for each broken rule.

Every error must name the file and the signature (``<file>:<id>``) and say why, on one line. The
base case is the fixture catalogue in fixtures/catalogue/; each broken case changes one thing in a
copy of it.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from medic.detect import catalogue as catalogue_module
from medic.detect import engines
from medic.detect.catalogue import load_catalogue, main
from medic.detect.catalogue_entry import CANONICAL_FIELDS
from medic.detect.matcher import SignatureDiagnoser
from medic.detect.pattern_rules import pattern_problem
from medic.detect.signatures import Example, NodeAction
from medic.domain.diagnosis import FaultDomain, JobAction, Role, Severity
from medic.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures"
CATALOGUE_DIR = FIXTURES / "catalogue"
XID = yaml.safe_load((CATALOGUE_DIR / "xid.yaml").read_text(encoding="utf-8"))
PROGRESS = (CATALOGUE_DIR / "progress.yaml").read_text(encoding="utf-8")


def test_fixture_catalogue_loads_in_file_then_entry_order() -> None:
    signatures = load_catalogue(CATALOGUE_DIR)
    assert [s.id for s in signatures] == [
        "megatron.checkpoint_saved",
        "python.exception",
        "xid.79",
        "xid.other",
    ]
    saved, exception, xid79, other = signatures
    assert saved.constants == (("checkpoint", "saved"),)
    assert saved.fields == ("step",)
    assert saved.role is Role.PROGRESS and saved.domain is FaultDomain.NONE
    assert exception.fields == ("exception", "message")
    assert xid79.node_action is NodeAction.REBOOT
    assert (xid79.xid, xid79.priority, other.priority) == (79, 50, 0)
    assert xid79.implicates_node and not exception.implicates_node
    assert (xid79.severity, xid79.action) == (Severity.CRITICAL, JobAction.RESTART)
    assert xid79.examples[0] == Example(
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off"
        " the bus.",
        (("pci", "0000:3b:00"), ("xid", "79")),
    )
    assert xid79.counter_examples == ("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception",)


def test_loaded_catalogue_drives_the_matcher_with_priority_and_constants() -> None:
    diagnoser = SignatureDiagnoser(load_catalogue(CATALOGUE_DIR))
    found = diagnoser.match_text("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off")
    assert found is not None and found[0].id == "xid.79"  # priority 50 beats xid.other
    found = diagnoser.match_text("[rank0]: Successfully saved checkpoint at iteration 12")
    assert found is not None
    assert found[1] == {"step": "12", "checkpoint": "saved"}


def test_default_directory_is_the_package_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogue_module.importlib.resources, "files", lambda _: FIXTURES)
    assert len(load_catalogue()) == 4


def test_command_line_prints_counts_per_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(CATALOGUE_DIR)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{CATALOGUE_DIR}/progress.yaml: 2",
        f"{CATALOGUE_DIR}/xid.yaml: 2",
        "total: 4",
    ]


def test_command_line_reports_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "xid.yaml").write_text("area: xid\nsignatures: []\n", encoding="utf-8")
    assert main([str(tmp_path)]) == 2
    assert "signatures must be a non-empty list" in capsys.readouterr().err


def _write(directory: Path, document: Any, name: str = "xid.yaml") -> Path:
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    (directory / name).write_text(text, encoding="utf-8")
    return directory


def _broken(tmp_path: Path, change: dict[str, Any], index: int = 0) -> ConfigError:
    document = copy.deepcopy(XID)
    entry = document["signatures"][index]
    for key, value in change.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    with pytest.raises(ConfigError) as caught:
        load_catalogue(_write(tmp_path, document))
    return caught.value


FALLEN = XID["signatures"][0]["examples"][0]["line"]
FIELDS = {"pci": "0000:3b:00", "xid": "79"}
NEG = r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]{1,20})\): (?P<xid>79),"

# (change to the first signature, words the message must contain)
BROKEN: list[tuple[dict[str, Any], str]] = [
    ({"title": None}, "missing key(s): title"),
    ({"colour": "red"}, "unknown key(s): colour"),
    ({"domain": "hardwar"}, "domain must be one of hardware | network"),
    ({"role": "culprit"}, "role must be one of root"),
    ({"severity": "fatal"}, "severity must be one of info"),
    ({"action": "reboot"}, "action must be one of restart | stop | none"),
    ({"implicates": "node"}, "implicates must be one of emitter | none"),
    ({"node_action": "kick"}, "node_action must be one of none | restart_app"),
    ({"xid": "79"}, "xid must be an integer"),
    ({"priority": True}, "priority must be an integer"),
    ({"reference": "nvidia docs"}, "reference must be an https:// address"),
    ({"title": ""}, "title must be a non-empty string"),
    ({"pattern": r"NVRM:\sXid \((?P<pci>[0-9a-f:.]{1,20})\): (?P<xid>79),"}, r"\s, \S, \W and \D"),
    ({"pattern": NEG.replace("NVRM: ", r"NVRM:\S")}, r"\s, \S, \W and \D"),
    ({"pattern": NEG.replace("NVRM: ", r"NVRM:\W")}, r"\s, \S, \W and \D"),
    ({"pattern": NEG.replace("79", r"\D?79")}, r"\s, \S, \W and \D"),
    ({"pattern": NEG + r"\n"}, "within one line"),
    ({"pattern": NEG + r"\v?"}, "within one line"),
    ({"pattern": NEG + r"[a\r]?"}, "within one line"),
    ({"pattern": NEG + r"(?= pid)"}, "look-around"),
    ({"pattern": NEG + r"(?! pid=1)"}, "look-around"),
    ({"pattern": r"(?<=\[ )" + NEG}, "look-around"),
    ({"pattern": NEG + r"(?P=xid)?"}, "back-references"),
    ({"pattern": NEG + r"(?>x)?"}, "atomic groups and possessive"),
    ({"pattern": NEG + r" ?x*+"}, "atomic groups and possessive"),
    ({"pattern": "(?s)" + NEG}, "inline flags"),
    ({"pattern": "(?m)" + NEG}, "inline flags"),
    ({"pattern": NEG + "(?i: pid)?"}, "inline flags"),
    ({"pattern": NEG + "(?: pid=[^,]{1,9})?"}, r"negated class must exclude \n"),
    ({"pattern": NEG + "(?: pid=[^,x]{1,9})?"}, r"negated class must exclude \n"),
    ({"pattern": NEG + "(?: (?:a+)+)?"}, "nested unbounded repeats"),
    ({"pattern": NEG + "(?P<pid"}, "does not compile in Python re"),
    ({"pattern": "x?", "examples": ["x"]}, "matches the empty string"),
    ({"pattern": NEG.replace("pci", "bus")}, "canonical field names, not bus"),
    ({"fields": ["pci"]}, "must list the named groups ['pci', 'xid']"),
    ({"constants": {"flavour": "x"}}, "constants flavour: not a canonical field"),
    ({"constants": {"pci": "x"}}, "constants pci: not a canonical field or also a named group"),
    ({"constants": {"node": 1.5}}, "must be a string (quote it)"),
    ({"examples": []}, "examples must be a non-empty list"),
    ({"examples": [{"line": "NVRM: Xid (PCI:0000:3b:00): 13, x"}]}, "example 1 does not match"),
    ({"examples": [{"line": FALLEN, "fields": {"xid": "79"}}]}, "example 1 extracts"),
    ({"examples": [{"line": FALLEN, "fields": {**FIELDS, "pid": "1"}}]}, "example 1 extracts"),
    ({"examples": [{"line": FALLEN + "\nsecond", "fields": FIELDS}]}, "must be one line"),
    ({"examples": [{"line": FALLEN, "fields": FIELDS, "note": "x"}]}, "unknown key(s): note"),
    ({"examples": [FALLEN]}, "example 1 extracts"),
    ({"counter_examples": [FALLEN]}, "counter-example 1 matches the pattern"),
    ({"counter_examples": "not a list"}, "counter_examples must be a list"),
    ({"role": "cascade"}, "a cascade never implicates the emitter"),
    ({"role": "progress"}, "a progress signature has action none and domain none"),
    ({"action": "stop"}, "only an application signature may stop the job"),
    ({"id": "Xid.79"}, "id must be lowercase"),
]


@pytest.mark.parametrize(("change", "words"), BROKEN, ids=[w for _, w in BROKEN])
def test_broken_signature_is_refused_with_file_id_and_reason(
    tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    error = _broken(tmp_path, change)
    sid = change.get("id", "xid.79")
    assert error.setting == f"{tmp_path}/xid.yaml:{sid}"
    assert words in error.message
    assert "\n" not in str(error)


def test_signature_without_an_id_is_named_by_position(tmp_path: Path) -> None:
    error = _broken(tmp_path, {"id": None}, index=1)
    assert error.setting == f"{tmp_path}/xid.yaml:#2"
    assert "missing key(s): id" in error.message


def test_example_won_by_another_signature_is_refused(tmp_path: Path) -> None:
    document = copy.deepcopy(XID)
    document["signatures"][0]["priority"] = 0
    document["signatures"].reverse()  # xid.other (generic) now comes first at equal priority
    with pytest.raises(ConfigError) as caught:
        load_catalogue(_write(tmp_path, document))
    assert caught.value.setting == f"{tmp_path}/xid.yaml:xid.79"
    assert "example 1 is won by xid.other (priority 0" in caught.value.message


def test_duplicate_id_across_files_names_both(tmp_path: Path) -> None:
    _write(tmp_path, XID)
    other = copy.deepcopy(XID)
    other["area"] = "zzz"
    with pytest.raises(ConfigError) as caught:
        load_catalogue(_write(tmp_path, other, "zzz.yaml"))
    assert caught.value.setting == f"{tmp_path}/zzz.yaml:xid.79"
    assert caught.value.message == f"duplicate id (also in {tmp_path}/xid.yaml)"


@pytest.mark.skipif("hyperscan" not in engines.available_engines(), reason="no hyperscan")
def test_pattern_hyperscan_refuses_is_refused(tmp_path: Path) -> None:
    pattern = NEG.replace("NVRM: ", "NVRM: (?:(?:ab){1,70000})?")
    error = _broken(tmp_path, {"pattern": pattern})
    assert error.setting == f"{tmp_path}/xid.yaml:xid.79"
    assert error.message == "pattern does not compile in Hyperscan: Bounded repeat is too large."


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("area: xid\nsignatures: [", "invalid YAML"),
        ("- just a list", "expected a mapping with the keys area and signatures"),
        ("area: gpu\nsignatures: []", "area must be the file's stem 'xid', got 'gpu'"),
        ("area: xid\nsignatures: {}", "signatures must be a non-empty list"),
        ("area: xid\nversion: 2\nsignatures: []", "unknown top-level key(s): version"),
        ("area: xid\narea: xid\nsignatures: []", "duplicate key 'area'"),
        ("area: xid\nsignatures:\n  - just text", "a signature must be a mapping"),
    ],
)
def test_broken_file_is_refused(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_catalogue(_write(tmp_path, text))
    assert caught.value.setting.startswith(f"{tmp_path}/xid.yaml")
    assert words in caught.value.message
    assert "\n" not in str(caught.value)


def test_duplicate_key_inside_a_signature_is_refused(tmp_path: Path) -> None:
    text = (CATALOGUE_DIR / "xid.yaml").read_text(encoding="utf-8")
    text = text.replace("    title: GPU has fallen", "    role: root\n    title: GPU has fallen", 1)
    with pytest.raises(ConfigError, match="duplicate key 'role'"):
        load_catalogue(_write(tmp_path, text))


def test_missing_or_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        load_catalogue(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=re.escape("no *.yaml catalogue file")):
        load_catalogue(tmp_path)


@pytest.mark.parametrize(
    "pattern",
    [
        r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]{1,20})\): (?P<xid>79),",
        r"(?i)^foo[ \t]{1,4}(?P<step>[0-9]+)\b",
        r"gap .{0,300}? then [^,\n]{1,80}, [^\n]* end$",
        r"\bword\b \d{1,3} \w+",
    ],
)
def test_patterns_within_the_rules(pattern: str) -> None:
    assert pattern_problem(pattern) is None


def test_canonical_fields_are_the_documented_ones() -> None:
    documented = Path(__file__).parents[3] / "docs" / "signatures.md"
    if not documented.exists():
        pytest.skip("docs/ is not beside the tests")
    text = documented.read_text(encoding="utf-8")
    listed = set(re.findall(r"`([a-z_]+)`", text.split("the field names are the canonical")[1]))
    assert listed - {"checkpoint"} <= CANONICAL_FIELDS
    assert CANONICAL_FIELDS - listed <= {"checkpoint"}


def test_progress_fixture_is_valid_on_its_own(tmp_path: Path) -> None:
    _write(tmp_path, PROGRESS, "progress.yaml")
    ids = [s.id for s in load_catalogue(tmp_path)]
    assert ids == ["megatron.checkpoint_saved", "python.exception"]
