"""``medic alerts list`` and ``medic alerts resolve``: a person clears an alert from the shell."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from medic.cli.app import app
from medic.domain.audit import AuditKind
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import Alert, AlertSource, AlertState
from medic.store import create_store

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _store_with_an_alert(tmp_path: Path) -> tuple[str, int]:
    url = f"sqlite:///{tmp_path / 'medic.db'}"
    store = create_store(url)
    alert = Alert(
        cluster=ClusterName("sim"),
        node=NodeName("node003"),
        key="xid:79",
        source=AlertSource.SIGNATURE,
        summary="Xid 79 GPU_HAS_FALLEN_OFF_THE_BUS",
        description="-",
        severity=Severity.CRITICAL,
        xid=79,
    )
    stored = store.upsert_alert(alert, NOW)
    assert stored.id is not None
    return url, stored.id


def test_a_person_lists_and_resolves_an_alert_audited_as_them(tmp_path: Path) -> None:
    url, alert_id = _store_with_an_alert(tmp_path)
    env = {"MEDIC_DATABASE_URL": url, "COLUMNS": "200"}
    runner = CliRunner()

    listed = runner.invoke(app, ["alerts", "list", "--state", "firing", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    assert [(a["id"], a["key"], a["state"]) for a in json.loads(listed.stdout)] == [
        (alert_id, "xid:79", "firing")
    ]

    done = runner.invoke(
        app, ["alerts", "resolve", str(alert_id), "--reason", "GPU reseated"], env=env
    )
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"alert {alert_id} xid:79 on node003: resolved"
    again = runner.invoke(app, ["alerts", "resolve", str(alert_id)], env=env)
    assert again.exit_code == 0 and "nothing changed" in again.stdout

    store = create_store(url)
    assert store.get_alert(alert_id) is not None
    assert store.get_alert(alert_id).state is AlertState.RESOLVED  # type: ignore[union-attr]
    (event,) = store.query_audit(kind=AuditKind.ALERT_RESOLVED, limit=10)
    assert event.actor.startswith("cli:") and event.subject_id == "node003"
    assert event.payload["why"] == f"resolved by {event.actor}: GPU reseated"


def test_resolving_an_unknown_alert_says_so(tmp_path: Path) -> None:
    url, _ = _store_with_an_alert(tmp_path)
    result = CliRunner().invoke(app, ["alerts", "resolve", "999"], env={"MEDIC_DATABASE_URL": url})
    assert result.exit_code == 1
    assert "alert 999 does not exist" in result.output
