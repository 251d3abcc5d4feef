"""Configuration of the local Slurm cluster: ``slurm.conf``, ``gres.conf``, ``slurmdbd.conf``, the
munge key, fake GPU devices and the ``RebootProgram`` scripts, written from a :class:`Layout`
(where files go) and a :class:`Saved` decision (nodes, ports, accounting; kept in
``cluster.json`` so later calls reuse it).

Everything is private to the state directory, so several clusters (a developer's and a test
session's) can run side by side on one host. The settings and why each is there are listed in
``SLURM_SETTINGS``; the README quotes them.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "GPUS_PER_NODE",
    "SLURMCTLD",
    "SLURMD",
    "SLURMDBD",
    "SLURMSTEPD",
    "SLURM_SETTINGS",
    "Accounting",
    "Layout",
    "Ports",
    "Saved",
    "load_saved",
    "render_gres_conf",
    "render_reboot_scripts",
    "render_slurm_conf",
    "render_slurmdbd_conf",
    "write_files",
    "write_slurm_conf",
]

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
SLURMSTEPD = "/usr/sbin/slurmstepd"
SLURMDBD = "/usr/sbin/slurmdbd"
GPUS_PER_NODE = 8
CPUS_PER_NODE = 16

# Cluster-wide settings (besides paths, ports, nodes and accounting), with the reason for each.
SLURM_SETTINGS: dict[str, tuple[str, str]] = {
    "SlurmUser": ("root", "everything runs as root from the state directory"),
    "SlurmdUser": ("root", "slurmd must be root to launch jobs"),
    "AuthType": ("auth/munge", "the cluster's own munged (own key and socket)"),
    "CredType": ("cred/munge", "job credentials signed by the same munged"),
    "ProctrackType": ("proctrack/linuxproc", "no cgroups in a container"),
    "TaskPlugin": ("task/none", "no cgroups or affinity in a container"),
    "MpiDefault": ("none", "srun starts plain processes"),
    "SelectType": ("select/cons_tres", "GPUs as trackable resources"),
    "SelectTypeParameters": ("CR_Core", "cores only; memory is not enforced"),
    "SlurmdParameters": ("config_overrides", "nodes advertise more CPUs than the host has"),
    "GresTypes": ("gpu", "fake GPUs: gres.conf points at /dev/null symlinks"),
    "ReturnToService": ("2", "a restarted slurmd brings its DOWN node back"),
    "SlurmdTimeout": ("5", "NOT_RESPONDING about 5 s after a slurmd dies"),
    "MessageTimeout": ("3", "limits how fast a dead node is declared DOWN"),
    "KillWait": ("2", "SIGTERM -> SIGKILL delay when a job ends"),
    "ResumeTimeout": ("60", "a reboot not finished by then marks the node DOWN"),
    "JobRequeue": ("1", "batch jobs are requeueable by default"),
    "SchedulerType": ("sched/backfill", "the default"),
    "SchedulerParameters": (
        "sched_interval=2,bf_interval=1",
        "schedule every 2 s (default 60 s); defer stays off",
    ),
    "CommunicationParameters": (
        "NoCtldInAddrAny,NoInAddrAny",
        "daemons bind to their loopback address, not to every interface",
    ),
    "MailProg": ("/bin/true", "no mail"),
    "InactiveLimit": ("0", "srun may be idle"),
    "MinJobAge": ("300", "finished jobs stay visible in scontrol for 5 min"),
    "PropagateResourceLimits": ("NONE", "the host's rlimits are irrelevant"),
    "JobAcctGatherType": ("jobacct_gather/none", "no per-task sampling needed"),
    "AccountingStoreFlags": ("job_comment", "job comments reach sacct"),
    "SlurmctldDebug": ("info", ""),
    "SlurmdDebug": ("info", ""),
}
# Job credentials expire (and a requeued job may restart) cred_expire + 1 s after the end of a run.
CRED_EXPIRE_S = 5


@dataclass(frozen=True, slots=True)
class Layout:
    """Where everything of one cluster lives, all under ``root`` (the state directory)."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.socket.2"

    @property
    def munge_key(self) -> Path:
        return self.munge / "munge.key"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def kernel(self) -> Path:
        return self.root / "kernel"

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    def pid_file(self, daemon: str) -> Path:
        """``munged``, ``slurmdbd``, ``slurmctld`` or ``slurmd-<node>``."""
        return self.run / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return self.log / f"{daemon}.log"

    def dirs(self) -> list[Path]:
        return [
            self.etc,
            self.munge,
            self.run,
            self.log,
            self.spool / "ctld",
            self.bin,
            self.dev,
            self.kernel,
            self.shared,
        ]


