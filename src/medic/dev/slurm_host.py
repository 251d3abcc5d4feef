"""Host-side helpers of the local Slurm cluster: packages, processes, ports and the MariaDB probe.

Processes are recognised by their environment, never by name: every daemon ``medic dev slurm``
starts carries ``MEDIC_SLURM_STATE=<state dir>`` (and slurmd ``MEDIC_SLURM_NODE=<node>``), which
slurmd passes on to slurmstepd. So stopping a cluster touches exactly what it started, even with
other Slurm daemons on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from medic.errors import MedicError

__all__ = [
    "BAD_FLAGS",
    "BAD_STATES",
    "NODE_VAR",
    "STATE_VAR",
    "DevClusterError",
    "descendants",
    "ensure_packages",
    "free_ports",
    "log_tail",
    "mysql_drop",
    "mysql_problem",
    "node_ready",
    "node_state_text",
    "node_summary",
    "owned_pid",
    "pid_alive",
    "proc_env",
    "read_pid",
    "run_tool",
    "sinfo_nodes",
    "spawn_daemon",
    "stop_pids",
    "tagged_pids",
    "wait_port",
]

STATE_VAR = "MEDIC_SLURM_STATE"
NODE_VAR = "MEDIC_SLURM_NODE"
_NEEDED = {
    "/usr/sbin/slurmctld": "slurm-wlm",
    "/usr/sbin/slurmd": "slurm-wlm",
    "/usr/sbin/slurmstepd": "slurm-wlm",
    "/usr/bin/sinfo": "slurm-wlm",
    "/usr/bin/sbatch": "slurm-wlm",
    "/usr/bin/sacct": "slurm-wlm",
    "/usr/sbin/munged": "munge",
}
_NEEDED_ACCOUNTING = {"/usr/sbin/slurmdbd": "slurmdbd"}
APT_TIMEOUT_S = 900
# A node in one of these states, or with one of these flags, has not (re)joined the cluster.
BAD_STATES = {"down", "unknown", "future", "inval", "error"}
BAD_FLAGS = {"NOT_RESPONDING", "POWERED_DOWN", "POWERING_UP", "INVALID_REG"}


class DevClusterError(MedicError):
    """The local development cluster could not be started, inspected or stopped."""


def run_tool(
    args: list[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run a command (no shell) and capture its text output; never raises on a non-zero exit."""
    try:
        return subprocess.run(
            args,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(args, 124, "", f"timed out after {exc.timeout} s")
    except OSError as exc:
        return subprocess.CompletedProcess(args, 127, "", str(exc))


def _missing(needed: Mapping[str, str]) -> list[str]:
    return sorted({pkg for path, pkg in needed.items() if not Path(path).exists()})


def spawn_daemon(args: list[str], *, env: Mapping[str, str], out: Path, timeout: float) -> int:
    """Run a command that daemonizes itself (its parent returns at once), output to ``out``;
    return the parent's exit status (0 also while the daemon may still fail to start)."""
    with out.open("ab") as sink:
        try:
            done = subprocess.run(
                args,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return 0
    return done.returncode


def log_tail(paths: Iterable[Path], lines: int = 3) -> str:
    """The last ``lines`` lines of these files together, on one line."""
    text: list[str] = []
    for path in paths:
        with contextlib.suppress(OSError):
            text += path.read_text(errors="replace").splitlines()
    return " / ".join(text[-lines:]) or "no log output"


def sinfo_nodes(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The node records of ``sinfo --json``, [] when the controller does not answer."""
    done = run_tool(["sinfo", "--json"], env=env, timeout=15)
    if done.returncode != 0:
        return []
    try:
        nodes: list[dict[str, Any]] = json.loads(done.stdout).get("nodes", [])
    except (ValueError, AttributeError):
        return []
    return nodes


def ensure_packages(*, accounting: bool, install: bool, say: Callable[[str], None]) -> bool:
    """Install Debian's ``slurm-wlm`` and ``munge`` (and ``slurmdbd`` for ``accounting``) with apt
    when missing and ``install`` is set. Returns whether slurmdbd is available."""
    wanted = {**_NEEDED, **(_NEEDED_ACCOUNTING if accounting else {})}
    missing = _missing(wanted)
    if missing and not install:
        if _missing(_NEEDED):
            raise DevClusterError(f"not installed: {', '.join(missing)} (apt-get install them)")
        missing = []  # only slurmdbd is missing: run without accounting
    if missing:
        _apt_install(missing, say)
    _check_not_emulator()
    return not _missing(_NEEDED_ACCOUNTING)


def _apt_install(missing: list[str], say: Callable[[str], None]) -> None:
    if os.geteuid() != 0:
        raise DevClusterError(
            f"{', '.join(missing)} not installed and not running as root; run as root, or "
            f"install them first: apt-get install {' '.join(missing)}"
        )
    if shutil.which("apt-get") is None:
        raise DevClusterError(f"{', '.join(missing)} not installed and apt-get is not available")
    say(f"installing {' '.join(missing)} with apt-get (once)...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *missing]):
        done = run_tool(args, env=env, timeout=APT_TIMEOUT_S)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise DevClusterError(f"{' '.join(args)} failed: {' / '.join(tail)}")


def _check_not_emulator() -> None:
    # slurm-wlm-emulator takes over /usr/sbin/slurmd through update-alternatives and cannot run
    # a multiple-slurmd cluster.
    target = os.path.realpath("/usr/sbin/slurmd")
    if "emulator" in target:
        raise DevClusterError(
            f"/usr/sbin/slurmd points at {target} (slurm-wlm-emulator); "
            "run: update-alternatives --set slurmd /usr/sbin/slurmd-wlm"
        )


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """True for a live process (a zombie is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def proc_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {key: value for key, _, value in pairs}


def owned_pid(pid_file: Path, state: Path, node: str | None = None) -> int | None:
    """The pid in ``pid_file`` if that process lives and was started for the cluster in
    ``state`` (and for ``node``): a stale pid file or a reused pid gives None."""
    pid = read_pid(pid_file)
    if pid is None or not pid_alive(pid):
        return None
    env = proc_env(pid)
    if env.get(STATE_VAR) != str(state) or (node is not None and env.get(NODE_VAR) != node):
        return None
    return pid


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def tagged_pids(state: Path, node: str | None = None) -> list[int]:
    """Live processes started for the cluster in ``state`` (for ``node`` only, when given)."""
    found = []
    for pid in _all_pids():
        env = proc_env(pid)
        if env.get(STATE_VAR) != str(state):
            continue
        if node is not None and env.get(NODE_VAR) != node:
            continue
        if pid_alive(pid):
            found.append(pid)
    return found


def descendants(pids: Iterable[int]) -> list[int]:
    """Every live descendant of ``pids`` (not the pids themselves)."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return [pid for pid in found if pid_alive(pid)]


def stop_pids(pids: Iterable[int], *, timeout: float = 10, sig: int = signal.SIGTERM) -> None:
    """Send ``sig``, wait up to ``timeout`` seconds, then SIGKILL what is left."""
    live = [pid for pid in pids if pid_alive(pid)]
    for pid in live:
        _signal(pid, sig)
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        live = [pid for pid in live if pid_alive(pid)]
        time.sleep(0.05)
    for pid in live:
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _port_free(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Slurm binds
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def free_ports(count: int, *, prefer: list[int] | None = None) -> list[int]:
    """``count`` distinct free TCP ports below the ephemeral range; ``prefer`` if all are free."""
    usable = prefer and len(prefer) == count == len(set(prefer))
    if prefer and usable and all(_port_free(p) for p in prefer):
        return prefer
    chosen: list[int] = []
    rng = random.Random()
    for _ in range(count * 200):
        port = rng.randrange(20000, 32000)
        if port not in chosen and _port_free(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise DevClusterError(f"could not find {count} free TCP ports in 20000-32000")


def mysql_problem(
    host: str, port: int, user: str, password: str, *, timeout: float = 2
) -> str | None:
    """Why slurmdbd could not use this MariaDB/MySQL server, or None when it answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            greeting = sock.recv(512)
    except OSError as exc:
        return f"no MariaDB at {host}:{port} ({exc.strerror or exc})"
    if len(greeting) < 5 or greeting[4] != 10:
        return f"{host}:{port} does not answer like MariaDB/MySQL"
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        return None  # answers; credentials are checked by slurmdbd itself
    done = run_tool(
        [client, f"--host={host}", f"--port={port}", f"--user={user}", "-e", "SELECT 1"],
        env={**os.environ, "MYSQL_PWD": password},
        timeout=timeout * 5,
    )
    if done.returncode != 0:
        return f"MariaDB at {host}:{port} refused {user}: {done.stderr.strip()}"
    return None


def mysql_drop(host: str, port: int, user: str, password: str, database: str) -> None:
    """Drop the accounting database (best effort; needs the mariadb client)."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None or not database.replace("_", "").isalnum():
        return
    drop = f"DROP DATABASE IF EXISTS `{database}`"
    args = [client, f"--host={host}", f"--port={port}", f"--user={user}", "-e", drop]
    run_tool(args, env={**os.environ, "MYSQL_PWD": password}, timeout=30)


def wait_port(port: int, timeout: float, what: str) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise DevClusterError(f"{what} does not listen on 127.0.0.1:{port}")


def node_summary(node: dict[str, Any]) -> dict[str, Any]:
    """The fields of a ``sinfo --json`` node that ``status`` shows."""
    return {
        "name": node.get("name"),
        "state": str(node.get("state", "")).lower(),
        "flags": [str(f).upper() for f in node.get("state_flags", [])],
        "reason": node.get("reason") or "",
        "gres": node.get("gres") or "",
    }


def node_ready(node: dict[str, Any] | None) -> bool:
    """Registered and responding (idle, mixed, allocated or drained all count)."""
    if node is None or node["state"] in BAD_STATES:
        return False
    return not BAD_FLAGS & set(node["flags"])


def node_state_text(node: dict[str, Any] | None) -> str:
    if node is None:
        return "missing"
    return "+".join([node["state"], *node["flags"]]).lower()
