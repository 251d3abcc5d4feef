"""Benchmark: how well offline diagnosis attributes the scenario fixtures, against a naive baseline.

Run: ``.venv/bin/python benchmarks/bench_diagnosis.py [--scenarios tests/scenarios]
[--heldout tests/scenarios/heldout ...] [--verbose]``.

Two parts are scored separately, never pooled:

* the **developed** part: every directory of ``--scenarios`` with an ``expected.json`` (written
  next to the rules, so it measures fit, not generalisation);
* the **held-out** sets: every directory of each ``--heldout`` (default: every
  ``<scenarios>/heldout*`` with a ``floor.json``), modelled on public incident threads, whose
  answers were written from the thread before medic was run on it; its ``expected.json`` also
  names the issue-12 ``class`` (``"3-network"``: the leading number is the class), and the
  figures are given per set, per class, and pooled over the sets.

For every scenario it runs ``medic.diagnose.diagnose_directory`` and, on the same files in the same
run, two baselines:

* **naive**: the plain approach a script would take: blame every node that printed an error line,
  and take the domain of the first error line (an error line: one with ``error``, ``fail``,
  ``exception``, ``xid``, ``killed``, ``timeout``... in it; its domain from keywords; action
  ``stop`` for an application error, ``restart`` otherwise, ``none`` without any error line);
* **always restart**: what a restart-everything agent does (NVRx's restart agent): action
  ``restart`` on every scenario, nobody implicated, the domain of the naive rule (so only the
  action policy differs from naive).

Figures, for medic and each baseline:

* ``exact`` (fully right: domain, action and implicated nodes all as expected) share and count;
* domain and action accuracy (share of scenarios with the expected value);
* implicated-node precision and recall, micro-averaged (summed over scenarios);
* ``healthy_implicated``: implicated nodes the answer does not name (each a wrongly excluded node);
* ``stop_on_infrastructure``: scenarios whose expected domain is hardware, network,
  system_software or scheduler that were told to stop (must be 0: a false stop kills a healthy
  run for good);
* throughput (lines per second) of medic's diagnosis.

medic's developed-part figures are also given over the scenarios the current catalogue can already
read (``needs_catalogue_v2`` false). Aims: exact >= 95 % on the held-out part, domain >= 95 %, node
precision 100 % (no healthy node implicated), recall >= 95 %, no stop on infrastructure faults. The
last line printed is one JSON object with every figure: the developed part's under ``medic``,
``medic_current_catalogue``, ``naive`` and ``always_restart`` (as before), each held-out set's
under ``heldout_sets`` (by directory name; the first also under ``heldout``), all of them together
under ``heldout_pooled``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medic.diagnose import JOB_OUT, diagnose_directory

ROOT = Path(__file__).resolve().parents[1]
INFRASTRUCTURE = frozenset({"hardware", "network", "system_software", "scheduler"})
AIMS = {"domain_accuracy": 0.95, "node_precision": 1.0, "node_recall": 0.95}
HELDOUT_AIMS = {**AIMS, "exact": 0.95}

_ERROR = re.compile(
    r"\b(?:errors?|fail(?:s|ed|ure)?|fatal|exception|traceback|xid|killed|timed? ?out|abort(?:ed)?)"
    r"\b",
    re.IGNORECASE,
)
_HOST = re.compile(
    r"^(?P<host>[A-Za-z][\w.-]{0,62}):\d+:\d+ \[\d+\]|^srun: error: (?P<srun>[\w.-]+):"
)
_NAIVE_DOMAINS = (
    ("scheduler", re.compile(r"slurm|srun|preempt|time limit|node failure", re.I)),
    ("hardware", re.compile(r"xid|ecc|nvlink|fallen off|nvrm", re.I)),
    ("network", re.compile(r"net/ib|net/ofi|mlx5|infiniband|network|connection|socket", re.I)),
    ("system_software", re.compile(r"nccl|watchdog|timeout|lustre|nfs|sigsegv|pyxis|rendezvous", re.I)),  # noqa: E501
)  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    domain: str
    action: str
    nodes: frozenset[str]


def naive(directory: Path) -> Outcome:
    """Blame every node that printed an error line; the domain of the first error line."""
    files = sorted(p for p in directory.iterdir() if p.suffix == ".log")
    if (directory / JOB_OUT).is_file():
        files.append(directory / JOB_OUT)
    nodes: set[str] = set()
    first: str | None = None
    for path in files:
        for raw in path.read_bytes().split(b"\n"):
            line = raw.decode("utf-8", errors="replace")
            if not _ERROR.search(line):
                continue
            first = first if first is not None else line
            if path.suffix == ".log":
                nodes.add(path.stem)
            elif match := _HOST.match(line):
                nodes.add(match.group("host") or match.group("srun"))
    if first is None:
        return Outcome("none", "none", frozenset())
    domain = next((d for d, rx in _NAIVE_DOMAINS if rx.search(first)), "application")
    return Outcome(domain, "stop" if domain == "application" else "restart", frozenset(nodes))


def always_restart(directory: Path) -> Outcome:
    """Restart everything, blame nobody; the domain of the naive rule."""
    return Outcome(naive(directory).domain, "restart", frozenset())


def class_of(expected: dict[str, Any]) -> str:
    """The issue-12 class number of a held-out scenario (``"3-network"`` -> ``"3"``)."""
    return str(expected.get("class", "?")).split("-", 1)[0]


def score(
    rows: Iterable[tuple[dict[str, Any], Outcome]], aims: dict[str, float] = AIMS
) -> dict[str, Any]:
    """Accuracy, micro precision/recall and false stops over (expected, outcome) pairs."""
    n = tp = fp = fn = domain_ok = action_ok = exact = stops = 0
    for expected, got in rows:
        n += 1
        want = frozenset(expected["implicated_nodes"])
        tp += len(got.nodes & want)
        fp += len(got.nodes - want)
        fn += len(want - got.nodes)
        domain_ok += got.domain == expected["domain"]
        action_ok += got.action == expected["action"]
        exact += (got.domain, got.action, got.nodes) == (
            expected["domain"],
            expected["action"],
            want,
        )
        stops += expected["domain"] in INFRASTRUCTURE and got.action == "stop"
    result = {
        "scenarios": n,
        "domain_accuracy": round(domain_ok / n, 4) if n else None,
        "action_accuracy": round(action_ok / n, 4) if n else None,
        "exact": round(exact / n, 4) if n else None,
        "exact_count": exact,
        "healthy_implicated": fp,
        "node_precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "node_recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
        "stop_on_infrastructure": stops,
    }
    result["aims_met"] = (
        n > 0
        and result["stop_on_infrastructure"] == 0
        and all(result[k] is not None and result[k] >= v for k, v in aims.items())
    )
    return result


Rows = list[tuple[dict[str, Any], Outcome]]
APPROACHES = ("medic", "naive", "always_restart")


@dataclass
class Part:
    """One part's rows for each approach, and medic's timing."""

    rows: dict[str, Rows]
    names: list[str]
    lines: int = 0
    seconds: float = 0.0


def scenario_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "expected.json").is_file())


def run_part(directories: list[Path], label: str, verbose: bool) -> Part:
    part = Part(rows={a: [] for a in APPROACHES}, names=[d.name for d in directories])
    for directory in directories:
        expected = json.loads((directory / "expected.json").read_text(encoding="utf-8"))
        started = time.perf_counter()
        diagnosis = diagnose_directory(directory)
        part.seconds += time.perf_counter() - started
        part.lines += diagnosis.lines
        v = diagnosis.verdict
        got = Outcome(v.domain.value, v.action.value, frozenset(v.implicated_nodes))
        plain = naive(directory)
        outcomes = {"medic": got, "naive": plain, "always_restart": always_restart(directory)}
        for approach, outcome in outcomes.items():
            part.rows[approach].append((expected, outcome))
        if verbose:
            want = (expected["domain"], expected["action"], frozenset(expected["implicated_nodes"]))
            mark = "ok " if (got.domain, got.action, got.nodes) == want else "BAD"
            v2 = " [v2]" if expected.get("needs_catalogue_v2") else ""
            print(
                f"{mark} {label:<9} {directory.name:<44} medic {got.domain}/{got.action}/"
                f"{sorted(got.nodes)}  naive {plain.domain}/{plain.action}/{sorted(plain.nodes)}"
                f"  expected {expected['domain']}/{expected['action']}/"
                f"{expected['implicated_nodes']}{v2}"
            )
    return part


def line(name: str, s: dict[str, Any]) -> str:
    if not s["scenarios"]:
        return f"{name:<34} (no scenarios)"
    return (
        f"{name:<34} exact {s['exact']:.0%} ({s['exact_count']}/{s['scenarios']})"
        f"  domain {s['domain_accuracy']:.0%}  action {s['action_accuracy']:.0%}"
        f"  node precision {s['node_precision']:.0%}  recall {s['node_recall']:.0%}"
        f"  healthy implicated {s['healthy_implicated']}"
        f"  stop on infrastructure {s['stop_on_infrastructure']}"
    )


def heldout_block(root: Path, verbose: bool) -> tuple[dict[str, Any], Part]:
    """One held-out set's figures: every approach, per class, and the scenarios medic misses."""
    part = run_part(scenario_dirs(root), "held-out", verbose)
    classes = sorted({class_of(e) for e, _ in part.rows["medic"]})
    block = {
        "path": str(root),
        **{a: score(part.rows[a], HELDOUT_AIMS) for a in APPROACHES},
        "per_class": {
            c: {a: score([(e, o) for e, o in part.rows[a] if class_of(e) == c]) for a in APPROACHES}
            for c in classes
        },
        "medic_wrong": [
            n
            for n, (e, o) in zip(part.names, part.rows["medic"], strict=True)
            if (o.domain, o.action, o.nodes)
            != (e["domain"], e["action"], frozenset(e["implicated_nodes"]))
        ],
    }
    return block, part


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenarios", type=Path, default=ROOT / "tests" / "scenarios")
    parser.add_argument(
        "--heldout",
        type=Path,
        action="append",
        default=None,
        help="a held-out set, repeatable (default: every <scenarios>/heldout* with a floor.json)",
    )
    parser.add_argument("--verbose", action="store_true", help="one line per scenario")
    args = parser.parse_args(argv)
    roots = args.heldout or sorted(
        p for p in args.scenarios.glob("heldout*") if (p / "floor.json").is_file()
    )
    developed = run_part(scenario_dirs(args.scenarios), "developed", args.verbose)
    sets = [heldout_block(root, args.verbose) for root in roots]

    current = [(e, o) for e, o in developed.rows["medic"] if not e.get("needs_catalogue_v2")]
    lines = developed.lines + sum(part.lines for _, part in sets)
    seconds = developed.seconds + sum(part.seconds for _, part in sets)
    report: dict[str, Any] = {
        "benchmark": "diagnosis",
        "medic": score(developed.rows["medic"]),
        "medic_current_catalogue": score(current),
        "naive": score(developed.rows["naive"]),
        "always_restart": score(developed.rows["always_restart"]),
        "heldout": sets[0][0] if sets else None,
        "heldout_sets": {Path(block["path"]).name: block for block, _ in sets},
        "heldout_pooled": {
            a: score([row for _, part in sets for row in part.rows[a]], HELDOUT_AIMS)
            for a in APPROACHES
        },
        "lines": lines,
        "lines_per_second": round(lines / seconds) if seconds else None,
        "needs_catalogue_v2": [
            n
            for n, (e, _) in zip(developed.names, developed.rows["medic"], strict=True)
            if e.get("needs_catalogue_v2")
        ],
    }
    print("developed part (tests/scenarios/*, written next to the rules)")
    print(line("  medic", report["medic"]))
    print(line("  medic (current catalogue)", report["medic_current_catalogue"]))
    print(line("  naive", report["naive"]))
    print(line("  always restart", report["always_restart"]))
    for block, _ in sets:
        print(f"held-out set {block['path']} (answers written before running medic)")
        for approach in APPROACHES:
            print(line(f"  {approach.replace('_', ' ')}", block[approach]))
        for c, figures in block["per_class"].items():
            for approach in APPROACHES:
                print(line(f"  class {c} {approach.replace('_', ' ')}", figures[approach]))
    print("held-out sets pooled")
    for approach in APPROACHES:
        print(line(f"  {approach.replace('_', ' ')}", report["heldout_pooled"][approach]))
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
