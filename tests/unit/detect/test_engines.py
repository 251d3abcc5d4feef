"""The engines behind the matcher: each is a superset filter, and the matcher's answer is the same
whichever engine runs (Hyperscan, RE2, stdlib re) on a corpus of real and awkward lines."""

from __future__ import annotations

import bisect
import csv
import functools
import itertools
import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medic.detect import engines
from medic.detect.catalogue import default_catalogue, load_catalogue
from medic.detect.engines import (
    Engine,
    HyperscanEngine,
    ReEngine,
    available_engines,
    hyperscan_errors,
    make_engine,
)
from medic.detect.hyperscan_rewrite import hyperscan_expression
from medic.detect.matcher import SignatureDiagnoser
from medic.detect.patterns import compile_pattern, required_literals, strip_rank_prefix
from medic.detect.signatures import Signature
from medic.domain.ids import SignatureId

from .test_matcher import NEAR_MISSES
from .test_signatures import EXAMPLES, SIM_LINES, SIM_QUIET_LINES

CATALOGUE = default_catalogue()

HERE = Path(__file__).parent
YAML = load_catalogue(HERE / "fixtures" / "catalogue")
ENGINES = available_engines()
needs_hyperscan = pytest.mark.skipif("hyperscan" not in ENGINES, reason="hyperscan not installed")

with (HERE / "public-log-lines.tsv").open(encoding="utf-8", newline="") as handle:
    PUBLIC = [r["line"] for r in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)]

AWKWARD = [
    "",
    "   ",
    "[rank1]:",
    "[rank1]:   KeyError: 'x'",
    "[default0]: RuntimeError: CUDA error: unknown error",
    "[rank0] KeyError: 'x'",
    "rank3: Traceback (most recent call last):",
    "[7]: KeyError: 'y'",
    "  3: [default3]: KeyError: 'z'",
    "12: [rank12]: KeyError: 'w'",
    "0: [default0]:[rank8]:   KeyError: 'v'",
    "3: Saved checkpoint at iteration 40 to /ckpt",
    "noise\rRuntimeError: CUDA error: unspecified launch failure",
    "KeyError: 'a'\x0bValueError: b",
    "ValueError: é\u2028[rank2]: AssertionError",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=pythön, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=\x00, name=\udcff, nul and surrogate",
    "iteration 1/ 2 | " + "é" * 390 + " elapsed time per iteration (ms): 1.5",
    "NCCL error in: " + "€" * 250 + ", unhandled system error, NCCL version 2.18",
    "torch.distributed.DistBackendError: NCCL error",
    "exitcode  : -6 (pid: 2385923)",
    "x" * 20_000 + " uncorrectable ECC error encountered",
]

CORPUS = [
    *(line for cases in EXAMPLES.values() for line, _ in cases),
    *(line for line, *_ in SIM_LINES),
    *SIM_QUIET_LINES,
    *NEAR_MISSES,
    *PUBLIC,
    *AWKWARD,
    *(e.line for s in YAML for e in s.examples),
    *(c for s in YAML for c in s.counter_examples),
]


def _results(signatures: tuple[Signature, ...], engine: str, data: bytes) -> list[object]:
    diagnoser = SignatureDiagnoser(signatures, engine=engine)
    assert diagnoser.engine == engine
    return [(n, s.id, f, t) for n, s, f, t in diagnoser.scan_bytes(data)]


def _catalogue(name: str) -> tuple[Signature, ...]:
    return YAML if name == "fixture" else CATALOGUE


@pytest.mark.parametrize("catalogue", ["fixture", "package"])
@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "re"])
def test_engines_agree_on_the_corpus(catalogue: str, engine: str) -> None:
    signatures = _catalogue(catalogue)
    lines = [*CORPUS, *(e.line for s in signatures for e in s.examples)]
    lines += [c for s in signatures for c in s.counter_examples]
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    expected = _results(signatures, "re", data)
    assert len(expected) > 50
    assert _results(signatures, engine, data) == expected


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_matches_the_reference_loop(engine: str) -> None:
    """scan_bytes equals trying every signature in order on every physical line (match_text)."""
    reference = SignatureDiagnoser(CATALOGUE, engine="re")
    expected = []
    for number, line in enumerate(CORPUS, 1):
        for segment in line.splitlines():
            found = reference.match_text(segment)
            if found is not None:
                expected.append((number, found[0].id))
    data = "\n".join(CORPUS).encode("utf-8", "surrogatepass")
    got = SignatureDiagnoser(CATALOGUE, engine=engine).scan_bytes(data)
    assert [(n, s.id) for n, s, _, _ in got] == expected


