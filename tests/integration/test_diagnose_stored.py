"""``medic diagnose --job ID [--attempt N]``: rediagnosis of an attempt from the store's evidence
(its detections), beside the verdict the loop recorded; clear errors for an unknown job or
attempt. The command runs through typer's CliRunner against a SQLite store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from medic.cli.common import State
from medic.cli.diagnose import register
from medic.domain.cluster import Job, JobState
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import ClusterName, JobId, NodeName, SignatureId
from medic.store import create_store

T0 = datetime(2026, 3, 14, 10, 0, tzinfo=UTC)
CLUSTER = ClusterName("sim")
NODES = tuple(NodeName(f"node00{i}") for i in range(1, 5))


def _detection(attempt: int, sid: str, node: str, role: Role, **kw: Any) -> Detection:
    return Detection(
        job_id=JobId("42"),
        attempt=attempt,
        signature_id=SignatureId(sid),
        domain=kw.pop("domain", FaultDomain.HARDWARE),
        role=role,
        severity=Severity.ERROR,
        action=kw.pop("action", JobAction.RESTART),
        time=T0 + timedelta(seconds=kw.pop("at", 0)),
        node=NodeName(node),
        **kw,
    )


@pytest.fixture
def cli(tmp_path: Path) -> Any:
    url = f"sqlite:///{tmp_path / 'medic.db'}"
    store = create_store(url)
    store.ensure_cluster(CLUSTER, "sim")
    job = Job(
        JobId("42"), CLUSTER, "gpt", JobState.RUNNING, "gpu", NODES, restart_count=1, num_nodes=4
    )
    store.sync_jobs(CLUSTER, [job], T0)
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
    store.add_detections(
        CLUSTER,
        [
            _detection(
                0,
                "xid.fallen_off_bus",
                "node002",
                Role.ROOT,
                implicates_node=True,
                text=xid,
                fields={"xid": "79", "pci": "0000:3b:00"},
            ),
            _detection(
                0,
                "nccl.watchdog_timeout",
                "node001",
                Role.CASCADE,
                at=30,
                domain=FaultDomain.SYSTEM_SOFTWARE,
                text="Watchdog caught collective operation timeout",
            ),
            _detection(
                1,
                "python.exception",
                "node003",
                Role.ROOT,
                domain=FaultDomain.APPLICATION,
                text="[rank17]: TypeError: forward() got an unexpected keyword argument 'labels'",
                fields={"exception": "TypeError", "message": "forward() got ..."},
                rank=17,
            ),
        ],
    )
    store.add_verdict(
        CLUSTER,
        Verdict(
            JobId("42"),
            0,
            FaultDomain.HARDWARE,
            JobAction.RESTART,
            frozenset({NodeName("node002")}),
            0.9,
            SignatureId("xid.fallen_off_bus"),
            "recorded",
            time=T0,
        ),
    )
    app = typer.Typer()

    @app.callback()
    def _root(ctx: typer.Context) -> None:
        ctx.obj = State(config_path=None, log_level="warning")

    register(app)
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(app, ["diagnose", *args], env={"MEDIC_STORE_URL": url})

    return invoke


def test_rediagnoses_a_stored_attempt_beside_its_recorded_verdict(cli: Any) -> None:
    result = cli("--job", "42", "--attempt", "0", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["domain"], doc["action"], doc["implicated_nodes"]) == (
        "hardware",
        "restart",
        ["node002"],
    )
    assert doc["node_action"] == "reboot"
    assert doc["evidence"][0]["signature"] == "xid.fallen_off_bus"
    assert doc["recorded"]["implicated_nodes"] == ["node002"]


def test_the_latest_attempt_by_default(cli: Any) -> None:
    result = cli("--job", "42", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # One rank's TypeError is a deterministic error (policy.deterministic_errors): stop.
    assert (doc["domain"], doc["action"]) == ("application", "stop")
    assert doc["recorded"] is None


def test_readable_report(cli: Any) -> None:
    result = cli("--job", "42", "--attempt", "0")
    assert result.exit_code == 0, result.output
    assert "node002" in result.stdout and "recorded verdict" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--job", "7"], "no such job"),
        (["--job", "42", "--attempt", "5"], "no attempt 5"),
        ([], "one of them"),
    ],
)
def test_unknown_job_or_attempt_exits_2_with_one_line(
    cli: Any, args: list[str], message: str
) -> None:
    result = cli(*args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert result.stdout == ""
