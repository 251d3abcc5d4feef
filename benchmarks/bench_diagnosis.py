"""Benchmark: how well offline diagnosis attributes the scenario fixtures, against a naive baseline.

Run: ``.venv/bin/python benchmarks/bench_diagnosis.py [--scenarios tests/scenarios] [--verbose]``.

For every directory of ``tests/scenarios`` (its ``expected.json`` is the ground truth) it runs
``medic.diagnose.diagnose_directory`` and, on the same files in the same run, the plain approach a
script would take: **blame every node that printed an error line, and take the domain of the first
error line** (an error line: one with ``error``, ``fail``, ``exception``, ``xid``, ``killed``,
``timeout``... in it; its domain from keywords; action ``stop`` for an application error,
``restart`` otherwise, ``none`` without any error line).

Figures, for medic and the baseline:

* domain and action accuracy (share of scenarios with the expected value);
* implicated-node precision and recall, micro-averaged (summed over scenarios);
* ``stop_on_infrastructure``: scenarios whose expected domain is hardware, network,
  system_software or scheduler that were told to stop (must be 0: a false stop kills a healthy
  run for good);
* throughput (lines per second) of medic's diagnosis.

medic's figures are given over all scenarios and over those the current catalogue can already
read (``needs_catalogue_v2`` false). Aims: domain >= 95 %, node precision 100 %, recall >= 95 %,
no stop on infrastructure faults. The last line printed is one JSON object with every figure.
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


def score(rows: Iterable[tuple[dict[str, Any], Outcome]]) -> dict[str, Any]:
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
        "node_precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "node_recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
        "stop_on_infrastructure": stops,
    }
    result["aims_met"] = (
        n > 0
        and result["stop_on_infrastructure"] == 0
        and all(result[k] is not None and result[k] >= v for k, v in AIMS.items())
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenarios", type=Path, default=ROOT / "tests" / "scenarios")
    parser.add_argument("--verbose", action="store_true", help="one line per scenario")
    args = parser.parse_args(argv)
    directories = sorted(p for p in args.scenarios.iterdir() if (p / "expected.json").is_file())
    medic_rows, naive_rows, current_rows = [], [], []
    lines = 0
    seconds = 0.0
    for directory in directories:
        expected = json.loads((directory / "expected.json").read_text(encoding="utf-8"))
        started = time.perf_counter()
        diagnosis = diagnose_directory(directory)
        seconds += time.perf_counter() - started
        lines += diagnosis.lines
        v = diagnosis.verdict
        got = Outcome(v.domain.value, v.action.value, frozenset(v.implicated_nodes))
        plain = naive(directory)
        medic_rows.append((expected, got))
        naive_rows.append((expected, plain))
        if not expected.get("needs_catalogue_v2"):
            current_rows.append((expected, got))
        if args.verbose:
            mark = (
                "ok "
                if (got.domain, got.action) == (expected["domain"], expected["action"])
                else "BAD"
            )
            v2 = " [v2]" if expected.get("needs_catalogue_v2") else ""
            print(
                f"{mark} {directory.name:<36} medic {got.domain}/{got.action}/{sorted(got.nodes)}"
                f"  naive {plain.domain}/{plain.action}/{sorted(plain.nodes)}"
                f"  expected {expected['domain']}/{expected['action']}/"
                f"{expected['implicated_nodes']}{v2}"
            )
    report = {
        "benchmark": "diagnosis",
        "medic": score(medic_rows),
        "medic_current_catalogue": score(current_rows),
        "naive": score(naive_rows),
        "lines": lines,
        "lines_per_second": round(lines / seconds) if seconds else None,
        "needs_catalogue_v2": [
            d.name
            for d, (e, _) in zip(directories, medic_rows, strict=True)
            if e.get("needs_catalogue_v2")
        ],
    }
    for name in ("medic", "medic_current_catalogue", "naive"):
        s = report[name]
        print(
            f"{name:<24} domain {s['domain_accuracy']:.0%}  action {s['action_accuracy']:.0%}"
            f"  exact {s['exact']:.0%}  node precision {s['node_precision']:.0%}"
            f"  recall {s['node_recall']:.0%}  stop on infrastructure {s['stop_on_infrastructure']}"
            f"  ({s['scenarios']} scenarios)"
        )
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