_FRAGMENTS = st.sampled_from(
    [e.line[:40] for s in CATALOGUE for e in s.examples[:1]]
    + [e.line[:40] for s in YAML for e in s.examples]
    + ["[rank1]:", "NVRM: Xid (PCI:0000:3a:00): ", "79, ", "pid=", ": ", "Error", " ", "é"]
    + ["[rank2] ", "rank4:", "[3]:", "[default1]:", "5: ", "\t"]
    + ["\n", "\r", "\x00", "\u2028", "Watchdog caught collective operation timeout", "0", "9"]
)


@functools.cache
def _superset_setup() -> tuple[list[re.Pattern[str]], dict[str, Engine]]:
    signatures = [*CATALOGUE, *(s for s in YAML if s.id not in {x.id for x in CATALOGUE})]
    patterns = [s.pattern for s in signatures]
    return [compile_pattern(p) for p in patterns], {e: make_engine(patterns, e) for e in ENGINES}


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=30).map("".join))
def test_each_engine_is_a_superset_of_the_pattern_matches(text: str) -> None:
    """Every (line, signature) whose pattern matches the line's body has a candidate."""
    regexes, built = _superset_setup()
    data = text.encode("utf-8", "surrogatepass")
    lines = data.split(b"\n")
    ends = list(itertools.accumulate(len(line) + 1 for line in lines))
    for name, engine in built.items():
        candidates = {(bisect.bisect_right(ends, end - 1), i) for i, end in engine.scan(data)}
        for number, line in enumerate(lines):
            for segment in line.decode("utf-8", "replace").splitlines():
                body, _ = strip_rank_prefix(segment)
                for index, regex in enumerate(regexes):
                    if body and regex.search(body):
                        assert (number, index) in candidates, (name, segment, regex.pattern)


def test_make_engine_picks_the_best_and_refuses_unknown_ones() -> None:
    assert ENGINES[-1] == "re"
    assert make_engine([r"abc"]).name == ENGINES[0]
    with pytest.raises(ValueError, match="unknown engine 'pcre'"):
        make_engine([r"abc"], "pcre")


def test_engine_when_the_library_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "_hs", None)
    monkeypatch.setattr(engines, "_re2", None)
    assert available_engines() == ("re",)
    assert hyperscan_errors([r"abc"]) == {}
    with pytest.raises(ValueError, match="hyperscan is not installed"):
        HyperscanEngine([r"abc"])
    assert SignatureDiagnoser().engine == "re"


def test_re_engine_prefilters_on_required_literals() -> None:
    assert required_literals(r"NVRM: Xid \((?P<pci>[0-9a-f]{1,4})\)") == (b"nvrm: xid (",)
    assert required_literals(r"(?:ncclSystemError|socket timed out)") == (
        b"ncclsystemerror",
        b"socket timed out",
    )
    assert required_literals(r"\d{1,3}\.\d") is None
    assert required_literals(r"ab|cdef") is None  # "ab" is too short to filter on
    engine = ReEngine([r"uncorrectable ECC", r"^\d+$"])
    data = b"nothing\n[rank1]: 42\nuncorrectable ECC x\n"
    assert engine.scan(data) == [(1, 19), (0, 39)]


@needs_hyperscan
@pytest.mark.parametrize(
    ("pattern", "expression", "caseless"),
    [
        (r"Xid (?P<xid>79),", rb"Xid (?:79)\x2c", False),
        (r"(?i)link down", rb"link down", True),
        (r"foo(?! bar)", rb"foo", False),  # look-around dropped: a wider match
        (r"foo .{0,300}?bar(?: baz)?$", rb"foo [^\n]*bar", False),  # optional tail cut
        (r"Err \d{1,12}", rb"Err [\x30-\x39]", False),
        (r"x(?:[a-c]\d{0,9}\.){0,8}y", rb"x[\x2e\x30-\x39\x61-\x63]*y", False),  # a cheap run
        (r"^a: .{0,300}?: Input/output error$", rb"\x3a Input\x2foutput error", False),
        (r"a.b", rb"a[^\n]{1,4}b", False),  # one character: one to four UTF-8 bytes
        (r"é", rb"(?:\xc3\xa9)", False),
    ],
)
def test_hyperscan_expression(pattern: str, expression: bytes, caseless: bool) -> None:
    assert hyperscan_expression(pattern) == (expression, caseless)


