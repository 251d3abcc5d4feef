"""Text no engine can hold, on every engine: NUL and lone surrogates are stored as U+FFFD.

PostgreSQL refuses NUL in any text (a kernel line holding one failed the whole loop pass, a job
line lost its detection); a lone surrogate (``"\\udfff"`` in an API body) was stored as a JSON
escape and then failed every read that answered it. Same engines as ``test_store.py``; the
schema is migrated once per engine for this module.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from contract.test_store import T0, _detection, _event, _job
from medic.domain.audit import AuditKind
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.repairs import Alert, AlertSource, AlertState
from medic.domain.text import clean_json, clean_json_bytes, clean_text
from medic.store import SqlStore
from medic.store.columns import UtcDateTime

pytestmark = pytest.mark.db

BAD = "a\x00b\udfffc\ud83d"
CLEAN = "a\ufffdb\ufffdc\ufffd"


def _encodes(value: Any) -> None:
    """What an API response does with a value: JSON as UTF-8 (a surrogate raises here)."""
    json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")


# --- the pure rules ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ('"\\udfff"', '"\\ufffd"'),
        ('"\\ud83d"', '"\\ufffd"'),
        ('"\\u0000"', '"\\ufffd"'),
        ('{"k\\uDFFF": ["\\uD800x"]}', '{"k\\ufffd": ["\\ufffdx"]}'),
        ('"\\ud83d\\ude00"', '"\\ud83d\\ude00"'),  # a pair is one character (an emoji): kept
        ('"\\ud83d\\ud83d\\ude00"', '"\\ufffd\\ud83d\\ude00"'),
        ('"\\\\udfff \\\\u0000"', '"\\\\udfff \\\\u0000"'),  # a literal backslash, then text
        ('"\\\\\\udfff"', '"\\\\\\ufffd"'),  # a literal backslash, then an escape
        ('"\\u00e9 plain"', '"\\u00e9 plain"'),
    ],
)
def test_json_text_keeps_valid_escapes_and_replaces_the_rest(raw: str, cleaned: str) -> None:
    assert clean_json(raw) == cleaned
    assert clean_json_bytes(raw.encode()) == cleaned.encode()
    _encodes(json.loads(cleaned))


def test_plain_text_replaces_nul_and_every_surrogate() -> None:
    assert clean_text(BAD + "\U0001f600") == CLEAN + "\U0001f600"
    assert clean_text("plain é") == "plain é"


# --- on every engine ---------------------------------------------------------------------------
def test_log_text_with_nul_and_surrogates_is_stored(store: SqlStore) -> None:
    c = ClusterName("text-logs")
    kernel = _detection(1, job_id=None, rank=None, text=f"NVRM: Xid 79 {BAD}", fields={})
    job_line = _detection(2, text=f"CUDA out of memory {BAD}", fields={"pid": BAD, BAD: "x"})
    store.add_detections(c, [kernel, job_line])  # raised on PostgreSQL (NUL), everywhere (\udfff)
    [stored] = store.list_detections(c, JobId("7"))
    assert stored.text == f"CUDA out of memory {CLEAN}"
    assert stored.fields == {"pid": CLEAN, CLEAN: "x"}
    _encodes(stored.text)


def test_a_job_comment_and_audit_payload_with_nul_are_stored(store: SqlStore) -> None:
    c = ClusterName("text-jobs")
    store.ensure_cluster(c, "sim")
    job = replace(_job("1"), cluster=c, name=BAD, comment=f'{{"owner": "{BAD}"}}')
    store.sync_jobs(c, [job], T0)  # the whole sync (and so the pass) failed on PostgreSQL
    [listed] = store.list_jobs(c)
    assert (listed.name, listed.comment) == (CLEAN, f'{{"owner": "{CLEAN}"}}')
    store.append_audit(_event(1, cluster=c, actor=f"x{BAD}", payload={"line": BAD, BAD: [BAD]}))
    [event] = store.query_audit(cluster=c)
    assert event.actor == f"x{CLEAN}"
    assert event.payload == {"line": CLEAN, CLEAN: [CLEAN]}


def test_alert_evidence_with_a_lone_surrogate_reads_back(store: SqlStore) -> None:
    c = ClusterName("text-alerts")
    store.ensure_cluster(c, "sim")
    alert = Alert(
        cluster=c,
        node=NodeName("n1"),
        key="k",
        source=AlertSource.DETECTOR,
        detector="det",
        summary=BAD,
        description="",
        severity=Severity.WARNING,
        evidence={"x": "\udfff", "nested": {"y\x00": ["\ud800"]}},
        state=AlertState.FIRING,
    )
    store.upsert_alert(alert, T0)
    [stored] = store.list_alerts(cluster=c)
    assert stored.summary == CLEAN
    assert stored.evidence == {"x": "\ufffd", "nested": {"y\ufffd": ["\ufffd"]}}
    _encodes(stored.evidence)


def test_a_document_stored_before_the_rule_reads_clean(store: SqlStore, url: str) -> None:
    """Rows an older medic wrote (the escapes as they were stored) no longer break a read."""
    c = ClusterName("text-old")
    # Plain column types: the JSON text goes in exactly as an older medic wrote it.
    old = sa.table(
        "audit_events",
        *(sa.column(name) for name in ("actor", "kind", "subject_type", "subject_id", "cluster")),
        sa.column("time", UtcDateTime()),
        sa.column("payload", sa.Text()),
    )
    row = {
        "time": T0,
        "actor": "medic",
        "kind": AuditKind.DETECTION.value,
        "subject_type": "job",
        "subject_id": "7",
        "cluster": c,
        "payload": '{"x":"\\udfff","y":"\\u0000"}',
    }
    raw = sa.create_engine(url)
    try:
        with raw.begin() as conn:
            conn.execute(sa.insert(old).values(row))
    finally:
        raw.dispose()
    [event] = store.query_audit(cluster=c)
    assert event.payload == {"x": "\ufffd", "y": "\ufffd"}
    _encodes(event.payload)
