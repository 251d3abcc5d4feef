"""The ``medic`` command line: read commands over a populated store, configuration errors and
exit codes, ``config show`` and the headless demo.

In-process runs use Typer's CliRunner on ``medic.cli.app.app``; exit codes that ``main()`` decides
(configuration errors raised outside a command's own handling) and the real-time demo run in a
subprocess through ``python -m medic``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner, Result

import medic
from medic.cli.app import app
from medic.config.loading import load_settings
from medic.config.settings import Settings
from medic.domain.cluster import JobSpec
from medic.domain.faults import FaultKind
from medic.services import Services
from medic.store import create_store
from medic.store.engine import schema_revisions, upgrade_schema
from medic.testing import FakeClock
from medic.wiring import build

OBSERVE_COMMENT = json.dumps({"medic": {"mode": "observe"}})
WIDE = {"COLUMNS": "250"}  # rich tables: no truncated cells
SUBPROCESS_TIMEOUT = 60


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No MEDIC_* variable of the developer's shell leaks in; logging is restored afterwards
    (the CLI installs a root handler on the runner's temporary stderr)."""
    for name in list(os.environ):
        if name.startswith("MEDIC_"):
            monkeypatch.delenv(name)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


# --- a populated store ----------------------------------------------------------------------


@dataclass(frozen=True)
class Populated:
    url: str
    faulty_node: str
    """The node whose GPU fell off the bus in job 1 of cluster ``sim``."""
    observed_job: str
    """A job of cluster ``sim`` in observe mode, with pending advice."""
    observed_node: str
    """The node whose GPU fell off the bus in the observed job (a critical alert firing)."""

    def env(self, **extra: str) -> dict[str, str]:
        return {"MEDIC_DATABASE_URL": self.url, **WIDE, **extra}


def _settings(url: str, cluster: str) -> Any:
    return load_settings(
        env={},
        overrides={
            "store.url": url,
            "scheduler.mode": "act",
            "scheduler.cluster": cluster,
            "sim.nodes": 8,
            "sim.jobs": 2,
            "sim.nodes_per_job": 2,
        },
    )


def _passes(services: Services, clock: FakeClock, count: int) -> None:
    for _ in range(count):
        clock.advance(0.5)
        services.loop.run_once()


