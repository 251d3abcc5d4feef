"""``medic serve`` as a user runs it: a real process on a real port, with the control loop inside
(the default) or serving the API alone (``--no-loop``)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

PASSES = re.compile(r"^medic_loop_pass_seconds_count (\S+)$", re.MULTILINE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serve(db: Path, *args: str) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "MEDIC_DATABASE_URL": f"sqlite:///{db}"}
    command = [sys.executable, "-m", "medic", "serve", "--port", str(port), *args]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "medic serve did not answer within 60 s"
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def _passes(base: str) -> float:
    found = PASSES.search(httpx.get(f"{base}/metrics", timeout=5).text)
    return float(found.group(1)) if found else 0.0


def test_serve_runs_the_loop_beside_the_api(tmp_path: Path) -> None:
    with _serve(tmp_path / "medic.db") as base:
        deadline = time.monotonic() + 30
        while _passes(base) < 3:
            assert time.monotonic() < deadline, "the control loop made no passes"
            time.sleep(0.2)
        ready = httpx.get(f"{base}/readyz", timeout=5).json()
        assert ready["status"] == "ready"
        assert ready["leases"] == {"loop/sim": True, "controller/sim": True}, "one process: it acts"


def test_serve_no_loop_serves_the_api_only(tmp_path: Path) -> None:
    with _serve(tmp_path / "medic.db", "--no-loop") as base:
        time.sleep(1.5)  # several pass intervals
        assert _passes(base) == 0
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        assert httpx.get(f"{base}/api/v1/jobs", timeout=5).status_code == 401
