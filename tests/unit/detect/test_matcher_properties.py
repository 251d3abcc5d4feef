"""SignatureDiagnoser on any input: arbitrary bytes and text, invalid UTF-8, NUL, ``\\r``, lines of
10 MB. It never raises, its answer does not depend on the engine, and attribution copes with
whatever it returns. Also the priority rule, constants and ``scan_bytes``' line numbering."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medic.attribute.blame import attribute
from medic.detect.catalogue import default_catalogue, load_catalogue
from medic.detect.engines import available_engines
from medic.detect.matcher import MAX_TEXT_CHARS, SignatureDiagnoser
from medic.detect.signatures import Signature
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.domain.logs import LogLine, LogStream

CATALOGUE = default_catalogue()

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NODES = tuple(NodeName(f"node{i:03d}") for i in range(4))
JOB = Job(
    id=JobId("42"),
    cluster=ClusterName("sim"),
    name="train",
    state=JobState.FAILED,
    partition="p",
    nodes=NODES,
    num_nodes=4,
)
FIXTURE = load_catalogue(Path(__file__).parent / "fixtures" / "catalogue")
BY_ENGINE = {name: SignatureDiagnoser(CATALOGUE, engine=name) for name in available_engines()}
DIAGNOSER = BY_ENGINE[available_engines()[0]]
MB10 = 10 * 1024 * 1024
FAILURE = "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered"


def _lines(texts: list[str]) -> list[LogLine]:
    return [
        LogLine(LogStream.JOB, text, T0, node=NODES[i % 4], job_id=JOB.id, seq=i)
        for i, text in enumerate(texts)
    ]


def _key(detections: list[Detection]) -> list[object]:
    return [(d.seq, d.signature_id, d.fields, d.text, d.rank, d.node) for d in detections]


def _check(detections: list[Detection]) -> None:
    for detection in detections:
        assert detection.attempt == -1
        assert "\n" not in detection.text and len(detection.text) <= MAX_TEXT_CHARS
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in detection.fields.items())
    attribute(JOB, 0, detections, failed_nodes=frozenset(NODES[:1]), now=T0)


_PIECES = st.sampled_from(
    [
        FAILURE,
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        "[rank0]: KeyError: 'x'",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE,",
        " Timeout(ms)=600000) ran for 600060 milliseconds",
        "[rank1]:",
        "\n",
        "\r",
        "\r\n",
        "\x00",
        "\u2028",
        "\udcff",
        "é",
        " ",
    ]
)
_TEXT = st.one_of(st.text(), st.lists(_PIECES | st.text(max_size=8), max_size=30).map("".join))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TEXT, max_size=8))
def test_scan_any_text_is_total_and_engine_independent(texts: list[str]) -> None:
    lines = _lines(texts)
    results = {name: diagnoser.scan(lines) for name, diagnoser in BY_ENGINE.items()}
    reference = _key(results["re"])
    for detections in results.values():
        _check(detections)
        assert _key(detections) == reference


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000) | _TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_scan_bytes_any_bytes_is_total_and_engine_independent(data: bytes) -> None:
    results = {name: diagnoser.scan_bytes(data) for name, diagnoser in BY_ENGINE.items()}
    reference = [(n, s.id, f, t) for n, s, f, t in results["re"]]
    for hits in results.values():
        assert [(n, s.id, f, t) for n, s, f, t in hits] == reference
        for number, signature, fields, text in hits:
            assert 1 <= number <= data.count(b"\n") + 1
            assert isinstance(signature, Signature) and "\n" not in text
            assert all(isinstance(v, str) for v in fields.values())


@settings(max_examples=100, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=20).map("".join))
def test_scan_and_scan_bytes_agree(text: str) -> None:
    text = text.replace("\udcff", "?")  # a lone surrogate has no UTF-8 form to agree on
    detections = DIAGNOSER.scan(_lines(text.split("\n")))
    hits = DIAGNOSER.scan_bytes(text.encode("utf-8"))
    decoded = [(d.seq + 1, d.signature_id, d.fields) for d in detections]
    assert decoded == [(n, s.id, f) for n, s, f, _ in hits]


def test_ten_megabyte_lines_are_cheap_and_the_head_is_matched() -> None:
    huge = FAILURE + " " + "x" * MB10
    start = time.perf_counter()
    detections = DIAGNOSER.scan(_lines([huge, "é" * MB10, "\x00" * MB10, FAILURE]))
    assert [d.seq for d in detections] == [0, 3]
    _check(detections)
    data = huge.encode() + b"\n" + b"\xff" * MB10 + b"\n" + b"\r" * MB10 + b"\n" + FAILURE.encode()
    hits = DIAGNOSER.scan_bytes(data)
    assert [(n, s.id) for n, s, _, _ in hits] == [
        (1, "cuda.ecc_uncorrectable"),
        (4, "cuda.ecc_uncorrectable"),
    ]
    assert time.perf_counter() - start < 30


def test_scan_bytes_numbers_lines_and_splits_other_breaks() -> None:
    data = (
        b"chatter\r\n"
        b"[rank2]: KeyError: 'a'\r\n"
        b"\xff\xfe\x00 junk\n"
        b"ValueError: x\rRuntimeError: CUDA error: unspecified launch failure\n"
        b"\n"
        b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=\xff, GPU has fallen off the bus."
    )
    hits = DIAGNOSER.scan_bytes(data)
    assert [(n, s.id, t) for n, s, _, t in hits] == [
        (2, "python.exception", "[rank2]: KeyError: 'a'"),
        (4, "python.exception", "ValueError: x"),
        (4, "cuda.launch_failure", "RuntimeError: CUDA error: unspecified launch failure"),
        (6, "xid.fallen_off_bus", hits[-1][3]),
    ]
    assert "name=\ufffd," in hits[-1][3]  # the invalid byte, as decode(errors="replace")
    assert DIAGNOSER.scan_bytes(b"") == []


def _signature(sid: str, pattern: str, priority: int = 0, **extra: object) -> Signature:
    return Signature(
        SignatureId(sid),
        "t",
        FaultDomain.NONE,
        Role.NOISE,
        Severity.INFO,
        False,
        JobAction.NONE,
        pattern,
        "https://example.org",
        priority=priority,
        **extra,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("engine", available_engines())
def test_highest_priority_wins_then_catalogue_order(engine: str) -> None:
    generic = _signature("generic", r"failure", constants=(("code", "x"),))
    specific = _signature("specific", r"launch (?P<message>failure)", priority=5)
    other = _signature("other", r"launch")
    diagnoser = SignatureDiagnoser([generic, other, specific], engine=engine)
    [detection] = diagnoser.scan(_lines(["launch failure"]))
    assert (detection.signature_id, detection.fields) == ("specific", {"message": "failure"})
    diagnoser = SignatureDiagnoser([generic, other], engine=engine)
    [detection] = diagnoser.scan(_lines(["launch failure"]))
    assert (detection.signature_id, detection.fields) == ("generic", {"code": "x"})


def test_engine_instance_or_name_and_an_unknown_name() -> None:
    assert SignatureDiagnoser(CATALOGUE, engine="re").engine == "re"
    with pytest.raises(ValueError, match="unknown engine"):
        SignatureDiagnoser(CATALOGUE, engine="grep")


@pytest.mark.parametrize("engine", available_engines())
def test_yaml_signatures_give_constants_and_attribute(engine: str) -> None:
    diagnoser = SignatureDiagnoser(FIXTURE, engine=engine)
    texts = [
        "[rank0]: successfully saved checkpoint at iteration 9",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus",
        "[rank2]: ValueError: bad shape",
    ]
    detections = diagnoser.scan(_lines(texts))
    assert [(d.signature_id, d.fields) for d in detections] == [
        ("megatron.checkpoint_saved", {"step": "9", "checkpoint": "saved"}),
        ("xid.79", {"pci": "0000:3b:00", "xid": "79"}),
        ("python.exception", {"exception": "ValueError", "message": "bad shape"}),
    ]
    _check(detections)


@pytest.mark.parametrize("engine", available_engines())
def test_lone_surrogates_read_as_replacement_characters(engine: str) -> None:
    diagnoser = SignatureDiagnoser(CATALOGUE, engine=engine)
    [detection] = diagnoser.scan(_lines(["[rank0]: KeyError: '\udcff\udc80'"]))
    assert detection.text == "[rank0]: KeyError: '\ufffd\ufffd'"
    assert detection.fields["message"] == "'\ufffd\ufffd'"