def _run_cluster(url: str, cluster: str, start: datetime, observe: bool) -> tuple[str, str, str]:
    """A short act-mode run where job 1 loses a GPU; returns (faulty node, observed job id, the
    observed job's faulty node)."""
    clock = FakeClock(start)
    services = build(_settings(url, cluster), clock=clock, start_workload=True)
    try:
        assert services.injector is not None and services.workload is not None
        observed = observed_node = ""
        if observe:
            observed = services.workload.submit(
                JobSpec(name="observed", num_nodes=2, partition="p1", comment=OBSERVE_COMMENT)
            )
        _passes(services, clock, 20)
        fault = services.injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id="1")
        if observe:
            second = services.injector.inject(FaultKind.GPU_FELL_OFF_BUS, job_id=observed)
            observed_node = second.node or ""
        _passes(services, clock, 6)
        assert fault.node is not None
        return fault.node, observed, observed_node
    finally:
        services.close()


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Populated:
    """Cluster ``old`` failed three days ago; cluster ``sim`` failed an hour ago, and has a job in
    observe mode. Both clusters have jobs 1 and 2."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'medic.db'}"
    now = datetime.now(UTC)
    _run_cluster(url, "old", now - timedelta(days=3), observe=False)
    node, observed, observed_node = _run_cluster(url, "sim", now - timedelta(hours=1), True)
    return Populated(url, faulty_node=node, observed_job=observed, observed_node=observed_node)


def invoke(args: list[str], env: Mapping[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, args, env=dict(env or {}))


def invoke_json(args: list[str], env: Mapping[str, str]) -> Any:
    result = invoke([*args, "--json"], env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIC_")}
    env.update(
        {
            "MEDIC_DATABASE_URL": f"sqlite:///{tmp_path / 'medic.db'}",
            "TMPDIR": str(tmp_path),
            "COLUMNS": "250",
            **extra,
        }
    )
    return env


def run_medic(args: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "medic", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )


# --- version and help -----------------------------------------------------------------------


def test_version_prints_the_package_version() -> None:
    result = invoke(["version"])

    assert result.exit_code == 0
    assert result.stdout == f"{medic.__version__}\n"


def test_no_arguments_shows_the_commands() -> None:
    result = invoke([])

    assert "Usage" in result.output
    for command in ("serve", "demo", "jobs", "nodes", "advice", "audit", "config", "version"):
        assert command in result.output


# --- read commands --------------------------------------------------------------------------


def test_jobs_json_lists_every_job_with_its_advice(populated: Populated) -> None:
    rows = invoke_json(["jobs"], populated.env())

    by_key = {(r["cluster"], r["id"]): r for r in rows}
    assert set(by_key) == {
        ("old", "1"),
        ("old", "2"),
        ("sim", "1"),
        ("sim", "2"),
        ("sim", populated.observed_job),
    }
    recovered = by_key["sim", "1"]
    assert recovered["restart_count"] == 1
    # the observed job's faulty node has a critical alert firing: kept out of placement too
    assert recovered["excluded_nodes"] == sorted([populated.faulty_node, populated.observed_node])
    assert recovered["advice"]["action"] == "requeue"
    assert (recovered["advice_action"], recovered["advice_status"]) == ("requeue", "converged")
    observed = by_key["sim", populated.observed_job]
    assert (observed["advice_action"], observed["advice_status"]) == ("requeue", "pending")
    assert by_key["sim", "2"]["advice"] is None
    assert by_key["sim", "2"]["advice_action"] is None


def test_jobs_json_has_the_api_fields(populated: Populated) -> None:
    from medic.api.schemas import (
        JobOut,
    )

    rows = invoke_json(["jobs"], populated.env())

    for row in rows:
        assert set(row) == set(JobOut.model_fields) | {"advice_action", "advice_status"}


def test_jobs_cluster_option_filters(populated: Populated) -> None:
    rows = invoke_json(["jobs", "--cluster", "old"], populated.env())

    assert {r["cluster"] for r in rows} == {"old"}
    assert {r["id"] for r in rows} == {"1", "2"}


def test_jobs_table_shows_jobs_and_advice(populated: Populated) -> None:
    result = invoke(["jobs"], populated.env())

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Jobs" in out
    for text in ("train-001", "train-002", "observed", "requeue", "converged", "pending"):
        assert text in out
    assert populated.faulty_node in out
    assert not out.lstrip().startswith("[")


def test_nodes_json_defaults_to_the_configured_cluster(populated: Populated) -> None:
    rows = invoke_json(["nodes"], populated.env())

    assert [r["name"] for r in rows] == [f"node{i:03d}" for i in range(1, 9)]
    assert {r["cluster"] for r in rows} == {"sim"}
    assert all(r["gpus"] == 8 for r in rows)

    old = invoke_json(["nodes", "--cluster", "old"], populated.env())
    assert len(old) == 8 and {r["cluster"] for r in old} == {"old"}
    named = invoke_json(["nodes"], populated.env(MEDIC_SCHEDULER_CLUSTER="old"))
    assert named == old


def test_nodes_table(populated: Populated) -> None:
    result = invoke(["nodes"], populated.env())

    assert result.exit_code == 0, result.output
    assert "Nodes" in result.stdout
    assert "node008" in result.stdout
    assert "allocated" in result.stdout


def test_advice_json_all_versus_active(populated: Populated) -> None:
    everything = invoke_json(["advice"], populated.env())
    active = invoke_json(["advice", "--active"], populated.env())

    assert {(a["cluster"], a["job_id"]) for a in everything} == {
        ("old", "1"),
        ("sim", "1"),
        ("sim", populated.observed_job),
    }
    assert [(a["cluster"], a["job_id"]) for a in active] == [("sim", populated.observed_job)]
    assert active[0]["status"] == "pending" and active[0]["active"] is True
    only_old = invoke_json(["advice", "--cluster", "old"], populated.env())
    assert [(a["cluster"], a["job_id"]) for a in only_old] == [("old", "1")]


def test_advice_table(populated: Populated) -> None:
    result = invoke(["advice", "--active"], populated.env())

    assert result.exit_code == 0, result.output
    assert "Advice" in result.stdout
    assert "pending" in result.stdout
    assert "converged" not in result.stdout


def test_audit_json_lists_the_trail_oldest_first(populated: Populated) -> None:
    events = invoke_json(["audit"], populated.env())

    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {e["cluster"] for e in events} == {"old", "sim"}
    assert {"detection", "verdict", "advice", "action-succeeded", "reconciliation"} <= {
        e["kind"] for e in events
    }


def test_audit_job_and_since_filters(populated: Populated) -> None:
    everything = invoke_json(["audit", "--limit", "100000"], populated.env())
    job_1 = invoke_json(["audit", "--job", "1"], populated.env())
    recent = invoke_json(["audit", "--job", "1", "--since", "1d"], populated.env())

    assert job_1 == [e for e in everything if e["subject_id"] == "1"]
    assert {e["cluster"] for e in job_1} == {"old", "sim"}
    assert recent == [e for e in job_1 if e["cluster"] == "sim"]
    assert recent
    day_ago = datetime.now(UTC) - timedelta(days=1)
    assert all(datetime.fromisoformat(e["time"]) >= day_ago for e in recent)


def test_audit_since_accepts_an_iso_time(populated: Populated) -> None:
    two_days_ago = (datetime.now(UTC) - timedelta(days=2)).replace(tzinfo=None)

    naive = invoke_json(["audit", "--since", two_days_ago.isoformat()], populated.env())
    with_z = invoke_json(["audit", "--since", two_days_ago.isoformat() + "Z"], populated.env())

    assert naive == with_z  # no offset means UTC
    assert naive and {e["cluster"] for e in naive} == {"sim"}


def test_audit_kind_cluster_and_limit(populated: Populated) -> None:
    advice = invoke_json(["audit", "--kind", "advice"], populated.env())
    assert [(e["cluster"], e["subject_id"]) for e in advice] == [
        ("old", "1"),
        ("sim", "1"),
        ("sim", populated.observed_job),
    ]
    old = invoke_json(["audit", "--cluster", "old"], populated.env())
    assert old and {e["cluster"] for e in old} == {"old"}
    first_two = invoke_json(["audit", "--limit", "2"], populated.env())
    assert first_two == invoke_json(["audit"], populated.env())[:2]


def test_audit_table(populated: Populated) -> None:
    result = invoke(["audit", "--job", "1", "--kind", "verdict"], populated.env())

    assert result.exit_code == 0, result.output
    assert "Audit trail" in result.stdout
    assert "xid.fallen_off_bus" in result.stdout
    assert "hardware" in result.stdout


@pytest.mark.parametrize("since", ["garbage", "1w", "-5m", "yesterday"])
def test_audit_bad_since_is_a_usage_error(populated: Populated, since: str) -> None:
    result = invoke(["audit", "--since", since], populated.env())

    assert result.exit_code == 2
    assert since in result.stderr
    assert "30m" in result.stderr  # says what is accepted
    assert result.stdout == ""


def test_audit_unknown_kind_is_a_usage_error(populated: Populated) -> None:
    result = invoke(["audit", "--kind", "nope"], populated.env())

    assert result.exit_code == 2
    assert "nope" in result.stderr


def test_read_commands_on_an_empty_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    create_store(url).close()  # medic's schema, nothing in it
    env = {"MEDIC_DATABASE_URL": url}

    for command in ("jobs", "nodes", "advice", "audit"):
        assert invoke_json([command], env) == [], command


def test_read_commands_never_create_or_migrate_a_database(tmp_path: Path) -> None:
    """A command that only reads changes nothing: no database file appears, an older schema is
    not upgraded; one line says what to do, exit code 2."""
    missing = tmp_path / "none.db"
    proc = run_medic(["jobs"], _subprocess_env(tmp_path, MEDIC_DATABASE_URL=f"sqlite:///{missing}"))
    assert proc.returncode == 2 and not missing.exists()
    assert proc.stderr.count("\n") == 1 and f"no database at {missing}" in proc.stderr
    old = tmp_path / "old.db"
    engine = sa.create_engine(f"sqlite:///{old}")
    upgrade_schema(engine, "0007")
    engine.dispose()
    proc = run_medic(["nodes"], _subprocess_env(tmp_path, MEDIC_DATABASE_URL=f"sqlite:///{old}"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is at revision 0007, medic needs 0009" in proc.stderr
    engine = sa.create_engine(f"sqlite:///{old}")
    assert schema_revisions(engine)[0] == "0007"
    engine.dispose()


def test_a_database_that_cannot_be_reached_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = "postgresql+psycopg://medic:secret@127.0.0.1:1/medic"  # nothing listens on port 1
    proc = run_medic(["jobs"], _subprocess_env(tmp_path, MEDIC_DATABASE_URL=url))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "127.0.0.1:1" in proc.stderr and "secret" not in proc.stderr


# --- configuration errors -------------------------------------------------------------------


def test_bad_setting_in_the_environment_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = run_medic(["jobs"], _subprocess_env(tmp_path, MEDIC_LOOP_INTERVAL_SECONDS="fast"))

    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n")
    assert "loop.interval_seconds" in proc.stderr
    assert "MEDIC_LOOP_INTERVAL_SECONDS" in proc.stderr and '"fast"' in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_error_outside_a_command_is_turned_into_exit_2_by_main(tmp_path: Path) -> None:
    # The log level is checked when the command configures logging, outside settings_of's own
    # ConfigError handling: main() must turn it into exit code 2 and one line.
    proc = run_medic(["--log-level", "loud", "jobs"], _subprocess_env(tmp_path))

    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "log level" in proc.stderr and "loud" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_setting_in_process_exits_2_naming_the_setting() -> None:
    result = invoke(["nodes"], {"MEDIC_API_PORT": "70000"})

    assert result.exit_code == 2
    assert "api.port" in result.stderr
    assert "65535" in result.stderr


def test_unknown_key_in_the_config_file_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "medic.yaml"
    config.write_text("loop:\n  interval_secs: 1\n", encoding="utf-8")

    for command in (["jobs"], ["config", "show"]):
        result = invoke(["--config", str(config), *command])

        assert result.exit_code == 2, command
        assert "interval_secs" in result.stderr
        assert "interval_seconds" in result.stderr  # the suggestion
        assert str(config) in result.stderr
        assert result.stderr.count("\n") == 1


def test_unknown_section_in_the_config_file_named_by_medic_config(tmp_path: Path) -> None:
    config = tmp_path / "medic.yaml"
    config.write_text("schedular:\n  mode: act\n", encoding="utf-8")

    result = invoke(["jobs"], {"MEDIC_CONFIG": str(config)})

    assert result.exit_code == 2
    assert "schedular" in result.stderr


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    result = invoke(["--config", str(missing), "jobs"])

    assert result.exit_code == 2
    assert str(missing) in result.stderr and "not found" in result.stderr


def test_main_turns_a_config_error_from_wiring_into_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # build() rejects the scheduler kind after the command has loaded its settings.
    from medic.cli import main

    monkeypatch.setenv("MEDIC_DATABASE_URL", f"sqlite:///{tmp_path / 'medic.db'}")
    monkeypatch.setenv("MEDIC_SCHEDULER_KIND", "kubernetes")
    monkeypatch.setattr(sys, "argv", ["medic", "serve"])

    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "scheduler.kind" in err and "kubernetes" in err
    assert "sim" in err and "slurm" in err  # the message lists what is available


def test_main_exits_0_on_success(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from medic.cli import main

    monkeypatch.setattr(sys, "argv", ["medic", "version"])

    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code in (0, None)
    assert capsys.readouterr().out == f"{medic.__version__}\n"


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--port", "0"],
        ["serve", "--port", "65536"],
        ["demo", "--fault-every", "0.1", "--duration", "1"],
        ["demo", "--duration", "0"],
        ["audit", "--limit", "0"],
    ],
)
def test_out_of_range_options_are_usage_errors(args: list[str]) -> None:
    result = invoke(args)

    assert result.exit_code == 2
    assert "Invalid value" in result.stderr


# --- config show ----------------------------------------------------------------------------


def _setting_names(obj: object, prefix: str = "") -> list[str]:
    """Dotted names of every leaf setting, in declaration order."""
    names: list[str] = []
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            names += _setting_names(value, f"{prefix}{f.name}.")
        else:
            names.append(f"{prefix}{f.name}")
    return names


def test_config_show_json_lists_every_setting_with_its_source(tmp_path: Path) -> None:
    config = tmp_path / "medic.yaml"
    config.write_text("sim:\n  nodes: 16\napi:\n  port: 9000\n", encoding="utf-8")
    env = {
        "MEDIC_DATABASE_URL": "postgresql+psycopg://alice:s3cret@db.example:5432/medic",
        "MEDIC_API_PORT": "9100",
    }

    result = invoke(["--config", str(config), "config", "show", "--json"], env)

    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output
    rows = json.loads(result.stdout)
    assert [r["setting"] for r in rows] == _setting_names(Settings())
    by_name = {r["setting"]: r for r in rows}
    assert by_name["store.url"] == {
        "setting": "store.url",
        "value": "postgresql+psycopg://alice:***@db.example:5432/medic",
        "source": "MEDIC_DATABASE_URL",
    }
    assert (by_name["sim.nodes"]["value"], by_name["sim.nodes"]["source"]) == (16, str(config))
    assert (by_name["api.port"]["value"], by_name["api.port"]["source"]) == (9100, "MEDIC_API_PORT")
    assert (by_name["scheduler.mode"]["value"], by_name["scheduler.mode"]["source"]) == (
        "observe",
        "default",
    )
    assert all(r["source"] for r in rows)


def test_config_show_table_masks_the_password_too() -> None:
    env = {"MEDIC_STORE_URL": "mysql+pymysql://bob:hunter2@db/medic", **WIDE}

    result = invoke(["config", "show"], env)

    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output
    assert "bob:***@db" in result.stdout
    assert "MEDIC_STORE_URL" in result.stdout


def test_config_reference_prints_markdown() -> None:
    result = invoke(["config", "reference"])

    assert result.exit_code == 0
    assert result.stdout.startswith("# Configuration reference")
    assert "MEDIC_LOOP_INTERVAL_SECONDS" in result.stdout


# --- demo -----------------------------------------------------------------------------------


def test_demo_json_without_duration_is_a_usage_error() -> None:
    result = invoke(["demo", "--json"])

    assert result.exit_code == 2
    assert "--duration" in result.stderr


@pytest.mark.slow
def test_demo_headless_prints_one_json_summary(tmp_path: Path) -> None:
    proc = run_medic(
        ["demo", "--duration", "6", "--json", "--fault-every", "1"], _subprocess_env(tmp_path)
    )

    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    summary = json.loads(lines[-1])
    assert set(summary) == {
        "faults_injected",
        "detected",
        "recovered",
        "stopped",
        "detection_latency_p50_s",
        "action_latency_p50_s",
    }
    assert summary["faults_injected"] >= 3
    assert 1 <= summary["detected"] <= summary["faults_injected"]
    assert summary["recovered"] + summary["stopped"] <= summary["faults_injected"]
    assert summary["detection_latency_p50_s"] is not None
    assert summary["detection_latency_p50_s"] >= 0


def test_watchdog_once_runs_with_no_database_reachable(tmp_path: Path) -> None:
    # No database at all: the watchdog reads the scheduler only (here the simulator, whose jobs
    # medic never held, so there is nothing to release).
    env = _subprocess_env(tmp_path, MEDIC_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:1/x")
    state = tmp_path / "dog"
    proc = run_medic(["watchdog", "--once", "--mode", "act", "--state-dir", str(state)], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "released 0 job(s): -"
    assert not (tmp_path / "medic.db").exists()
