"""The local Slurm cluster's daemons as processes: which run, starting them, waiting for nodes.

Each daemon daemonizes itself and writes a pid file in the state directory; a pid counts only while
the process lives and carries this cluster's tag (and node's) in its environment
(:func:`~medic.dev.slurm_host.owned_pid`), so a stale pid file never names another process.
Starting order: the cluster's own ``munged``, ``slurmdbd`` when accounting is on (falling back to
no accounting when it will not start on a new cluster), ``slurmctld``, then one ``slurmd`` per
virtual node. :class:`~medic.dev.slurm.LocalSlurm` decides what to start and stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from medic.dev import slurm_host as host
from medic.dev.slurm_config import (
    SLURMCTLD,
    SLURMD,
    SLURMDBD,
    SLURMSTEPD,
    Layout,
    Saved,
    write_slurm_conf,
)
from medic.dev.slurm_host import DevClusterError

__all__ = ["START_TIMEOUT_S", "SlurmDaemons"]

START_TIMEOUT_S = 20.0


class SlurmDaemons:
    """The daemons of the cluster in ``layout``; ``environ`` is the environment a Slurm client
    needs (``SlurmEnv.environ``), ``cluster`` the cluster's name in ``slurm.conf``."""

    def __init__(
        self,
        layout: Layout,
        environ: Callable[[], dict[str, str]],
        *,
        cluster: str,
        say: Callable[[str], None],
    ) -> None:
        self.layout = layout
        self._environ = environ
        self._cluster = cluster
        self._say = say

    # ----------------------------------------------------------------- processes
    def pids(self, saved: Saved | None, node_names: list[str]) -> dict[str, int | None]:
        """Each daemon's pid (None: not running); the nodes are ``saved``'s, else ``node_names``."""
        names = ["munged", "slurmdbd", "slurmctld"]
        pids: dict[str, int | None] = {name: self.pid(name) for name in names}
        if saved is not None and not saved.accounting and pids["slurmdbd"] is None:
            del pids["slurmdbd"]
        for node in saved.nodes if saved else node_names:
            pids[f"slurmd-{node}"] = self.pid(f"slurmd-{node}", node)
        return pids

    def pid(self, daemon: str, node: str | None = None) -> int | None:
        """The daemon's pid if it is alive and was started for this cluster (and node)."""
        return host.owned_pid(self.layout.pid_file(daemon), self.layout.root, node)

    def _env(self, node: str | None = None) -> dict[str, str]:
        env = self._environ() | {host.STATE_VAR: str(self.layout.root)}
        if node is not None:
            env[host.NODE_VAR] = node
        return env

    def _spawn(self, daemon: str, args: list[str], *, node: str | None = None) -> int:
        """Run a self-daemonizing command and wait for its pid file; return the daemon's pid."""
        self.layout.pid_file(daemon).unlink(missing_ok=True)
        out = self.layout.log_file(f"{daemon}.stdout")
        rc = host.spawn_daemon(args, env=self._env(node), out=out, timeout=START_TIMEOUT_S)
        if rc != 0:
            raise DevClusterError(f"{daemon} failed (exit {rc}): {self._log_tail(daemon)}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            pid = self.pid(daemon, node)
            if pid is not None:
                return pid
            time.sleep(0.05)
        raise DevClusterError(f"{daemon} did not start: {self._log_tail(daemon)}")

    def start_missing(self, saved: Saved) -> list[str]:
        """Start what is not running; return the nodes to wait for (all after a new slurmctld)."""
        lay = self.layout
        if self.pid("munged") is None:
            # --force: munged otherwise refuses a socket under a mode-700 directory (/root, pytest)
            munged = ["/usr/sbin/munged", "--force", f"--socket={lay.munge_socket}"]
            munged += [f"--key-file={lay.munge_key}", f"--pid-file={lay.pid_file('munged')}"]
            munged += [f"--log-file={lay.log_file('munged')}", f"--seed-file={lay.munge}/seed"]
            self._spawn("munged", munged)
        if saved.accounting and self.pid("slurmdbd") is None:
            self._start_slurmdbd(saved)
        wait: list[str] = []
        if self.pid("slurmctld") is None:
            self._spawn("slurmctld", [SLURMCTLD, "-f", str(lay.slurm_conf)])
            host.wait_port(saved.ports.slurmctld, START_TIMEOUT_S, "slurmctld")
            wait = list(saved.nodes)
        for node in saved.nodes:
            if self.pid(f"slurmd-{node}", node) is None:
                self.start_slurmd(node, rebooted=False)
                wait += [] if node in wait else [node]
        return wait

    def _start_slurmdbd(self, saved: Saved) -> None:
        """Start slurmdbd; if it will not come up and slurmctld is not running yet, fall back to
        no accounting (and say why in the status)."""
        try:
            self._spawn("slurmdbd", [SLURMDBD])
            host.wait_port(saved.ports.slurmdbd, START_TIMEOUT_S, "slurmdbd")
        except DevClusterError as exc:
            if self.pid("slurmctld") is not None:
                raise
            pid = self.pid("slurmdbd")
            host.stop_pids([pid] if pid else [])
            saved.accounting = False
            saved.accounting_note = f"off: slurmdbd failed ({exc}); sacct will not work"
            write_slurm_conf(self.layout, saved, cluster=self._cluster)
            self._say(f"accounting {saved.accounting_note}")

    def start_slurmd(self, node: str, *, rebooted: bool) -> int:
        """Start ``node``'s slurmd; ``rebooted`` reports a reboot (``slurmd -b``)."""
        conf = str(self.layout.slurm_conf)
        args = [SLURMD, "-N", node, "-f", conf, "-d", SLURMSTEPD]
        return self._spawn(f"slurmd-{node}", [*args, "-b"] if rebooted else args, node=node)

    def _log_tail(self, daemon: str) -> str:
        logs = [self.layout.log_file(daemon), self.layout.log_file(f"{daemon}.stdout")]
        return host.log_tail(logs)

    # ----------------------------------------------------------------- readiness
    def sinfo(self) -> list[dict[str, Any]]:
        """The nodes as ``sinfo --json`` lists them."""
        return host.sinfo_nodes(self._environ())

    def wait_ready(self, names: list[str], deadline: float) -> None:
        """Wait until these nodes have registered and respond (idle on a fresh cluster)."""
        while names:
            nodes = {n.get("name"): host.node_summary(n) for n in self.sinfo()}
            if all(host.node_ready(nodes.get(name)) for name in names):
                return
            if time.monotonic() > deadline:
                summary = {name: host.node_state_text(nodes.get(name)) for name in names}
                raise DevClusterError(
                    f"nodes not ready in time: {summary}; see {self.layout.log}/slurmctld.log"
                )
            time.sleep(0.2)
