"""Runners: local subprocesses and ssh (through a stand-in ``ssh`` that runs the remote command
with ``sh -c``, as sshd would), with failures mapped at the boundary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from medic.config.settings import SlurmRunner, SlurmSettings
from medic.errors import ConfigError, TransientError, UnauthorizedError
from medic.schedulers.slurm.runner import LocalRunner, SshRunner, runner_from_settings

PRINT_ENV = [
    sys.executable,
    "-c",
    "import os; e = os.environ; "
    "print(e.get('SLURM_CONF'), e.get('SLURM_JOB_ID'), e.get('SLURM_TIME_FORMAT'))",
]


def test_local_runner_passes_slurm_conf_and_drops_inherited_slurm_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_CONF", "/etc/inherited.conf")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    result = LocalRunner({"SLURM_CONF": "/etc/x.conf"}).run(PRINT_ENV, timeout=10)
    assert result.returncode == 0
    assert result.stdout.split() == ["/etc/x.conf", "None", "standard"]
    inherited = LocalRunner().run(PRINT_ENV, timeout=10)
    assert inherited.stdout.split() == ["/etc/inherited.conf", "None", "standard"]


def test_local_runner_returns_failures_and_replaces_bad_bytes() -> None:
    code = "import sys; sys.stderr.buffer.write(b'bad \\xff'); sys.exit(3)"
    result = LocalRunner().run([sys.executable, "-c", code], timeout=10)
    assert result.returncode == 3 and result.stderr == "bad \ufffd"


def test_missing_binary_is_transient() -> None:
    with pytest.raises(TransientError, match="not found"):
        LocalRunner().run(["/nonexistent/scontrol", "ping"], timeout=5)


def test_timeout_is_transient() -> None:
    with pytest.raises(TransientError, match="did not finish"):
        LocalRunner().run([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.3)


def fake_ssh(tmp_path: Path, *, exit_code: int | None = None, stderr: str = "") -> str:
    """An ``ssh`` that records its argv, then runs the remote command line like sshd would."""
    script = tmp_path / "ssh"
    record = tmp_path / "argv.json"
    body = f"import json, subprocess, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
    if exit_code is not None:
        body += f"sys.stderr.write({stderr!r}); sys.exit({exit_code})\n"
    else:
        body += "sys.exit(subprocess.run(['sh', '-c', sys.argv[-1]]).returncode)\n"
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return str(script)


def test_ssh_runner_quotes_every_word_for_the_remote_shell(tmp_path: Path) -> None:
    runner = SshRunner(
        "login1",
        user="svc",
        port=2222,
        key="/k/id",
        env={"SLURM_CONF": "/etc/slurm it.conf"},
        ssh=fake_ssh(tmp_path),
    )
    tricky = 'medic: it\'s $HOME; `x` "y"'
    argv = [
        sys.executable,
        "-c",
        "import os, sys; print(sys.argv[1]); print(os.environ['SLURM_CONF'])",
        tricky,
    ]
    result = runner.run(argv, timeout=10)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [tricky, "/etc/slurm it.conf"]
    sent = json.loads((tmp_path / "argv.json").read_text())
    assert sent[:4] == ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]
    assert sent[sent.index("-p") : sent.index("-p") + 2] == ["-p", "2222"]
    assert "-i" in sent and "/k/id" in sent and "svc" in sent
    assert sent[-3:-1] == ["--", "login1"]


def test_ssh_connection_failure_is_transient(tmp_path: Path) -> None:
    ssh = fake_ssh(
        tmp_path, exit_code=255, stderr="ssh: connect to host login1: Connection refused"
    )
    with pytest.raises(TransientError, match="Connection refused"):
        SshRunner("login1", ssh=ssh).run(["sinfo"], timeout=5)


def test_ssh_refused_key_is_unauthorized(tmp_path: Path) -> None:
    ssh = fake_ssh(tmp_path, exit_code=255, stderr="svc@login1: Permission denied (publickey).")
    with pytest.raises(UnauthorizedError):
        SshRunner("login1", ssh=ssh).run(["sinfo"], timeout=5)


def test_remote_failures_are_returned_not_raised(tmp_path: Path) -> None:
    result = SshRunner("login1", ssh=fake_ssh(tmp_path)).run(["sh", "-c", "exit 4"], timeout=5)
    assert result.returncode == 4


def test_runner_from_settings() -> None:
    local = runner_from_settings(SlurmSettings(slurm_conf="/etc/s.conf"))
    assert isinstance(local, LocalRunner) and local.environ()["SLURM_CONF"] == "/etc/s.conf"
    ssh = runner_from_settings(SlurmSettings(runner=SlurmRunner.SSH, ssh_host="login1"))
    assert isinstance(ssh, SshRunner)
    with pytest.raises(ConfigError, match="ssh_host"):
        runner_from_settings(SlurmSettings(runner=SlurmRunner.SSH))
