"""A real local Slurm 22.05 cluster for the whole test session (``medic.dev.slurm.LocalSlurm``).

The cluster (2 virtual nodes, 8 fake GPUs each) comes up once and goes down at the end. When it
cannot start, the tests skip with the reason, except under ``CI=true``, where that is a failure.
Packages are installed with apt only under CI or with ``MEDIC_SLURM_INSTALL=1``; elsewhere run
``medic dev slurm up`` once (as root) to install them.

``MEDIC_SLURM_RECORD=1`` makes :func:`record` save real command outputs under
``tests/assets/slurm/<major.minor>/`` for the Slurm adapter's tests.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from medic.dev.slurm import DevClusterError, LocalSlurm, SlurmEnv

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "slurm"
Recorder = Callable[[str, str], None]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the local Slurm cluster is required under CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """The session's running cluster."""
    if os.name != "posix" or os.geteuid() != 0:
        _unavailable("the local Slurm cluster needs root (its daemons run as root)")
    install = os.environ.get("CI", "").lower() == "true" or bool(
        os.environ.get("MEDIC_SLURM_INSTALL")
    )
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), nodes=2, install=install)
    try:
        cluster.up(timeout_s=120)
    except DevClusterError as exc:
        cluster.down(purge=True)
        _unavailable(f"the local Slurm cluster did not start: {exc}")
    yield cluster
    cluster.down(purge=True)


@pytest.fixture(scope="session")
def slurm(slurm_cluster: LocalSlurm) -> SlurmEnv:
    """How to talk to the session's cluster: ``slurm.run("sinfo", "--json")``."""
    return slurm_cluster.env


@pytest.fixture(scope="session")
def record(slurm: SlurmEnv) -> Recorder:
    """``record(name, text)``: save a real output as an asset when ``MEDIC_SLURM_RECORD=1``."""
    if not os.environ.get("MEDIC_SLURM_RECORD"):
        return lambda _name, _text: None
    version = slurm.run("sinfo", "--version").stdout.split()[-1]  # "slurm-wlm 22.05.8"
    folder = ASSETS / ".".join(version.split(".")[:2])
    folder.mkdir(parents=True, exist_ok=True)

    def save(name: str, text: str) -> None:
        (folder / name).write_text(text if text.endswith("\n") else text + "\n")

    return save


# ------------------------------------------------------------------- helpers for the tests
def check(slurm: SlurmEnv, *args: str, timeout: float = 30) -> str:
    """Run a Slurm client and return its stdout; fail the test on a non-zero exit."""
    done = slurm.run(*args, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}: rc={done.returncode} {done.stderr.strip()}"
    return done.stdout


def sbatch(slurm: SlurmEnv, *args: str) -> str:
    """Submit a batch job; return its id."""
    return check(slurm, "sbatch", "--parsable", *args).strip().split(";")[0]


def fields(text: str) -> dict[str, str]:
    """``Key=value`` pairs of a one-line ``scontrol show ... -o`` record (values without spaces;
    good enough for the fields tests read)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"(?:^|\s)([\w/:]+)=(\S*)", text)}


def job(slurm: SlurmEnv, job_id: str) -> dict[str, str]:
    return fields(check(slurm, "scontrol", "show", "job", "-o", job_id))


def node(slurm: SlurmEnv, name: str) -> dict[str, str]:
    return fields(check(slurm, "scontrol", "show", "node", "-o", name))


def wait_for(
    what: str, probe: Callable[[], Any], *, timeout: float = 30, every: float = 0.25
) -> Any:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def job_state(slurm: SlurmEnv, job_id: str, *states: str) -> Callable[[], dict[str, str] | None]:
    """A probe: the job's fields once its state is one of ``states``."""

    def probe() -> dict[str, str] | None:
        info = job(slurm, job_id)
        return info if info.get("JobState") in states else None

    return probe


def node_state(
    slurm: SlurmEnv, name: str, test: Callable[[str], bool]
) -> Callable[[], dict[str, str] | None]:
    """A probe: the node's fields once ``test(State)`` holds, e.g. ``lambda s: "DRAIN" in s``."""

    def probe() -> dict[str, str] | None:
        info = node(slurm, name)
        return info if test(info.get("State", "")) else None

    return probe


def sinfo_nodes(slurm: SlurmEnv) -> dict[str, dict[str, Any]]:
    nodes: list[dict[str, Any]] = json.loads(check(slurm, "sinfo", "--json"))["nodes"]
    return {n["name"]: n for n in nodes}
