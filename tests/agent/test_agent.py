"""The agent's loop and ``medic agent`` end to end: checks that raise, a kernel log that cannot be
read, a real Xid line in a followed file reaching the API, ``--once --json``, and a running
agent process stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from medic.agent import Agent, AlertSender, FileFollower, KernelClassifier, KmsgFollower
from medic.agent.checks import CheckResult, CheckStatus
from medic.cli import agent as agent_cli
from medic.detect import default_catalogue

from .conftest import CLUSTER, Api
from .test_kernel import XID_79

CATALOGUE = default_catalogue()

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    agent_cli.register(app)
    return app


def _ib_down(root: Path) -> Path:
    port = root / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("3: Disabled\n")
    (port / "counters" / "link_downed").write_text("0\n")
    return root


class _Broken:
    name = "broken"
    keys = ("agent:broken",)

    def run(self) -> list[CheckResult]:
        raise OSError("no such sensor")


class _Steady:
    name = "steady"
    keys = ("agent:steady",)

    def __init__(self) -> None:
        self.runs = 0

    def run(self) -> list[CheckResult]:
        self.runs += 1
        return [CheckResult("agent:steady", CheckStatus.OK, "fine")]


def test_once_survives_a_check_that_raises() -> None:
    reported: list[list[CheckResult]] = []
    results = Agent([_Broken(), _Steady()], on_results=reported.append).once()

    assert [(r.key, r.status) for r in results] == [
        ("agent:broken", CheckStatus.ERROR),
        ("agent:steady", CheckStatus.OK),
    ]
    assert reported == [results]


def test_an_unreadable_kernel_log_does_not_stop_the_agent(tmp_path: Path) -> None:
    agent = Agent(
        [_Steady()],
        kernel=KmsgFollower(str(tmp_path / "no-kmsg")),
        classifier=KernelClassifier("n1", CATALOGUE),
    )
    assert agent.poll_kernel() == [] and agent.poll_kernel() == []
    assert agent.kernel_errors == 2


def test_the_loop_sends_kernel_events_and_stops(api: Api, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    steady = _Steady()
    sender = AlertSender(
        api.url,
        cluster=CLUSTER,
        node="n1",
        detector="agent:n1",
        token=api.tokens["agent"],
        spool=tmp_path / "spool.jsonl",
    )
    agent = Agent(
        [steady],
        kernel=FileFollower(str(log)),
        classifier=KernelClassifier("n1", CATALOGUE),
        sender=sender,
        interval=60,
        kernel_poll=0.02,
    )
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,))
    thread.start()
    try:
        log.write_text(XID_79 + "\n")
        deadline = time.monotonic() + 10
        while not api.alerts() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(5)
        agent.close()

    assert not thread.is_alive()
    [alert] = api.alerts()
    assert (alert["key"], alert["xid"], alert["source"]) == ("xid:79", 79, "agent")
    assert alert["evidence"]["pci"] == "0000:18:00"
    assert steady.runs == 1, "checks run once per interval"


def test_agent_needs_a_kernel_classifier_with_a_kernel_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="classifier"):
        Agent([], kernel=FileFollower(str(tmp_path / "x")))


# --- the CLI -------------------------------------------------------------------------------------
def _invoke(*args: str) -> Any:
    return CliRunner().invoke(_app(), ["agent", *args], catch_exceptions=False)


def test_once_json_prints_every_check_without_an_api(tmp_path: Path) -> None:
    result = _invoke("--once", "--json", "--fs", str(tmp_path), "--ib-root", str(tmp_path / "ib"))

    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    statuses = {f["key"]: f["status"] for f in body["findings"]}
    assert statuses["agent:fs_readonly"] == statuses["agent:fs_full"] == "ok"
    assert statuses["agent:ib_port_down"] == "not_present"
    assert statuses["agent:ecc_dbe"] == "not_present", "no GPU on this machine"
    assert body["detector"].startswith("agent:") and body["cluster"] is None


def test_once_exits_1_and_posts_when_a_check_fails(api: Api, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(api.tokens["agent"] + "\n")
    result = _invoke(
        "--once",
        "--api", api.url,
        "--cluster", CLUSTER,
        "--node", "gpu-node-017",
        "--detector", "agent:gpu-node-017",
        "--token-file", str(token_file),
        "--fs", str(tmp_path),
        "--ib-root", str(_ib_down(tmp_path / "ib")),
        "--spool", str(tmp_path / "spool.jsonl"),
    )  # fmt: skip

    assert result.exit_code == 1
    assert "failing        agent:ib_port_down" in result.output
    [alert] = api.alerts(node="gpu-node-017")
    assert (alert["key"], alert["state"], alert["severity"]) == (
        "agent:ib_port_down",
        "firing",
        "error",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--api", "http://x"], "--cluster"),
        ([], "--api"),
        (["--once", "--node", "bad node"], "--node"),
        (["--api", "http://x", "--cluster", "c", "--kernel", "syslog"], "--kernel"),
        (["--api", "http://x", "--cluster", "c", "--kernel", "none"], "--token"),
        (["--api", "http://x", "--cluster", "c", "--token", " "], "--token"),
        (["--api", "http://x", "--cluster", "c", "--token-file", "/nonexistent"], "--token-file"),
    ],
)
def test_bad_options(args: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIC_TOKEN", raising=False)
    result = CliRunner().invoke(_app(), ["agent", *args])

    assert result.exit_code == 2 and message in result.output


def test_a_running_agent_posts_kernel_xids_and_stops_on_sigterm(api: Api, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    command = [
        sys.executable, "-m", "medic.agent",
        "--api", api.url, "--cluster", CLUSTER, "--node", "gpu-node-017",
        "--kernel", f"file:{log}", "--interval", "60",
        "--fs", str(tmp_path), "--ib-root", str(tmp_path / "ib"),
        "--spool", str(tmp_path / "spool.jsonl"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": SRC, "MEDIC_TOKEN": api.tokens["agent"]}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not api.alerts() and time.monotonic() < deadline:
            with log.open("a") as fh:  # the agent opens the log at its end: keep writing
                fh.write(XID_79 + "\n")
            time.sleep(0.3)
        alerts = api.alerts()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _, stderr = proc.communicate()

    assert alerts and alerts[0]["key"] == "xid:79", stderr.decode()[-2000:]
    assert code == 0, stderr.decode()[-2000:]


def test_python_m_medic_agent_checks_its_options() -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-m", "medic.agent", "--api", "http://medic:8765"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2 and "--cluster: required with --api" in done.stderr
