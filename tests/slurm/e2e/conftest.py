"""Fixtures of the end-to-end tests: a 3-node local Slurm cluster per module (a 2-node job still
fits after one node is excluded), medic on it, and a private ``sshd`` for the SSH runner.

The cluster is this package's own (its own state directory), next to the session's 2-node one.
When it cannot start the tests skip with the reason, except under ``CI=true`` where that fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from medic.dev.slurm import DevClusterError, LocalSlurm
from medic.dev.slurm_host import pid_alive, read_pid

from .harness import Medic, TrainingJob, medic_settings, poll

NODES = 3
SSHD = "/usr/sbin/sshd"


def _unavailable(reason: str) -> None:
    """Skip with the reason, or fail under ``CI=true`` (as ``tests/slurm/conftest.py`` does)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"required under CI=true: {reason}")
    pytest.skip(reason)


def _install_allowed() -> bool:
    return os.environ.get("CI", "").lower() == "true" or bool(os.environ.get("MEDIC_SLURM_INSTALL"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """A running 3-node cluster for the module, purged at its end."""
    if os.name != "posix" or os.geteuid() != 0:
        _unavailable("the local Slurm cluster needs root (its daemons run as root)")
    local = LocalSlurm(tmp_path_factory.mktemp("slurm3"), nodes=NODES, install=_install_allowed())
    try:
        local.up(timeout_s=120)
    except DevClusterError as exc:
        local.down(purge=True)
        _unavailable(f"the 3-node local Slurm cluster did not start: {exc}")
    yield local
    local.down(purge=True)


def _all_idle(local: LocalSlurm) -> bool:
    done = local.env.run("sinfo", "-h", "-N", "-o", "%N %t")
    states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
    return len(states) == NODES and all(s == "idle" for s in states.values())


@dataclass
class Jobs:
    """The jobs a test submitted (cancelled, and their stopped ranks killed, at its end)."""

    cluster: LocalSlurm
    submitted: list[TrainingJob]

    def new(self, name: str, comment: str, **kwargs: object) -> TrainingJob:
        job = TrainingJob(self.cluster.env, name, comment, **kwargs)  # type: ignore[arg-type]
        job.submit()
        self.submitted.append(job)
        return job


def _lift_medic_drains(local: LocalSlurm) -> None:
    """Resume the nodes an earlier test's medic left drained (its cordon of a faulty node: that
    medic and its store are gone)."""
    done = local.env.run("sinfo", "-h", "-N", "-o", "%N|%E")
    for line in done.stdout.splitlines():
        node, _, reason = line.partition("|")
        if reason.startswith("medic:"):
            local.env.run("scontrol", "update", f"nodename={node.strip()}", "state=resume")


@pytest.fixture
def jobs(cluster: LocalSlurm) -> Iterator[Jobs]:
    """Start from a cluster whose nodes are all up and idle; cancel the test's jobs at its end."""
    for node in cluster.node_names:
        cluster.start_slurmd(node)  # a test may have killed one
    _lift_medic_drains(cluster)
    poll("every node idle", lambda: _all_idle(cluster), timeout=90, every=0.5)
    made = Jobs(cluster, [])
    yield made
    for job in made.submitted:
        job.cancel()
        job.kill_leftovers()  # SIGSTOPped ranks of a test that failed


@pytest.fixture
def medic_factory(cluster: LocalSlurm, tmp_path: Path) -> Iterator[Callable[..., Medic]]:
    """``medic_factory(**setting_overrides)``: medic on the cluster with a fresh SQLite store,
    its loop running; stopped at the end of the test."""
    made: list[Medic] = []

    def make(*, embedded_controller: bool = True, **overrides: object) -> Medic:
        settings = medic_settings(cluster, tmp_path / f"medic{len(made)}.db", **overrides)
        medic = Medic(settings, embedded_controller=embedded_controller, record=True)
        made.append(medic)
        return medic.start()

    yield make
    for medic in made:
        medic.close()


# ------------------------------------------------------------------------------------ sshd
@dataclass(frozen=True)
class Sshd:
    """A private sshd on 127.0.0.1 that lets root in with ``key``; ``bin`` holds an ``ssh``
    wrapper (own known_hosts, every command logged to ``commands``)."""

    port: int
    key: Path
    bin: Path
    commands: Path
    kill_after_hold: Path
    """While this file exists, the wrapper SIGKILLs its caller right after a requeuehold went
    through (once): a controller killed between requeue-hold and release."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ensure_sshd() -> None:
    if Path(SSHD).exists():
        return
    if not _install_allowed():
        _unavailable("openssh-server is not installed (apt-get install openssh-server)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "openssh-server"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            _unavailable(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")


def _wrapper(folder: Path, known_hosts: Path, commands: Path, flag: Path) -> str:
    ssh = shutil.which("ssh") or "/usr/bin/ssh"
    return f"""#!/bin/sh
# ssh for the test's private sshd: its own known_hosts, no user config; logs every command.
printf '%s\\n' "$*" >>{commands}
{ssh} -F /dev/null -o UserKnownHostsFile={known_hosts} "$@"
rc=$?
case "$*" in
    *"scontrol requeuehold"*)
        if [ "$rc" -eq 0 ] && rm {flag} 2>/dev/null; then kill -9 "$PPID"; fi ;;
esac
exit "$rc"
"""


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    if os.geteuid() != 0:
        _unavailable("the private sshd lets root in; run as root")
    _ensure_sshd()
    folder = tmp_path / "sshd"
    folder.mkdir()
    folder.chmod(0o700)
    for name in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)],
            check=True,
            timeout=30,
        )
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    port = _free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"PidFile {folder / 'sshd.pid'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    done = subprocess.run(
        [SSHD, "-f", str(config), "-E", str(folder / "sshd.log")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        _unavailable(f"the private sshd did not start: {done.stderr.strip()}")
    pid_file = folder / "sshd.pid"
    poll("the private sshd", lambda: read_pid(pid_file), timeout=10, every=0.05)
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    commands, flag = folder / "commands.log", folder / "kill-after-hold"
    wrapper = bin_dir / "ssh"
    wrapper.write_text(_wrapper(folder, folder / "known_hosts", commands, flag))
    wrapper.chmod(0o755)
    try:
        yield Sshd(port, folder / "client_key", bin_dir, commands, flag)
    finally:
        pid = read_pid(pid_file)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