@needs_hyperscan
def test_anchor_accepts_the_rank_prefix_and_line_breaks() -> None:
    engine = HyperscanEngine([r"^Root"])  # a short literal: the anchor stays
    data = b"Root\n[rank3]:  Root\nx Root\nx\rRoot\n  Root"
    lines = [data.count(b"\n", 0, end) for _, end in engine.scan(data)]
    assert lines == [0, 1, 3, 4]
    prefixed = [b"[rank3] Root", b"rank3:Root", b"[3]: Root", b"3: Root", b"  3:  [default3]: Root"]
    prefixed += [b"3: [default3]:[rank27]: Root", b"x: Root", b"[rank3]Root"]
    data = b"\n".join(prefixed)
    assert [data.count(b"\n", 0, end) for _, end in engine.scan(data)] == [0, 1, 2, 3, 4, 5]
    # A long literal is cheaper to find anywhere than to follow from every line start.
    assert hyperscan_expression(r"^Traceback \(most")[0] == rb"Traceback \x28most"


@needs_hyperscan
def test_pattern_hyperscan_refuses_falls_back_to_every_line() -> None:
    patterns = [r"(?:ab){70000}c", r"launch failure"]
    assert hyperscan_errors(patterns) == {0: "Bounded repeat is too large."}
    engine = HyperscanEngine(patterns)
    assert engine.fallbacks == (0,)
    signatures = [
        replace(YAML[0], id=SignatureId(f"s{i}"), pattern=p) for i, p in enumerate(patterns)
    ]
    diagnoser = SignatureDiagnoser(signatures, engine=engine)
    hits = diagnoser.scan_bytes(b"x\nlaunch failure\n")
    assert [(n, s.id) for n, s, _, _ in hits] == [(2, "s1")]


@needs_hyperscan
def test_chunks_and_threads_give_the_same_hits() -> None:
    patterns = [s.pattern for s in CATALOGUE]
    data = ("\n".join(CORPUS) * 20).encode("utf-8", "surrogatepass")
    expected = sorted(HyperscanEngine(patterns).scan(data))
    assert sorted(HyperscanEngine(patterns, chunk_bytes=64).scan(data)) == expected
    shared = HyperscanEngine(patterns)
    results: list[list[tuple[int, int]]] = []

    def work() -> None:
        for _ in range(5):
            results.append(sorted(shared.scan(data)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 20
    assert all(r == expected for r in results)


@pytest.mark.parametrize(
    ("text", "body", "rank"),
    [
        ("[rank12]: x", "x", 12),
        ("[default3]:\t x", "x", None),  # torchrun --tee: a local rank
        ("  [rank1]: x", "x", 1),
        ("[rank0] step 10 loss 2.3", "step 10 loss 2.3", 0),  # no colon: a blank follows
        ("rank7: x", "x", 7),
        ("[5]: x", "x", 5),  # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${rank}]:"
        ("3: x", "x", 3),  # srun --label
        ("  12: x", "x", 12),
        ("12: [rank12]: x", "x", 12),
        ("3: [default3]: x", "x", None),  # a task and a local rank: no global rank
        ("0: [default0]:[rank8]: x", "x", 8),
        ("[rank0]:[W reducer.cpp:1] x", "[W reducer.cpp:1] x", 0),
        ("[1,13]<stderr>:x", "x", 13),  # Open MPI's mpirun --tag-output
        ("[4]<stdout>: x", "x", 4),  # horovodrun
        ("[1,2]<stdin>:x", "[1,2]<stdin>:x", None),
        ("[gpu-a01.cluster:3]: x", "x", None),  # MPICH -prepend-pattern "[%h:%r]:"
        ("[gpu-a01:3] x", "[gpu-a01:3] x", None),  # no colon after it: not a prefix
        ("[E1128 10:11:35.000211000 ProcessGroupNCCL.cpp:632] x",) * 2 + (None,),
        ("[ProcessGroupNCCL.cpp:632] x",) * 2 + (None,),
        ("[rank١]: x", "[rank١]: x", None),  # ASCII digits only
        ("١: x", "١: x", None),
        ("[rank0]", "[rank0]", None),
        ("[rank0]x", "[rank0]x", None),
        ("[Rank 0] step=1", "[Rank 0] step=1", None),  # DeepSpeed's log_dist, mid-line
        ("[ 1234.567890] NVRM: Xid", "[ 1234.567890] NVRM: Xid", None),  # dmesg
        ("12:34:56 x", "12:34:56 x", None),
        ("2026-01-01 x", "2026-01-01 x", None),
        ("12345678: x", "12345678: x", None),
        ("time 12: x", "time 12: x", None),
        ("ranking: x", "ranking: x", None),
        ("   ", "", None),
        ("", "", None),
    ],
)
def test_strip_rank_prefix(text: str, body: str, rank: int | None) -> None:
    assert strip_rank_prefix(text) == (body, rank)
