"""The local real-Slurm cluster (``medic dev slurm``): it starts, runs multi-node GPU jobs, and
shows the behaviours medic's recovery relies on (requeue-hold/exclude/release, node failure,
reboot through RebootProgram, accounting), then stops exactly what it started.

Timings come from ``slurm.conf``: SlurmdTimeout=5, MessageTimeout=3, cred_expire=5,
sched_interval=2. With ``MEDIC_SLURM_RECORD=1`` the outputs are saved as test assets.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from medic.cli import dev as dev_cli
from medic.dev import slurm_host
from medic.dev.slurm import DevClusterError, LocalSlurm, SlurmEnv
from medic.dev.slurm_config import (
    Accounting,
    Layout,
    Ports,
    render_gres_conf,
    render_slurm_conf,
)

from .conftest import (
    Recorder,
    check,
    job,
    job_state,
    node,
    node_state,
    sbatch,
    sinfo_nodes,
    wait_for,
)

FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")


def _snapshot(slurm: SlurmEnv, record: Recorder, what: str, situation: str, ident: str) -> None:
    """Record ``scontrol show <what> <ident>`` (both layouts) for one situation."""
    record(f"scontrol-show-{what}.{situation}.txt", check(slurm, "scontrol", "show", what, ident))
    one_line = check(slurm, "scontrol", "show", what, "-o", ident)
    record(f"scontrol-show-{what}-o.{situation}.txt", one_line)


# ------------------------------------------------------------------ without a cluster
def test_up_refuses_without_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(DevClusterError, match="root"):
        LocalSlurm(tmp_path, nodes=1).up(timeout_s=1)


def test_config_has_the_settings_the_tests_rely_on(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    ports = Ports(slurmctld=20001, slurmdbd=20002, nodes={"node1": 20003, "node2": 20004})
    conf = render_slurm_conf(layout, cluster="medic", controller="h", ports=ports, accounting=True)
    for setting in (
        "SlurmctldHost=h(127.0.0.1)",
        "SlurmctldPort=20001",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "ReturnToService=2",
        "JobRequeue=1",
        f"RebootProgram={tmp_path}/bin/reboot",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStoragePort=20002",
        "NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20004",
    ):
        assert setting in conf
    assert "Gres=gpu:8" in conf
    assert "AutoDetect=off" in render_gres_conf(layout, ["node1", "node2"])
    no_acct = render_slurm_conf(layout, cluster="m", controller="h", ports=ports, accounting=False)
    assert "AccountingStorageType=accounting_storage/none" in no_acct


def test_missing_packages_without_install_or_root(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = {"/nonexistent/slurmctld": "slurm-wlm"}
    monkeypatch.setattr(slurm_host, "_NEEDED", absent)
    with pytest.raises(DevClusterError, match="not installed: slurm-wlm"):
        slurm_host.ensure_packages(accounting=False, install=False, say=print)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(DevClusterError, match="not running as root"):
        slurm_host.ensure_packages(accounting=False, install=True, say=print)


def test_missing_slurmdbd_only_turns_accounting_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_host, "_NEEDED", {})
    monkeypatch.setattr(slurm_host, "_NEEDED_ACCOUNTING", {"/nonexistent/slurmdbd": "slurmdbd"})
    assert slurm_host.ensure_packages(accounting=True, install=False, say=print) is False


def test_too_long_state_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match="too long"):
        LocalSlurm(tmp_path / ("x" * 100), nodes=1)


# ------------------------------------------------------------------ on the session's cluster
def test_up_gives_idle_nodes_with_8_gpus(
    slurm_cluster: LocalSlurm, slurm: SlurmEnv, record: Recorder
) -> None:
    def all_idle() -> str | None:  # other test files share the cluster: let them settle
        text = check(slurm, "sinfo", "--json")
        nodes = json.loads(text)["nodes"]
        return text if all(n["state"] == "idle" and not n["state_flags"] for n in nodes) else None

    raw = wait_for("every node idle", all_idle, timeout=60)
    record("sinfo-json.idle.json", raw)
    nodes = {n["name"]: n for n in json.loads(raw)["nodes"]}
    assert sorted(nodes) == ["node1", "node2"]
    assert all(info["gres"] == "gpu:8" for info in nodes.values())
    _snapshot(slurm, record, "node", "idle", "node1")
    assert slurm.env["SLURM_CONF"] == str(slurm.slurm_conf)
    assert slurm.shared_dir.is_dir()
    assert slurm_cluster.kernel_log("node2").is_file()


def test_two_node_job_runs_8_tasks_per_node(slurm: SlurmEnv) -> None:
    out = slurm.shared_dir / "hostname-%j.out"
    job_id = sbatch(
        slurm, "-N2", "--ntasks-per-node=8", "--gres=gpu:8", f"--output={out}",
        "--wrap", "srun hostname",
    )  # fmt: skip
    info = wait_for(f"job {job_id} to finish", job_state(slurm, job_id, *FINISHED))
    assert info["JobState"] == "COMPLETED", info
    assert info["NodeList"] == "node[1-2]"
    lines = Path(str(out).replace("%j", job_id)).read_text().splitlines()
    assert len(lines) == 16


def test_requeuehold_exclude_release_round_trip(slurm: SlurmEnv, record: Recorder) -> None:
    out = slurm.shared_dir / "requeue-%j.out"
    job_id = sbatch(
        slurm, "-N1", "--open-mode=append", f"--output={out}", "--comment=medic-test",
        "--wrap", 'echo "run=${SLURM_RESTART_COUNT:-0} node=$SLURMD_NODENAME"; sleep 300',
    )  # fmt: skip
    first = wait_for("the job to run", job_state(slurm, job_id, "RUNNING"))["NodeList"]
    other = "node2" if first == "node1" else "node1"
    record("squeue-json.running.json", check(slurm, "squeue", "--json"))
    _snapshot(slurm, record, "job", "running", job_id)

    check(slurm, "scontrol", "requeuehold", job_id)
    held = wait_for("the job to be held", job_state(slurm, job_id, "PENDING"))
    assert held["Restarts"] == "1"
    assert held["Priority"] == "0"
    check(slurm, "scontrol", "update", f"JobId={job_id}", f"ExcNodeList={first}")
    assert job(slurm, job_id)["ExcNodeList"] == first
    record("squeue-json.pending-held.json", check(slurm, "squeue", "--json"))
    _snapshot(slurm, record, "job", "pending-held", job_id)

    check(slurm, "scontrol", "release", job_id)
    again = wait_for("the job to run again", job_state(slurm, job_id, "RUNNING"), timeout=30)
    assert again["NodeList"] == other
    assert again["Restarts"] == "1"
    _snapshot(slurm, record, "job", "requeued-running", job_id)
    log = Path(str(out).replace("%j", job_id))
    wait_for("the second run's output", lambda: f"run=1 node={other}" in log.read_text())
    assert f"run=0 node={first}" in log.read_text()
    check(slurm, "scancel", job_id)


def test_failed_job(slurm: SlurmEnv, record: Recorder) -> None:
    job_id = sbatch(slurm, "-N1", "--output=/dev/null", "--wrap", "exit 3")
    info = wait_for(f"job {job_id} to finish", job_state(slurm, job_id, *FINISHED))
    assert info["JobState"] == "FAILED"
    assert info["ExitCode"] == "3:0"
    record("squeue-json.failed.json", check(slurm, "squeue", "--json"))
    _snapshot(slurm, record, "job", "failed", job_id)


def test_drain_and_resume_a_node(slurm: SlurmEnv, record: Recorder) -> None:
    check(slurm, "scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=medic: test")
    drained = wait_for("node2 drained", node_state(slurm, "node2", lambda s: "DRAIN" in s))
    assert drained["State"] == "IDLE+DRAIN"
    assert drained["Reason"] == "medic:"  # the -o layout: values end at the first space
    _snapshot(slurm, record, "node", "drained", "node2")
    record("sinfo-json.drained.json", check(slurm, "sinfo", "--json"))
    check(slurm, "scontrol", "update", "NodeName=node2", "State=RESUME")
    wait_for("node2 idle", lambda: node(slurm, "node2")["State"] == "IDLE")


def test_killed_slurmd_takes_its_node_and_jobs_down(
    slurm_cluster: LocalSlurm, slurm: SlurmEnv, record: Recorder
) -> None:
    sleep = ["-N1", "-w", "node1", "--output=/dev/null", "--wrap", "sleep 300"]
    no_requeue = sbatch(slurm, "--no-requeue", *sleep)
    requeue = sbatch(slurm, *sleep)
    for job_id in (no_requeue, requeue):
        wait_for(f"job {job_id} to run", job_state(slurm, job_id, "RUNNING"))
    killed = time.monotonic()
    assert slurm_cluster.kill_slurmd("node1", with_jobs=True) is not None
    assert slurm_cluster.slurmd_pid("node1") is None

    wait_for("node1 not responding", node_state(slurm, "node1", lambda s: "NOT_RESPONDING" in s))
    assert time.monotonic() - killed < 5 + 3 * 3  # SlurmdTimeout plus a few MessageTimeouts
    _snapshot(slurm, record, "node", "not-responding", "node1")
    wait_for("node1 down", lambda: node(slurm, "node1")["State"].startswith("DOWN"))
    _snapshot(slurm, record, "node", "down", "node1")
    record("sinfo-json.down.json", check(slurm, "sinfo", "--json"))
    assert sinfo_nodes(slurm)["node1"]["state"] == "down"

    failed = wait_for("NODE_FAIL", job_state(slurm, no_requeue, "NODE_FAIL"))
    assert failed["Restarts"] == "0"
    requeued = wait_for("the requeue", job_state(slurm, requeue, "PENDING"))
    assert requeued["Restarts"] == "1"
    record("squeue-json.node-failure.json", check(slurm, "squeue", "--json"))
    _snapshot(slurm, record, "job", "node-fail", no_requeue)
    _snapshot(slurm, record, "job", "requeued-pending", requeue)

    slurm_cluster.start_slurmd("node1")  # ReturnToService=2: back to service on registration
    wait_for("node1 back", lambda: "DOWN" not in node(slurm, "node1")["State"], timeout=20)
    check(slurm, "scancel", requeue)
    wait_for("node1 idle", lambda: node(slurm, "node1")["State"] == "IDLE", timeout=20)


def test_reboot_asap_goes_through_reboot_program(
    slurm_cluster: LocalSlurm, slurm: SlurmEnv, record: Recorder
) -> None:
    before = slurm_cluster.slurmd_pid("node2")
    check(slurm, "scontrol", "reboot", "ASAP", "nextstate=RESUME", "reason=medic: test", "node2")
    seen = wait_for("the reboot to start", node_state(slurm, "node2", lambda s: "REBOOT" in s))
    _snapshot(slurm, record, "node", "rebooting", "node2")
    assert "DRAIN" in seen["State"]  # ASAP: no new jobs meanwhile

    def back() -> bool:
        pid = slurm_cluster.slurmd_pid("node2")
        return pid not in (None, before) and node(slurm, "node2")["State"] == "IDLE"

    wait_for("node2 to come back from its reboot", back, timeout=30)
    reboot_log = slurm_cluster.state_dir / "log" / "reboot-node2.log"
    assert "reboot of node2 requested" in reboot_log.read_text()


def test_sacct_json_lists_jobs(slurm: SlurmEnv, record: Recorder) -> None:
    if not slurm.accounting:
        pytest.skip("accounting is off on this host (no MariaDB): sacct has nothing")
    job_id = sbatch(slurm, "-N1", "--output=/dev/null", "--comment=medic-sacct", "--wrap", "true")
    wait_for(f"job {job_id} to finish", job_state(slurm, job_id, *FINISHED))

    def accounted() -> dict[str, Any] | None:
        jobs = json.loads(check(slurm, "sacct", "--json", "-j", job_id))["jobs"]
        done = [j for j in jobs if j["state"]["current"] == "COMPLETED"]
        return done[0] if done else None

    row = wait_for("sacct -j to list the job", accounted, timeout=20)
    assert row["comment"]["job"] == "medic-sacct"  # AccountStoreFlags=job_comment

    def listed() -> str | None:  # without -j, sacct lags a few seconds behind
        text = check(slurm, "sacct", "--json", "--duplicates")
        return text if int(job_id) in {j["job_id"] for j in json.loads(text)["jobs"]} else None

    record("sacct-json.all-situations.json", wait_for("sacct to list all jobs", listed))


def test_up_again_is_idempotent(slurm_cluster: LocalSlurm) -> None:
    before = slurm_cluster.status().daemons
    assert all(before.values())
    env = slurm_cluster.up(timeout_s=30)
    assert slurm_cluster.status().daemons == before
    assert env.env["SLURM_CONF"] == str(slurm_cluster.state_dir / "etc" / "slurm.conf")
    with pytest.raises(DevClusterError, match="node count"):
        LocalSlurm(slurm_cluster.state_dir, nodes=3).up(timeout_s=5)


def test_cli_status_json(slurm_cluster: LocalSlurm) -> None:
    app = typer.Typer()
    app.callback()(lambda: None)
    dev_cli.register(app)
    args = ["dev", "slurm", "status", "--json", "--state-dir", str(slurm_cluster.state_dir)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["running"] is True
    assert all(d["up"] for d in data["daemons"].values())
    assert [n["name"] for n in data["nodes"]] == ["node1", "node2"]
    assert data["slurm_conf"].endswith("etc/slurm.conf")
    assert isinstance(data["accounting"], bool)


def test_down_stops_exactly_what_up_started(
    slurm_cluster: LocalSlurm, tmp_path_factory: pytest.TempPathFactory
) -> None:
    session_daemons = slurm_cluster.status().daemons
    closed = slurm_host.free_ports(1)[0]  # nothing listens there: accounting falls back to off
    other = LocalSlurm(tmp_path_factory.mktemp("down"), nodes=1, database=Accounting(port=closed))
    env = other.up(timeout_s=60)
    assert not env.accounting
    assert other.status().accounting_note.startswith(f"off: no MariaDB at 127.0.0.1:{closed}")
    job_id = sbatch(env, "-N1", "--output=/dev/null", "--wrap", "sleep 300")
    wait_for("the job to run", job_state(env, job_id, "RUNNING"))
    started = slurm_host.tagged_pids(other.state_dir)
    assert len(started) >= 4  # munged, slurmctld (+ slurmscriptd), slurmd, slurmstepd, sleep

    other.down()
    assert slurm_host.tagged_pids(other.state_dir) == []
    assert not any(slurm_host.pid_alive(pid) for pid in started)
    assert not other.status().running
    assert slurm_cluster.status().daemons == session_daemons  # the other cluster is untouched
    other.down(purge=True)  # nothing left to stop; removes the files
    assert not (other.state_dir / "cluster.json").exists()
