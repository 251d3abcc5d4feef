"""Replicas of ``medic serve`` as an operator runs them: real processes on one PostgreSQL or
MariaDB database. One holds the cluster's leases and runs the loop; the other stands by and
serves the API; SIGKILL the holder and the other takes the work over within the lease. Two on
one SQLite file: the second says SQLite serves one process, and never acts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from contract.test_store import ENGINES, _drop_everything

LEASE_SECONDS = 3.0
LOOP = "loop/sim"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serve(url: str, log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    env = {
        **os.environ,
        "MEDIC_DATABASE_URL": url,
        "MEDIC_CONTROLLER_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    command = [sys.executable, "-m", "medic", "serve", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _ready(base) is not None, 60, f"{base} never answered: {_tail(log)}")
        yield base, process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def _ready(base: str) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"{base}/readyz", timeout=2)
    except httpx.TransportError:
        return None
    return response.json() if response.status_code == 200 else None


def _holds(base: str) -> bool:
    ready = _ready(base)
    return bool(ready and ready["leases"].get(LOOP))


def _wait(condition: Any, seconds: float, message: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < seconds, message
        time.sleep(0.1)
    return time.monotonic() - start


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


@pytest.mark.parametrize("engine", [p for p in ENGINES if p.values[0] != "sqlite"])
def test_one_replica_acts_and_the_other_takes_over_when_it_is_killed(
    engine: str, tmp_path: Path
) -> None:
    url = os.environ[engine]
    _drop_everything(url)
    with ExitStack() as stack:
        a, a_process = stack.enter_context(_serve(url, tmp_path / "a.log"))
        _wait(lambda: _holds(a), 30, f"a never took the lease: {_tail(tmp_path / 'a.log')}")
        b, _ = stack.enter_context(_serve(url, tmp_path / "b.log"))
        time.sleep(2 * LEASE_SECONDS)  # b tried many times meanwhile
        assert _holds(a) and not _holds(b), "exactly one replica holds the loop lease"
        ready_b = _ready(b)
        assert ready_b is not None and ready_b["holder"] != _ready(a)["holder"]  # type: ignore[index]
        assert httpx.get(f"{b}/api/v1/jobs", timeout=5).status_code == 401, "b serves the API"

        a_process.send_signal(signal.SIGKILL)
        a_process.wait(timeout=10)
        failover = _wait(lambda: _holds(b), 4 * LEASE_SECONDS, "b never took over")

    # The lease runs out LEASE_SECONDS after a's last renewal (at most a third of it before the
    # kill); b's next pass takes it.
    assert failover <= LEASE_SECONDS + 2.0, f"failover took {failover:.1f} s"


def test_a_second_process_on_one_sqlite_file_says_sqlite_serves_one_process(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'medic.db'}"
    with ExitStack() as stack:
        a, _ = stack.enter_context(_serve(url, tmp_path / "a.log"))
        _wait(lambda: _holds(a), 30, "a never took the lease")
        b, _ = stack.enter_context(_serve(url, tmp_path / "b.log"))
        _wait(
            lambda: "SQLite serves one process" in _tail(tmp_path / "b.log"),
            30,
            f"b did not say it: {_tail(tmp_path / 'b.log')}",
        )
        assert _holds(a) and not _holds(b)