@dataclass(frozen=True, slots=True)
class Ports:
    """Loopback TCP ports: the controller, the accounting daemon and one per slurmd."""

    slurmctld: int
    slurmdbd: int
    nodes: dict[str, int]


@dataclass(slots=True)
class Saved:
    """What ``up`` decided for a cluster; ``accounting_note`` says why accounting is on or off."""

    nodes: list[str]
    ports: Ports
    accounting: bool
    accounting_note: str
    database: str
    offline_nodes: int = 0
    """Nodes defined without a slurmd (``off00001``...): DOWN, to give the controller the size
    of a large cluster (the scale benchmark)."""


def load_saved(layout: Layout) -> Saved | None:
    """The decision saved in ``cluster.json``, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads(layout.state_file.read_text())
        data["ports"] = Ports(**data["ports"])
        return Saved(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


@dataclass(frozen=True, slots=True)
class Accounting:
    """How slurmdbd reaches MariaDB; ``database`` is this cluster's own database."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = ""
    database: str = "medic_slurm_acct"


def render_slurm_conf(
    layout: Layout,
    *,
    cluster: str,
    controller: str,
    ports: Ports,
    accounting: bool,
    offline_nodes: int = 0,
) -> str:
    """The ``slurm.conf`` of a cluster of ``ports.nodes``, each with 8 GPUs as gres, and
    ``offline_nodes`` more that no slurmd serves (DOWN, on port 1, where nothing listens)."""
    lines = [
        "# Generated by medic dev slurm: a local cluster of virtual nodes on loopback.",
        f"ClusterName={cluster}",
        f"SlurmctldHost={controller}(127.0.0.1)",
        f"SlurmctldPort={ports.slurmctld}",
        f"AuthInfo=socket={layout.munge_socket},cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={layout.spool / 'ctld'}",
        f"SlurmdSpoolDir={layout.spool / '%n'}",
        f"SlurmctldPidFile={layout.pid_file('slurmctld')}",
        f"SlurmdPidFile={layout.pid_file('slurmd-%n')}",
        f"SlurmctldLogFile={layout.log_file('slurmctld')}",
        f"SlurmdLogFile={layout.log_file('slurmd-%n')}",
        f"RebootProgram={layout.bin / 'reboot'}",
    ]
    lines += [f"{key}={value}" for key, (value, _why) in SLURM_SETTINGS.items()]
    if accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={ports.slurmdbd}",
            f"AccountingStoragePass=socket={layout.munge_socket}",
        ]
    else:
        lines.append("AccountingStorageType=accounting_storage/none")
    for name, port in ports.nodes.items():
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={CPUS_PER_NODE} Boards=1 SocketsPerBoard=1 CoresPerSocket={CPUS_PER_NODE} "
            f"ThreadsPerCore=1 RealMemory=64000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        )
    if offline_nodes:
        lines.append(
            f"NodeName={offline_hostlist(offline_nodes)} NodeHostname=localhost "
            f"NodeAddr=127.0.0.1 Port=1 CPUs={CPUS_PER_NODE} Boards=1 "
            f"SocketsPerBoard=1 CoresPerSocket={CPUS_PER_NODE} ThreadsPerCore=1 "
            f'RealMemory=64000 Gres=gpu:{GPUS_PER_NODE} State=DOWN Reason="no slurmd (scale)"'
        )
    lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def offline_hostlist(count: int) -> str:
    """The hostlist expression of ``count`` offline nodes: ``off[00001-01234]``."""
    return f"off[{1:05d}-{count:05d}]"


def render_gres_conf(layout: Layout, nodes: list[str]) -> str:
    """Fake GPUs: slurmd 22.05 drops a count-only ``gpu`` line (the node goes INVAL) and sets
    ``CUDA_VISIBLE_DEVICES`` only for character devices, so each GPU is a symlink to /dev/null."""
    files = layout.dev / f"nvidia[0-{GPUS_PER_NODE - 1}]"
    return (
        "# Generated by medic dev slurm: 8 fake GPUs per node (symlinks to /dev/null).\n"
        "AutoDetect=off\n"
        f"NodeName={','.join(nodes)} Name=gpu File={files}\n"
    )


