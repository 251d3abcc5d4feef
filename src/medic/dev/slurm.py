"""A real Slurm 22.05 cluster on this host, for development and tests: ``LocalSlurm``.

One ``slurmctld``, one ``slurmd`` per virtual node (``node1`` ... ``nodeN``, each on its own
loopback port, 8 fake GPUs as gres), the cluster's own ``munged`` and, when the local MariaDB
answers, ``slurmdbd`` so ``sacct --json`` works. Everything (configuration, keys, sockets, pid and
log files, spool and Slurm's saved state) lives in one state directory::

    env = LocalSlurm(Path("/tmp/slurm"), nodes=2).up()
    subprocess.run(["sinfo", "--json"], env=env.environ(), timeout=30)

``up`` is idempotent (it starts only what is not running) and ``down`` stops exactly what ``up``
started. The cluster keeps Slurm's saved state between ``down`` and ``up``, like a real cluster
restart; ``down(purge=True)`` forgets it, together with the accounting database. This module
decides what runs (configuration, start/stop order, status); the daemons as processes are
:mod:`medic.dev.slurm_daemons`'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from medic.dev import slurm_host as host
from medic.dev.slurm_config import (
    GPUS_PER_NODE,
    Accounting,
    Layout,
    Ports,
    Saved,
    load_saved,
    write_files,
)
from medic.dev.slurm_daemons import SlurmDaemons
from medic.dev.slurm_host import DevClusterError

__all__ = [
    "GPUS_PER_NODE",
    "ClusterStatus",
    "DevClusterError",
    "LocalSlurm",
    "SlurmEnv",
    "default_state_dir",
]

CLUSTER_NAME = "medic"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/medic/slurm``, by default ``~/.local/state/medic/slurm``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "medic" / "slurm"


@dataclass(frozen=True, slots=True)
class SlurmEnv:
    """What a client needs to talk to the cluster: ``env`` holds ``SLURM_CONF`` (the munge socket
    is named in that file)."""

    state_dir: Path
    slurm_conf: Path
    nodes: tuple[str, ...]
    accounting: bool
    env: dict[str, str] = field(default_factory=dict)

    @property
    def shared_dir(self) -> Path:
        """A directory every virtual node sees: job outputs, checkpoints."""
        return self.state_dir / "shared"

    def environ(self) -> dict[str, str]:
        """This process's environment, without inherited ``SLURM_*``, plus ``env``."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return base | self.env

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (``sinfo``, ``scontrol``, ...) against the cluster."""
        return host.run_tool(list(args), env=self.environ(), timeout=timeout)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """Daemons (name -> pid, None when down), nodes from ``sinfo --json``, accounting."""

    state_dir: str
    slurm_conf: str
    daemons: dict[str, int | None]
    nodes: list[dict[str, Any]]
    accounting: bool
    accounting_note: str

    @property
    def running(self) -> bool:
        return any(pid is not None for pid in self.daemons.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: each daemon as ``{"up": bool, "pid": int | None}``."""
        data = asdict(self)
        data["daemons"] = {n: {"up": p is not None, "pid": p} for n, p in self.daemons.items()}
        data["running"] = self.running
        return data


