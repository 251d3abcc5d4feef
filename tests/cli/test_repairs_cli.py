"""``medic repairs list/show/approve/reject/cancel``: a person decides on repairs from the shell,
audited as them, with the rules the API applies."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from medic.cli.app import app
from medic.domain.audit import AuditKind
from medic.domain.diagnosis import Severity
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import (
    Alert,
    AlertSource,
    RepairAction,
    RepairRequest,
    RepairState,
    RequesterKind,
)
from medic.store import create_store

NOW = datetime(2026, 12, 1, tzinfo=UTC)
SIM = ClusterName("sim")


def _store_with_repairs(tmp_path: Path) -> tuple[str, list[int]]:
    url = f"sqlite:///{tmp_path / 'medic.db'}"
    store = create_store(url)
    ids = []
    for node in ("node003", "node004"):
        store.upsert_alert(
            Alert(
                cluster=SIM,
                node=NodeName(node),
                key="xid:79",
                source=AlertSource.SIGNATURE,
                summary="Xid 79",
                description="-",
                severity=Severity.CRITICAL,
                xid=79,
            ),
            NOW,
        )
        request = RepairRequest(
            cluster=SIM,
            node=NodeName(node),
            action=RepairAction.REBOOT,
            requested_by="nvsentinel",
            requester_kind=RequesterKind.DETECTOR,
            reason="Xid 79",
            alert_keys=("xid:79",),
        )
        repair, _ = store.create_repair(request, state=RepairState.PENDING_APPROVAL, now=NOW)
        ids.append(repair.id)
    store.close()
    return url, ids


def test_a_person_lists_shows_approves_rejects_and_cancels_repairs(tmp_path: Path) -> None:
    url, (first, second) = _store_with_repairs(tmp_path)
    env = {"MEDIC_DATABASE_URL": url, "COLUMNS": "200"}
    runner = CliRunner()

    listed = runner.invoke(
        app, ["repairs", "list", "--state", "pending_approval", "--json"], env=env
    )
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["node"], r["state"]) for r in rows] == [
        (first, "node003", "pending_approval"),
        (second, "node004", "pending_approval"),
    ]
    shown = runner.invoke(app, ["repairs", "show", str(first), "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    (detail,) = json.loads(shown.stdout)
    assert (detail["id"], detail["alert_keys"], detail["validations"]) == (first, ["xid:79"], [])

    approved = runner.invoke(
        app,
        ["repairs", "approve", str(first), "--action", "reset_gpu", "--reason", "GPU only"],
        env=env,
    )
    assert approved.exit_code == 0, approved.output
    assert approved.stdout.strip() == f"repair {first} reset_gpu on node003: now approved"
    again = runner.invoke(app, ["repairs", "approve", str(first), "--action", "reset_gpu"], env=env)
    assert again.exit_code == 0 and "nothing changed" in again.stdout
    # An approved repair can no longer be rejected: refused, with what it is now.
    late = runner.invoke(app, ["repairs", "reject", str(first)], env=env)
    assert late.exit_code == 1
    assert f"cannot reject repair {first}" in late.output and "approved" in late.output

    rejected = runner.invoke(app, ["repairs", "reject", str(second), "--reason", "flaky"], env=env)
    assert rejected.exit_code == 0, rejected.output
    assert rejected.stdout.strip() == f"repair {second} reboot on node004: now rejected"
    still_open = runner.invoke(app, ["repairs", "list", "--open", "--json"], env=env)
    assert [r["id"] for r in json.loads(still_open.stdout)] == [first]
    cancelled = runner.invoke(app, ["repairs", "cancel", str(first)], env=env)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"repair {first} reset_gpu on node003: now cancelled"

    store = create_store(url)
    try:
        (event,) = store.query_audit(kind=AuditKind.REPAIR_APPROVED, limit=10)
        assert event.actor.startswith("user:cli:") and event.payload["previous_action"] == "reboot"
        (event,) = store.query_audit(kind=AuditKind.REPAIR_REJECTED, limit=10)
        assert event.actor.startswith("user:cli:")
    finally:
        store.close()


def test_an_unknown_repair_says_so(tmp_path: Path) -> None:
    url, _ = _store_with_repairs(tmp_path)
    env = {"MEDIC_DATABASE_URL": url}
    for args in (["show", "999"], ["approve", "999"], ["cancel", "999"]):
        result = CliRunner().invoke(app, ["repairs", *args], env=env)
        assert result.exit_code == 1, args
        assert "repair 999 does not exist" in result.output, args