def render_slurmdbd_conf(layout: Layout, *, port: int, db: Accounting) -> str:
    """The ``slurmdbd.conf`` (slurmdbd wants mode 600) for the local MariaDB."""
    lines = [
        "# Generated by medic dev slurm.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={port}",
        "SlurmUser=root",
        f"PidFile={layout.pid_file('slurmdbd')}",
        f"LogFile={layout.log_file('slurmdbd')}",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        f"StorageHost={db.host}",
        f"StoragePort={db.port}",
        f"StorageUser={db.user}",
        f"StorageLoc={db.database}",
    ]
    if db.password:
        lines.append(f"StoragePass={db.password}")
    return "\n".join(lines) + "\n"


def render_reboot_scripts(layout: Layout) -> dict[str, str]:
    """``RebootProgram`` and its helper. slurmd runs the program through ``system()`` with its own
    environment, where ``medic dev slurm`` put ``MEDIC_SLURM_NODE``; the helper, detached, stops
    that node's slurmd and starts it again with ``-b`` (report a reboot), so the controller sees
    the node come back from a reboot."""
    q = shlex.quote
    conf = q(str(layout.slurm_conf))
    reboot = f"""#!/bin/sh
# RebootProgram of a medic dev cluster: "reboots" the virtual node whose slurmd runs this.
node="${{MEDIC_SLURM_NODE:?not run by a medic dev slurmd}}"
log={q(str(layout.log))}/reboot-"$node".log
echo "$(date -Is) reboot of $node requested" >>"$log"
setsid {q(str(layout.bin / "restart-slurmd"))} "$node" </dev/null >>"$log" 2>&1 &
exit 0
"""
    restart = f"""#!/bin/sh
# Stops one virtual node's slurmd and starts it again as if the node had rebooted.
node="$1"
pidfile={q(str(layout.run))}/slurmd-"$node".pid
sleep 1
pid=$(cat "$pidfile" 2>/dev/null || true)
if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
fi
echo "$(date -Is) starting slurmd for $node"
SLURM_CONF={conf} MEDIC_SLURM_NODE="$node" MEDIC_SLURM_STATE={q(str(layout.root))} \\
    exec {SLURMD} -b -N "$node" -f {conf} -d {SLURMSTEPD}
"""
    return {"reboot": reboot, "restart-slurmd": restart}


def write_slurm_conf(layout: Layout, saved: Saved, *, cluster: str) -> None:
    """Write ``slurm.conf`` and ``cluster.json`` for ``saved``."""
    text = render_slurm_conf(
        layout,
        cluster=cluster,
        controller=os.uname().nodename.split(".")[0],
        ports=saved.ports,
        accounting=saved.accounting,
        offline_nodes=saved.offline_nodes,
    )
    layout.slurm_conf.write_text(text)
    layout.state_file.write_text(json.dumps(asdict(saved), indent=2) + "\n")


def write_files(layout: Layout, saved: Saved, db: Accounting, *, cluster: str) -> None:
    """Every directory and file the daemons need; the munge key is kept once created."""
    for path in layout.dirs():
        path.mkdir(parents=True, exist_ok=True)
    layout.munge.chmod(0o755)  # munged insists on a socket directory nobody else can write
    if not layout.munge_key.exists():
        fd = os.open(layout.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as key:
            key.write(os.urandom(1024))  # what mungekey -c writes: random bytes
    for i in range(GPUS_PER_NODE):
        dev = layout.dev / f"nvidia{i}"
        if not dev.is_symlink():
            dev.symlink_to("/dev/null")
    for node in saved.nodes:
        (layout.spool / node).mkdir(exist_ok=True)
        (layout.kernel / f"{node}.log").touch()
    for name, text in render_reboot_scripts(layout).items():
        (layout.bin / name).write_text(text)
        (layout.bin / name).chmod(0o755)
    dbd = layout.etc / "slurmdbd.conf"
    dbd.write_text(render_slurmdbd_conf(layout, port=saved.ports.slurmdbd, db=db))
    dbd.chmod(0o600)
    offline = [offline_hostlist(saved.offline_nodes)] if saved.offline_nodes else []
    (layout.etc / "gres.conf").write_text(render_gres_conf(layout, [*saved.nodes, *offline]))
    write_slurm_conf(layout, saved, cluster=cluster)