class LocalSlurm:
    """A local Slurm cluster of ``nodes`` virtual nodes whose files all live in ``state_dir``."""

    def __init__(
        self,
        state_dir: Path | None = None,
        nodes: int = 2,
        *,
        accounting: bool = True,
        install: bool = True,
        database: Accounting | None = None,
        say: Callable[[str], None] | None = None,
        offline_nodes: int = 0,
    ) -> None:
        """``offline_nodes``: that many more node definitions without a slurmd (DOWN), so the
        controller has the size of a large cluster."""
        if not 1 <= nodes <= 64:
            raise DevClusterError(f"nodes must be between 1 and 64, not {nodes}")
        if not 0 <= offline_nodes <= 99_999:
            raise DevClusterError(f"offline_nodes must be between 0 and 99999, not {offline_nodes}")
        self.offline_nodes = offline_nodes
        root = (state_dir or default_state_dir()).expanduser().resolve()
        self.layout = Layout(root)
        self.node_names = [f"node{i}" for i in range(1, nodes + 1)]
        self.want_accounting = accounting
        self.install = install
        self._have_dbd = True
        if len(str(self.layout.munge_socket)) > 100:  # sun_path holds 108 bytes
            raise DevClusterError(f"state directory path too long for a unix socket: {root}")
        if database is None:
            suffix = "" if root == default_state_dir().resolve() else "_" + _digest(root)
            database = Accounting(database=f"medic_slurm_acct{suffix}")
        self.db = database
        self.say = say or (lambda _msg: None)
        self._daemons = SlurmDaemons(
            self.layout,
            lambda: self.env.environ(),
            cluster=CLUSTER_NAME,
            say=lambda message: self.say(message),  # read late: a caller may replace say
        )

    # ----------------------------------------------------------------- public API
    @property
    def state_dir(self) -> Path:
        """Where every file of this cluster lives."""
        return self.layout.root

    @property
    def shared_dir(self) -> Path:
        """A directory every virtual node sees: job outputs, checkpoints."""
        return self.layout.shared

    def kernel_log(self, node: str) -> Path:
        """The file standing in for ``node``'s kernel log (tests append Xid lines to it)."""
        self._check_node(node)
        return self.layout.kernel / f"{node}.log"

    @property
    def env(self) -> SlurmEnv:
        """How to talk to this cluster (valid once ``up`` has configured it)."""
        saved = load_saved(self.layout)
        return SlurmEnv(
            state_dir=self.state_dir,
            slurm_conf=self.layout.slurm_conf,
            nodes=tuple(saved.nodes if saved else self.node_names),
            accounting=bool(saved and saved.accounting),
            env={"SLURM_CONF": str(self.layout.slurm_conf)},
        )

    def up(self, timeout_s: float = 60.0) -> SlurmEnv:
        """Start whatever is not running and wait until the nodes it started answer (all of them,
        idle, on a fresh cluster); on a running cluster it changes nothing."""
        if os.geteuid() != 0:
            raise DevClusterError("the local Slurm cluster runs its daemons as root; run as root")
        started = time.monotonic()
        self._have_dbd = host.ensure_packages(
            accounting=self.want_accounting, install=self.install, say=self.say
        )
        with self._locked():
            saved = load_saved(self.layout)
            if any(pid is not None for pid in self._daemons.pids(saved, self.node_names).values()):
                assert saved is not None
                if saved.nodes != self.node_names:
                    raise DevClusterError(
                        f"a cluster of {len(saved.nodes)} nodes already runs in "
                        f"{self.state_dir}; run down first to change the node count"
                    )
            else:
                saved = self._configure(saved)
            started_nodes = self._daemons.start_missing(saved)
        self._daemons.wait_ready(started_nodes, started + timeout_s)
        return self.env

    def down(self, *, purge: bool = False, timeout_s: float = 15.0) -> list[int]:
        """Stop everything ``up`` started (job processes first, slurmd before slurmctld) and
        return the pids stopped. ``purge`` also deletes the saved state and accounting database."""
        with self._locked():
            saved = load_saved(self.layout)
            pids = self._daemons.pids(saved, self.node_names)
            daemons = {pid for pid in pids.values() if pid is not None}
            # slurmstepd and job processes (slurmd's grandchildren, re-parented): they go first
            family = daemons | set(host.descendants(daemons))
            stray = [pid for pid in host.tagged_pids(self.state_dir) if pid not in family]
            stopped = [*stray, *host.descendants(stray)]
            host.stop_pids(stopped, timeout=2, sig=signal.SIGKILL)
            order = [[p for n, p in pids.items() if n.startswith("slurmd-")]]
            order += [[pids.get(name)] for name in ("slurmctld", "slurmdbd", "munged")]
            for group in order:
                live = [pid for pid in group if pid is not None]
                host.stop_pids(live, timeout=timeout_s)
                stopped += live
            leftover = host.tagged_pids(self.state_dir)
            host.stop_pids([*leftover, *host.descendants(leftover)], sig=signal.SIGKILL)
            if purge:
                if saved and saved.accounting:
                    self._drop_database()
                self._purge_files()
        return stopped + leftover

    def status(self) -> ClusterStatus:
        """Per-daemon pid (None: not running), nodes and their states, accounting on/off."""
        saved = load_saved(self.layout)
        pids = self._daemons.pids(saved, self.node_names)
        nodes: list[dict[str, Any]] = []
        if pids.get("slurmctld") is not None:
            nodes = [host.node_summary(n) for n in self._daemons.sinfo()]
        note = saved.accounting_note if saved else "not configured (run up)"
        return ClusterStatus(
            state_dir=str(self.state_dir),
            slurm_conf=str(self.layout.slurm_conf),
            daemons=pids,
            nodes=nodes,
            accounting=bool(saved and saved.accounting),
            accounting_note=note,
        )

    def slurmd_pid(self, node: str) -> int | None:
        """The pid of ``node``'s slurmd, None when it is not running."""
        self._check_node(node)
        return self._daemons.pid(f"slurmd-{node}", node)

    def kill_slurmd(self, node: str, *, with_jobs: bool = False) -> int | None:
        """SIGKILL ``node``'s slurmd (a soft node failure); ``with_jobs`` also kills its
        slurmstepd and job processes (a hard failure). Returns the slurmd's pid."""
        pid = self.slurmd_pid(node)
        victims = [pid] if pid is not None else []
        if with_jobs:
            steps = host.tagged_pids(self.state_dir, node)
            victims += [*steps, *host.descendants(steps)]
        host.stop_pids(victims, timeout=2, sig=signal.SIGKILL)
        return pid

    def start_slurmd(self, node: str, *, rebooted: bool = False) -> int:
        """Start ``node``'s slurmd unless it runs; ``rebooted`` reports a reboot (``slurmd -b``)."""
        self._check_node(node)
        pid = self.slurmd_pid(node)
        if pid is not None:
            return pid
        return self._daemons.start_slurmd(node, rebooted=rebooted)

    # ----------------------------------------------------------------- configuration
    def _configure(self, saved: Saved | None) -> Saved:
        """Fresh ports, the accounting decision and every configuration file."""
        old = saved.ports if saved and saved.nodes == self.node_names else None
        prefer = [old.slurmctld, old.slurmdbd, *old.nodes.values()] if old else None
        chosen = host.free_ports(2 + len(self.node_names), prefer=prefer)
        ports = Ports(chosen[0], chosen[1], dict(zip(self.node_names, chosen[2:], strict=True)))
        accounting, note = self._accounting_decision()
        new = Saved(self.node_names, ports, accounting, note, self.db.database, self.offline_nodes)
        if accounting and not any(self.layout.spool.glob("ctld/*")):
            self._drop_database()  # job ids restart at 1: old accounting rows would only confuse
        write_files(self.layout, new, self.db, cluster=CLUSTER_NAME)
        return new

    def _accounting_decision(self) -> tuple[bool, str]:
        if not self.want_accounting:
            return False, "off: disabled by the caller (sacct will not work)"
        if not self._have_dbd:
            return False, "off: slurmdbd is not installed (sacct will not work)"
        db = self.db
        problem = host.mysql_problem(db.host, db.port, db.user, db.password)
        if problem:
            return False, f"off: {problem} (sacct will not work)"
        return True, f"on: slurmdbd -> MariaDB {db.host}:{db.port} database {db.database}"

    # ----------------------------------------------------------------- misc
    def _check_node(self, node: str) -> None:
        saved = load_saved(self.layout)
        if node not in (saved.nodes if saved else self.node_names):
            raise DevClusterError(f"no node {node!r} in the cluster at {self.state_dir}")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / ".lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _drop_database(self) -> None:
        db = self.db
        host.mysql_drop(db.host, db.port, db.user, db.password, db.database)

    def _purge_files(self) -> None:
        lay = self.layout
        for path in [*lay.dirs(), lay.spool]:
            if path != lay.log:  # logs stay for post-mortems
                shutil.rmtree(path, ignore_errors=True)
        lay.state_file.unlink(missing_ok=True)


def _digest(path: Path) -> str:
    return hashlib.sha1(str(path).encode(), usedforsecurity=False).hexdigest()[:8]
