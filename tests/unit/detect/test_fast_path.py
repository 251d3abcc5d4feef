"""The whole-buffer path gives exactly the per-line path's detections.

``scan_bytes`` and ``scan`` hand the engine one buffer (Hyperscan: one call per chunk of about
1 MiB) and map each candidate's end offset back to its line; the per-line path tries every
signature, in rank order, on every physical line of the same input (``match_text``). On input
with matches at line starts and ends, CRLF, other line breaks, empty lines, invalid UTF-8, NUL,
and lines past ``MAX_MATCH_CHARS`` (a match cut off, a ``$`` that holds only at the cut), both
give the same line numbers, signatures, fields, texts and ranks, whatever the engine and the
chunk size.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medic.detect.catalogue import default_catalogue
from medic.detect.engines import Engine, HyperscanEngine, available_engines, make_engine
from medic.detect.hyperscan_rewrite import HS_END, hyperscan_expression
from medic.detect.matcher import MAX_MATCH_CHARS, MAX_TEXT_CHARS, SignatureDiagnoser
from medic.detect.patterns import strip_rank_prefix
from medic.domain.ids import NodeName
from medic.domain.logs import LogLine, LogStream

CATALOGUE = default_catalogue()
PATTERNS = [s.pattern for s in CATALOGUE]
REFERENCE = SignatureDiagnoser(CATALOGUE, engine="re")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NODE = NodeName("node001")
ECC = b"[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered"

MIXED = [
    b"KeyError: 'at the start of the buffer'",
    b"chatter",
    b"",
    b"[rank3]: torch.distributed.DistBackendError",  # the name ends the line: ``$``
    b"RuntimeError: CUDA error: unspecified launch failure\r",  # CRLF
    b"noise\rValueError: x\x0bKeyError",  # three physical lines in one
    b"",
    b"",
    b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=\xff\xfe, GPU has fallen off the bus.",
    b"\xff\x00 junk raise RuntimeError('not at the start')",
    b"[default0]:\tAssertionError",
    ECC + b" " + b"x" * (MAX_MATCH_CHARS + 100),  # long: matched on its head
    b"x" * (MAX_MATCH_CHARS + 100) + b" " + ECC,  # the match lies past the cut: none
    b"short line between two long ones",
    b"x" * (MAX_MATCH_CHARS - 9) + b"\rKeyError" + b"z" * 30,  # the cut ends "KeyError"
    b" " * (MAX_MATCH_CHARS - 8) + b"KeyError" + b"y" * 50,  # body "KeyError", cut just after
    b"[rank7]: " + b"\t" * (MAX_MATCH_CHARS - 18) + b"OSError" + b": " + b"q" * 40,
    "é".encode() * (MAX_MATCH_CHARS - 20) + b"\rKeyError: \xc3\xa9",  # long in bytes only
    b"\xe2\x80\xa8".join([b"x" * 9000, b"ValueError", b"y" * 9000]),  # U+2028 breaks
    b"ValueError",  # the last line, no newline after it
]


def _per_line(data: bytes) -> list[tuple[int, str, dict[str, str], str]]:
    """Every physical line of ``data``, each tried against every signature."""
    found = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        for segment in raw.decode("utf-8", "replace")[:MAX_MATCH_CHARS].splitlines():
            match = REFERENCE.match_text(segment)
            if match is not None:
                found.append((number, match[0].id, match[1], segment[:MAX_TEXT_CHARS]))
    return found


def _engines() -> list[tuple[str, Engine]]:
    built = [(name, make_engine(PATTERNS, name)) for name in available_engines()]
    if "hyperscan" in available_engines():  # a chunk per line or two, lines cut across chunks
        built += [
            (f"hyperscan/{size}", HyperscanEngine(PATTERNS, chunk_bytes=size))
            for size in (1, 64, 20_000)
        ]
    return built


ENGINES = _engines()
DIAGNOSERS = [(name, SignatureDiagnoser(CATALOGUE, engine=engine)) for name, engine in ENGINES]
needs_hyperscan = pytest.mark.skipif(
    "hyperscan" not in available_engines(), reason="hyperscan not installed"
)
END = HS_END.encode()


@pytest.mark.parametrize(("name", "engine"), ENGINES, ids=[n for n, _ in ENGINES])
def test_scan_bytes_equals_the_per_line_path(name: str, engine: Engine) -> None:
    data = b"\n".join(MIXED)
    expected = _per_line(data)
    assert {n for n, *_ in expected} >= {1, 4, 5, 6, 9, 11, 12, 15, 16, 17, 18, 19, 20}
    assert 13 not in {n for n, *_ in expected}
    got = SignatureDiagnoser(CATALOGUE, engine=engine).scan_bytes(data)
    assert [(n, s.id, f, t) for n, s, f, t in got] == expected, name


@pytest.mark.parametrize(("name", "engine"), ENGINES, ids=[n for n, _ in ENGINES])
def test_scan_equals_the_per_line_path(name: str, engine: Engine) -> None:
    texts = [raw.decode("utf-8", "replace") for raw in MIXED]
    lines = [LogLine(LogStream.JOB, t, T0, node=NODE, seq=i + 1) for i, t in enumerate(texts)]
    expected = [
        (n, sid, fields, text, strip_rank_prefix(text)[1])
        for n, sid, fields, text in _per_line("\n".join(texts).encode("utf-8"))
    ]
    diagnoser = SignatureDiagnoser(CATALOGUE, engine=engine)
    # One batch holding line breaks and long lines (each text cut and split first), and each
    # line alone (a plain line's text is the buffer as it is).
    for detections in (diagnoser.scan(lines), [d for x in lines for d in diagnoser.scan([x])]):
        got = [(d.seq, d.signature_id, d.fields, d.text, d.rank) for d in detections]
        assert got == expected, name
        assert all(d.node == NODE and d.time == T0 and d.attempt == -1 for d in detections)


@pytest.mark.parametrize(("name", "engine"), ENGINES, ids=[n for n, _ in ENGINES])
def test_scan_of_plain_lines_is_the_same_in_any_batch(name: str, engine: Engine) -> None:
    texts = [t.decode("utf-8", "replace") for t in MIXED]
    plain = [t for t in texts if t == "".join(t.splitlines()) and len(t) <= MAX_MATCH_CHARS]
    plain += ["[rank5]: KeyError: '\udcff'", "", "[rank1]: ValueError: é €"]
    lines = [
        LogLine(LogStream.JOB, t, T0, node=NODE, rank=None, seq=i) for i, t in enumerate(plain)
    ]
    diagnoser = SignatureDiagnoser(CATALOGUE, engine=engine)
    each = [d for line in lines for d in diagnoser.scan([line])]
    assert len(each) == 7
    assert diagnoser.scan(lines) == each, name  # the surrogate: the whole batch is cut and split
    assert diagnoser.scan(lines[:-3] + lines[-2:]) == [d for d in each if d.seq != len(plain) - 3]
    assert diagnoser.scan([]) == []


_PIECES = st.sampled_from(
    [
        *(b"KeyError", b": ", b"[rank2]: ", b" ", b"\t", b"\r", b"\r\n", b"\n", b"\x0b", b"\xff"),
        *(b"Exception", b"torch.", b"DistBackendError", b"MemoryError", b"x", "é".encode()),
        *(b"GPU reset executed: GPU-00000000-1111", b", success: true", ECC[9:]),
    ]
)
_LINE = st.tuples(
    st.sampled_from([b"", b"x", b" ", "é".encode()]),
    st.integers(MAX_MATCH_CHARS - 48, MAX_MATCH_CHARS + 8) | st.integers(0, 3),
    st.lists(_PIECES, max_size=12).map(b"".join),
).map(lambda t: t[0] * t[1] + t[2])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINE, min_size=1, max_size=6).map(b"\n".join))
def test_any_long_or_short_lines_give_the_per_line_answer(data: bytes) -> None:
    expected = _per_line(data)
    for name, diagnoser in DIAGNOSERS:
        got = diagnoser.scan_bytes(data)
        assert [(n, s.id, f, t) for n, s, f, t in got] == expected, name


@pytest.mark.parametrize(
    ("pattern", "expression"),
    [
        # ``^`` then an optional run: a prefix Hyperscan would follow through the whole buffer,
        # dropped for a literal of four characters or more; ": or the line's end" is kept.
        (
            r"^(?:[A-Za-z_]\w{0,60}\.){0,8}(?P<e>[A-Z]\w{0,60}Error)(?:: ?(?P<m>.{0,300})|$)",
            rb"(?:[\x41-\x5a][\x30-\x39\x41-\x5a\x5f\x61-\x7a]{0,60}Error)(?:\x3a|" + END + b")",
        ),
        # A short optional run of one class stays bounded: a bounded prefix of the literal.
        (
            r"\b(?P<dev>(?:eth|ib)[a-z0-9]{0,30}):? Link is Down",
            rb"\b(?:(?:eth|ib)[\x30-\x39\x61-\x7a]{0,30})\x3a? Link is Down",
        ),
        (r"x(?:a|$)", rb"x(?:a|" + END + b")"),
        (r"x(?:a|b?)", b"x"),  # an alternative cut to nothing that is no line end: cut
    ],
)
def test_hyperscan_expression_keeps_line_ends_and_short_runs(
    pattern: str, expression: bytes
) -> None:
    assert hyperscan_expression(pattern) == (expression, False)


@needs_hyperscan
def test_a_line_too_long_to_show_its_end_is_a_candidate_for_line_end_tests() -> None:
    engine = HyperscanEngine([r"^x(?:a|$)", r"long"])
    long = b"x" * MAX_MATCH_CHARS
    data = b"\n".join([b"xb", long + b"b", b"x", long[2:] + b"b", long, b"xa", long + b"long"])
    lines = sorted({(data.count(b"\n", 0, end - 1), i) for i, end in engine.scan(data)})
    assert lines == [(1, 0), (2, 0), (4, 0), (5, 0), (6, 0), (6, 1)]
    assert HyperscanEngine([r"long"]).scan(long + b"\n" + long) == []
