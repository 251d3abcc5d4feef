"""Benchmark: log file -> events with medic's matcher, against grep, ripgrep and a plain re loop.

Run: ``.venv/bin/python benchmarks/bench_matcher.py [--lines N]``. It writes a synthetic log of
``--lines`` lines (default 2,000,000) to a temporary file: 0.1 % failure lines taken from the
catalogue's examples, about 1 % progress lines, and near-misses for the rest (NCCL INFO chatter,
lines about iterations and checkpoints that are not progress lines, harmless mentions of "error",
lines sharing a prefix with the patterns, the catalogue's counter-examples). Every tool runs
pinned to one core, on the same file, with the same patterns:

* medic: ``SignatureDiagnoser.scan_bytes`` on the file's bytes (read included; building the
  matcher is reported apart), with the engine it picks here (Hyperscan when installed);
* the control loop's case, beside it: ``--progress-share`` (30 %) of the lines are progress
  lines (each one a hit), matched as a file and end to end as the loop does (``scan`` of log
  lines into detections), on ``--realistic-lines`` lines (``realistic_hits`` in the JSON);
* ``grep -E -c -f`` (GNU grep, ``LC_ALL=C``) with the patterns converted to POSIX ERE and
  ``rg -c -f`` when ripgrep is installed: a pattern that cannot be converted (look-around,
  back-references) is dropped and counted; a line counts once, whichever pattern matched it;
* a plain Python loop: every line, every pattern (``re.search``, first match wins), timed on the
  first ``--re-lines`` lines since it is slow.

Each figure is the median of ``--runs`` runs (at least 3). Event counts are lines with at least
one matching signature; ``medic_events_same_patterns`` is medic's count with only the patterns
grep kept, which grep's and rg's counts should equal. The catalogue is the packaged YAML one
(``default_catalogue()``), or the YAML directory given with ``--catalogue DIR``. The last line
printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medic.detect.catalogue import default_catalogue, load_catalogue
from medic.detect.matcher import SignatureDiagnoser
from medic.detect.patterns import UNBOUNDED, compile_pattern, parse_pattern, strip_rank_prefix
from medic.detect.signatures import Signature
from medic.domain.diagnosis import Role
from medic.domain.ids import JobId, NodeName
from medic.domain.logs import LogLine, LogStream

PROGRESS = (
    "[rank0]:  [2026-01-01 00:10:00] iteration {step:>8}/  100000 | consumed samples: {s:>12} |"
    " elapsed time per iteration (ms): 512.3 | throughput per GPU (TFLOP/s/GPU): 401.2 |"
    " tokens per second: 65536.4 | learning rate: 3.000000E-04 | global batch size:   128 |"
    " lm loss: 2.500000E+00 | loss scale: 1.0 | grad norm: 1.234 |"
)
NEAR_MISSES = [
    "node{n:03d}:{pid}:{tid} [{g}] NCCL INFO Channel {c:02d}/0 : {g}[{g}] -> {h}[{h}] via P2P/IPC",
    "node{n:03d}:{pid}:{tid} [{g}] NCCL INFO NET/IB : Using [0]mlx5_{g}:1/IB ;"
    " OOB ib0:10.0.0.{c}<0>",
    "node{n:03d}:{pid}:{tid} [{g}] NCCL INFO comm 0x{pid:x} rank {r} nranks 16 cudaDev {g} busId"
    " {c}000 - Init COMPLETE",
    "node{n:03d}:{pid}:{tid} [{g}] NCCL INFO Connected all rings",
    "node{n:03d}:{pid}:{tid} [{g}] NCCL INFO [Service thread] Connection closed by localRank {h}",
    "node{n:03d}:{pid}:{tid} [{g}] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
    "[rank{r}]: step {step} loss {loss:.4f} lr 3.0e-04 grad_norm 1.{c:03d} tokens/s 65{c:03d}",
    "[rank{r}]:  saving checkpoint at iteration {step:>8} to /checkpoints/error-analysis",
    "[rank{r}]:  loading checkpoint from /checkpoints/oom_test at iteration {step}",
    "[rank{r}]: (min, max) time across ranks (ms): forward-backward ...: (512.{c}, 515.{g})",
    "[rank{r}]:  iteration {step} data loader wait 0.{c:03d} s (no errors)",
    "[2026-01-01 00:10:{g:02d},{c:03d}] INFO: retrying after error: timeout while reading batch",
    "nvidia-smi: no errors found on GPU {g} (0000:{c:02x}:00.0)",
    "Total errors: 0, warnings: {g}",
    "[rank{r}]: the errors module has {g} Exceptions: none raised",
    "[rank{r}]: UserWarning: TypedStorage is deprecated",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
    "mlx5_core 0000:{c:02x}:00.0: mlx5_port_change_event:1159:(pid 0): Link up on port 1",
    "[rank{r}]: Traceback (most recent call last):",
    '[rank{r}]:   File "/workspace/train.py", line {c}, in <module>',
    "[rank{r}]:     raise RuntimeError('boom')",
]


def load_signatures(directory: str | None) -> tuple[str, tuple[Signature, ...]]:
    """(label, signatures): the packaged catalogue, or the YAML one in ``directory``."""
    if directory is None:
        return "default", default_catalogue()
    return directory, load_catalogue(Path(directory))


def make_corpus(
    path: Path, lines: int, signatures: Sequence[Signature], seed: int, progress: float = 0.01
) -> None:
    """Write the corpus; near-misses (templates, counter-examples) that some signature of this
    catalogue does match are left out: they would be events, not near-misses."""
    rng = random.Random(seed)
    check = SignatureDiagnoser(signatures, engine="re")
    failures = [e.line for s in signatures if s.role is not Role.PROGRESS for e in s.examples]
    failures = failures or [e.line for s in signatures for e in s.examples]  # progress only
    counters = [c for s in signatures for c in s.counter_examples if not check.match_text(c)]
    sample = {"n": 1, "pid": 4001, "tid": 5001, "g": 1, "h": 2, "c": 3, "r": 1, "step": 10}
    near = [t for t in NEAR_MISSES if not check.match_text(t.format(loss=2.5, **sample))]
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for i in range(lines):
            roll = rng.random()
            if roll < 0.001:
                text = rng.choice(failures)
            elif roll < 0.001 + progress:
                text = PROGRESS.format(step=i, s=i * 128)
            elif roll < 0.011 + progress and counters:
                text = rng.choice(counters)
            else:
                values = {"n": i % 512, "pid": 4000 + i % 97, "tid": 5000 + i % 13, "g": i % 8}
                values |= {"h": (i + 1) % 8, "c": i % 251, "r": i % 64, "step": i // 64}
                text = rng.choice(near).format(loss=2.5 + (i % 100) / 1000, **values)
            out.write(text + "\n")


# --- patterns for grep (POSIX ERE) and ripgrep --------------------------------------------------

_ASCII_SETS = {
    "CATEGORY_DIGIT": set(range(48, 58)),
    "CATEGORY_WORD": {c for c in range(128) if chr(c).isalnum() or c == 95},
    "CATEGORY_SPACE": {9, 10, 11, 12, 13, 32},
}
_PREFIX = {  # the ERE one holds a real tab: a backslash is literal inside a POSIX bracket
    "ere": "^(\\[(rank|default)[0-9]{1,7}\\]:)?[ \t]*",
    "rust": r"^(?:\[(?:rank|default)[0-9]{1,7}\]:)?[ \t]*",
}


class Unsupported(Exception):
    """The pattern uses something the target syntax lacks."""


def _members(items: Any, caseless: bool) -> tuple[set[int], bool]:
    codes: set[int] = set()
    negated = False
    for kind, value in items:
        kind = str(kind)
        if kind == "NEGATE":
            negated = True
        elif kind == "LITERAL":
            codes.add(value)
        elif kind == "RANGE":
            codes.update(range(value[0], value[1] + 1))
        elif kind == "CATEGORY":
            name = str(value).replace("NOT_", "")
            base = _ASCII_SETS[name]
            codes.update(set(range(128)) - base if "NOT_" in str(value) else base)
    if caseless:
        codes |= {ord(chr(c).swapcase()) for c in codes if c < 128 and chr(c).isalpha()}
    if any(c >= 128 for c in codes) and not negated:
        raise Unsupported("non-ASCII class")
    return {c for c in codes if c < 128}, negated


def _class(codes: set[int], negated: bool, dialect: str) -> str:
    codes = codes - {10}  # neither tool ever sees a newline in a line
    if negated and not codes:
        return "."
    if dialect == "rust":
        body = "".join(f"\\x{c:02x}" for c in sorted(codes))
        return f"[{'^' if negated else ''}{body}]"
    chars = [chr(c) for c in sorted(codes)]
    head = "]" if "]" in chars else ""
    tail = "-" if "-" in chars else ""
    middle = [c for c in chars if c not in "]-"]
    if middle and middle[0] == "^" and not negated:
        middle = [*middle[1:], "^"]
    if not head and not middle and not tail:
        raise Unsupported("empty class")
    return f"[{'^' if negated else ''}{head}{''.join(middle)}{tail}]"


def convert(pattern: str, dialect: str) -> str:  # noqa: C901 - one branch per opcode
    """``pattern`` as POSIX ERE (``dialect="ere"``) or Rust regex (``"rust"``), ASCII, matched
    against raw lines (so ``^`` also accepts the rank prefix). Raises :class:`Unsupported`."""
    items, flags = parse_pattern(pattern)
    caseless = bool(flags & re.IGNORECASE)
    group = "(" if dialect == "ere" else "(?:"

    def seq(parts: Any) -> str:
        return "".join(item(op, av) for op, av in parts)

    def char(code: int) -> str:
        if code >= 128 or code == 10:
            raise Unsupported("non-ASCII or newline literal")
        c = chr(code)
        if caseless and c.isalpha():
            return _class({code, ord(c.swapcase())}, False, dialect)
        if dialect == "rust":
            return c if c.isalnum() or c in " _" else f"\\x{code:02x}"
        return "\\" + c if c in ".[]()*+?{}|^$\\" else c

    def item(op: Any, av: Any) -> str:  # noqa: C901 - one branch per opcode
        name = str(op)
        if name == "LITERAL":
            return char(av)
        if name == "NOT_LITERAL":
            return _class({av}, True, dialect)
        if name == "ANY":
            return "."
        if name == "IN":
            return _class(*_members(av, caseless), dialect)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, sub = av
            body = seq(sub)
            if len(sub) != 1 or str(sub[0][0]) not in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
                body = f"{group}{body})"
            return body + (f"{{{low},}}" if high == UNBOUNDED else f"{{{low},{high}}}")
        if name == "SUBPATTERN":
            if av[1] or av[2]:
                raise Unsupported("scoped flags")
            return f"{group}{seq(av[3])})"
        if name == "BRANCH":
            return group + "|".join(seq(alt) for alt in av[1]) + ")"
        if name == "AT":
            at = str(av)
            if at in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
                return _PREFIX[dialect]
            if at in ("AT_END", "AT_END_STRING"):
                return "$"
            return r"\b" if at == "AT_BOUNDARY" else r"\B"
        raise Unsupported(name.lower())

    return seq(items)


# --- the runs -----------------------------------------------------------------------------------


class Timing:
    """Medians over the runs of one measurement: CPU seconds (user + system, this process or
    its children) and wall seconds. On a shared machine CPU time is the steadier figure."""

    def __init__(self, cpu_s: list[float], wall_s: list[float], count: int, lines: int) -> None:
        self.cpu_s, self.wall_s = statistics.median(cpu_s), statistics.median(wall_s)
        self.count, self.lines = count, lines

    @property
    def rate(self) -> float:
        return self.lines / self.cpu_s

    def report(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "cpu_s": round(self.cpu_s, 3),
            "wall_s": round(self.wall_s, 3),
            "lines_per_s": round(self.rate),
            "lines_per_s_wall": round(self.lines / self.wall_s),
            "events": self.count,
        }


def _cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(run: Callable[[], int], runs: int, lines: int) -> Timing:
    """Run ``run`` ``runs`` times; its return value is the event count."""
    cpu_s: list[float] = []
    wall_s: list[float] = []
    count = 0
    for _ in range(runs):
        cpu, wall = _cpu(), time.perf_counter()
        count = run()
        cpu_s.append(_cpu() - cpu)
        wall_s.append(time.perf_counter() - wall)
    return Timing(cpu_s, wall_s, count, lines)


def tool_count(argv: list[str], timeout: float) -> int:
    env = {**os.environ, "LC_ALL": "C"}
    done = subprocess.run(argv, capture_output=True, env=env, timeout=timeout, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{argv[0]} failed: {done.stderr.decode(errors='replace')[:300]}")
    return int(done.stdout.split()[0]) if done.stdout.strip() else 0


def head(corpus: Path, lines: int, target: Path) -> Path:
    """The first ``lines`` lines of ``corpus`` in ``target`` (the corpus itself when all)."""
    with corpus.open("rb") as source, target.open("wb") as out:
        for number, line in enumerate(source):
            if number >= lines:
                return target
            out.write(line)
    return corpus


def re_loop(path: Path, patterns: Sequence[str]) -> int:
    regexes = [compile_pattern(p) for p in patterns]
    events = 0
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            body, _ = strip_rank_prefix(line.rstrip("\n"))
            for regex in regexes:
                if regex.search(body):
                    events += 1
                    break
    return events


def convert_all(signatures: Sequence[Signature]) -> tuple[list[Signature], dict[str, list[str]]]:
    kept: list[Signature] = []
    converted: dict[str, list[str]] = {"ere": [], "rust": [], "dropped": []}
    for signature in signatures:
        try:
            ere, rust = convert(signature.pattern, "ere"), convert(signature.pattern, "rust")
        except Unsupported as exc:
            converted["dropped"].append(f"{signature.id} ({exc})")
            continue
        converted["ere"].append(ere)
        converted["rust"].append(rust)
        kept.append(signature)
    return kept, converted


def run_tools(
    args: argparse.Namespace,
    tmp: Path,
    corpus: Path,
    medic: Timing,
    signatures: Sequence[Signature],
    engine: str,
) -> dict[str, Any]:
    """grep and rg on the same patterns, each on as many lines as fit ``--tool-budget``."""
    kept, converted = convert_all(signatures)
    same = SignatureDiagnoser(kept, engine=engine).scan_bytes(corpus.read_bytes())
    result: dict[str, Any] = {"medic_events_same_patterns": len(same)}
    if converted["dropped"]:
        print(f"dropped for grep/rg: {', '.join(converted['dropped'])}")
    tools: dict[str, list[str]] = {"grep": ["grep", "-E", "-c", "-f", str(tmp / "ere.txt")]}
    (tmp / "ere.txt").write_text("\n".join(converted["ere"]) + "\n", encoding="utf-8")
    (tmp / "rust.txt").write_text("\n".join(converted["rust"]) + "\n", encoding="utf-8")
    if shutil.which("rg"):
        limits = ["--regex-size-limit", "1G", "--dfa-size-limit", "1G"]
        tools["rg"] = ["rg", "-c", "-j1", "--no-unicode", *limits, "-f", str(tmp / "rust.txt")]
    else:
        result["rg"] = {"error": "not installed"}
    for name, command in tools.items():
        entry: dict[str, Any] = {"patterns": len(kept), "dropped": len(converted["dropped"])}
        try:  # double the lines until a run takes a while, then fill the budget
            lines, seconds = min(args.lines, 2_000), 0.0
            while True:
                sample = head(corpus, lines, tmp / "probe.log")
                start = time.perf_counter()
                tool_count([*command, str(sample)], args.tool_budget * 4)
                seconds = time.perf_counter() - start
                if lines >= args.lines or seconds > args.tool_budget / 8:
                    break
                lines = min(args.lines, lines * 4)
            lines = min(args.lines, max(500, int(lines * args.tool_budget / max(seconds, 1e-3))))
            target = head(corpus, lines, tmp / f"{name}.log")
            run = functools.partial(tool_count, [*command, str(target)], args.tool_budget * 10)
            timing = timed(run, args.runs, lines)
        except (subprocess.TimeoutExpired, RuntimeError) as exc:
            entry["error"] = str(exc)[:300]
        else:
            entry |= timing.report()
            entry["medic_events_same_lines"] = sum(1 for n, *_ in same if n <= lines)
            result[f"vs_{name}"] = round(medic.rate / timing.rate, 2)
            print(f"{name}: {timing.rate:,.0f} lines/s on {lines} lines, {timing.count} events")
        result[name] = entry
    return result


def realistic(
    args: argparse.Namespace, tmp: Path, signatures: Sequence[Signature], diagnoser: Any
) -> dict[str, Any]:
    """The control loop's case: ``--progress-share`` of the lines are progress lines (every one
    a hit), matched as files (``scan_bytes``) and end to end as the loop does (``scan`` on log
    lines, detections out)."""
    corpus = tmp / "realistic.log"
    lines = min(args.lines, args.realistic_lines)
    make_corpus(corpus, lines, signatures, args.seed, progress=args.progress_share)
    data = corpus.read_bytes()
    files = timed(lambda: len(diagnoser.scan_bytes(data)), args.runs, lines)
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    texts = data.decode("utf-8").splitlines()
    records = [
        LogLine(LogStream.JOB, text, stamp, NodeName("node001"), JobId("1"), 0, i)
        for i, text in enumerate(texts)
    ]
    loop = timed(lambda: len(diagnoser.scan(records)), args.runs, lines)
    print(
        f"medic with {args.progress_share:.0%} progress lines: {files.rate:,.0f} lines/s as a"
        f" file, {loop.rate:,.0f} lines/s end to end (log lines to detections)"
    )
    return {
        "progress_share": args.progress_share,
        "lines": lines,
        "scan_bytes": files.report(),
        "end_to_end": loop.report(),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3, help="at least 3")
    parser.add_argument("--re-lines", type=int, default=20_000, help="lines for the re loop")
    parser.add_argument("--tool-budget", type=float, default=10.0, help="seconds per grep/rg run")
    parser.add_argument("--catalogue", metavar="DIR", help="a YAML catalogue directory")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--progress-share", type=float, default=0.3, help="realistic case: progress lines"
    )
    parser.add_argument(
        "--realistic-lines", type=int, default=500_000, help="realistic case: lines"
    )
    args = parser.parse_args(argv)
    args.runs = max(3, args.runs)
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})  # this process and the tools it starts: one core

    source, signatures = load_signatures(args.catalogue)
    tmp = Path(tempfile.mkdtemp(prefix="medic-bench-matcher-"))
    try:
        corpus = tmp / "corpus.log"
        start = time.perf_counter()
        make_corpus(corpus, args.lines, signatures, args.seed)
        print(
            f"corpus: {args.lines} lines, {corpus.stat().st_size / 1e6:.1f} MB in"
            f" {time.perf_counter() - start:.1f} s; {len(signatures)} signatures ({source})"
        )
        start = time.perf_counter()
        diagnoser = SignatureDiagnoser(signatures)
        build_s = time.perf_counter() - start
        medic = timed(lambda: len(diagnoser.scan_bytes(corpus.read_bytes())), args.runs, args.lines)
        print(f"medic ({diagnoser.engine}): {medic.rate:,.0f} lines/s, {medic.count} events")
        result: dict[str, Any] = {
            "lines": args.lines,
            "catalogue": source,
            "signatures": len(signatures),
            "core": core,
            "lines_per_s": round(medic.rate),
            "medic": {"engine": diagnoser.engine, "build_s": round(build_s, 3), **medic.report()},
        }
        result["realistic_hits"] = realistic(args, tmp, signatures, diagnoser)
        result |= run_tools(args, tmp, corpus, medic, signatures, diagnoser.engine)
        sample = head(corpus, min(args.re_lines, args.lines), tmp / "re.log")
        patterns = [s.pattern for s in signatures]
        loop = timed(lambda: re_loop(sample, patterns), args.runs, min(args.re_lines, args.lines))
        hits = diagnoser.scan_bytes(corpus.read_bytes())
        result["re_loop"] = loop.report()
        result["re_loop"]["medic_events_same_lines"] = sum(1 for n, *_ in hits if n <= loop.lines)
        result["vs_re_loop"] = round(medic.rate / loop.rate, 2)
        print(f"re loop: {loop.rate:,.0f} lines/s on {loop.lines} lines, {loop.count} events")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
