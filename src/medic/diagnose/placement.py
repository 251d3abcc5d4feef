"""Where an offline log line belongs: its node, and the global ranks each node runs.

What ``medic diagnose`` reads from a directory's lines besides their signatures
(:mod:`medic.diagnose`): the host a line names or is tagged with, colour codes removed, the
ranks a node's own lines show, the global ranks NCCL's communicator init lines give each host,
and the worker host of a line a Ray driver printed for it. :class:`Placement` gathers these line
by line; the caller asks it at the end for the rank -> node mapping and to re-place Ray lines.

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from medic.domain.diagnosis import Detection
from medic.domain.ids import NodeName
from medic.domain.logs import LogLine

__all__ = ["HOST", "Placement", "host_name", "ray_worker", "untagged"]

HOST = re.compile(
    r"^(?P<nccl>[A-Za-z][\w.-]{0,62}):\d{1,10}:\d{1,10} \[\d{1,4}\]"
    r"|^(?:<\d{1,3}>)?\w{3} {1,2}\d{1,2} \d\d:\d\d:\d\d (?P<syslog>[A-Za-z][\w.-]{0,62}) kernel: "
    r"|^srun: error: (?P<srun>[A-Za-z][\w.-]{0,62}): tasks? \d"
    r"|^slurmstepd-(?P<stepd>[A-Za-z][\w.-]{0,62}): "
)
"""Prefixes that name the host a line of the job's combined output came from."""
_ANSI = re.compile(r"\x1b\[[0-9;]{0,32}[A-Za-z]")
_RAY = re.compile(
    r"\((?:(?:[A-Za-z_][\w.:-]{0,80} )?pid=\d{1,10}|raylet)(?:, ip=(?P<ip>[\w.:-]{3,64}))?"
    r"(?:, repeated \d{1,9}x across cluster)?\) "
)
_RAY_TASK = re.compile(r"\bray::[\w.:<>]{1,120}\(\) \(pid=\d{1,10}, ip=(?P<ip>[\w.:-]{3,64})[,)]")
_NCCL_INIT = re.compile(
    r"NCCL INFO comm 0x[0-9a-fA-F]{1,16} rank (?P<rank>\d{1,7}) nranks (?P<nranks>\d{1,7}) "
)


def host_name(name: str, known: frozenset[NodeName]) -> NodeName:
    """A printed hostname as a node name: as printed when it names a node file, else its first
    DNS label (``node002.cluster.local`` is ``node002``)."""
    return NodeName(name if name in known else name.split(".", 1)[0])


def untagged(text: str, known: frozenset[NodeName]) -> tuple[str, NodeName | None]:
    """The line without its terminal colour codes (rich's and Lightning's tracebacks) and without
    the job-node tag pdsh and clush put before their hosts' output (``node-a1: [rank0]: ...``,
    DeepSpeed's launcher), and the node it was tagged with. Only a name of the job's nodes is a
    tag: ``WARNING: ...`` is none."""
    if "\x1b[" in text:
        text = _ANSI.sub("", text)
    colon = text.find(": ", 1, 65)
    if colon > 0 and text[:colon] in known:
        return text[colon + 2 :], NodeName(text[:colon])
    return text, None


def ray_worker(text: str) -> tuple[str, str | None]:
    """The line without the prefix a Ray driver puts before a worker's output (``(WorkerDict
    pid=23113, ip=10.20.0.13) ``, ``(raylet, ip=...) ``, ``(pid=12) ``), and the worker's
    address (None: no prefix, or one without an address). What the worker printed, its stamp and
    rank prefix included, is then read as if from the worker's own log."""
    if not text.startswith("(") or (ray := _RAY.match(text)) is None:
        return text, None
    return text[ray.end() :], ray["ip"] or ""


@dataclass
class Placement:
    """What the directory's lines say about where things run, gathered line by line."""

    known: frozenset[NodeName]
    """The job's nodes (the directory's node files)."""
    seen_ranks: dict[int, NodeName] = field(default_factory=dict)
    hosts: set[NodeName] = field(default_factory=set)
    """Hosts the combined output's lines name (the job's nodes when there are no node files)."""
    _communicators: set[tuple[int, int, NodeName]] = field(default_factory=set)
    _ray_lines: dict[int, str] = field(default_factory=dict)
    _ray_hosts: dict[str, set[NodeName]] = field(default_factory=dict)
    _remote: str | None = None

    def new_file(self) -> None:
        self._remote = None

    def note(
        self, line: LogLine, file_node: NodeName | None, stamped: bool, ray_ip: str | None = None
    ) -> None:
        """Take one line into account (``stamped``: it printed a time of its own; ``ray_ip``: the
        worker address of a Ray prefix taken off it, "" for one without an address)."""
        text = line.text
        if file_node is not None and line.rank is not None:
            self.seen_ranks.setdefault(line.rank, file_node)
        elif line.node is not None:
            self.hosts.add(line.node)
        if ray_ip is not None:
            self._remote = None
            if ray_ip:
                self._ray_lines[line.seq] = ray_ip
                if (named := HOST.match(text)) and named["nccl"]:
                    host = host_name(named["nccl"], self.known)
                    self._ray_hosts.setdefault(ray_ip, set()).add(host)
        elif "ray::" in text and (task := _RAY_TASK.search(text)):
            self._remote = task["ip"]  # the remote traceback of a worker's task follows
        elif self._remote is not None and (stamped or text.startswith("ray.")):
            self._remote = None
        elif self._remote is not None:
            self._ray_lines[line.seq] = self._remote
        owner = file_node or line.node
        if owner is not None and " nranks " in text and (init := _NCCL_INIT.search(text)):
            self._communicators.add((int(init["rank"]), int(init["nranks"]), owner))

    def rank_nodes(self) -> dict[int, NodeName]:
        """Global rank -> node: the ranks each node file shows first, then NCCL's communicator
        init lines (``comm 0x... rank 21 nranks 32 ...``). Only the largest communicator's ranks
        are global (a tensor- or pipeline-parallel group numbers its ranks from 0); a rank claimed
        by two nodes says nothing."""
        world = max((size for _, size, _ in self._communicators), default=0)
        found: dict[int, set[NodeName]] = {}
        for rank, size, node in self._communicators:
            if size == world:
                found.setdefault(rank, set()).add(node)
        nccl = {rank: next(iter(nodes)) for rank, nodes in found.items() if len(nodes) == 1}
        return {**nccl, **self.seen_ranks}

    def placed(self, detections: list[Detection]) -> list[Detection]:
        """The detections, those of lines a Ray driver printed for a worker (``(WorkerDict
        pid=23113, ip=10.20.0.13) ...``, or the remote traceback after a task error's header
        ``ray::WorkerDict.update() (pid=23113, ip=10.20.0.13, ...)``) placed on the worker's
        node: the one the same address names in other Ray lines (``(... ip=10.20.0.13)
        h800-node-03:23110:... NCCL INFO ...``) when exactly one does, or a node named so."""
        if not self._ray_lines:
            return detections
        hosts = {ip: next(iter(n)) for ip, n in self._ray_hosts.items() if len(n) == 1}
        result = []
        for d in detections:
            ip = self._ray_lines.get(d.seq, "")
            host = hosts.get(ip) or (NodeName(ip) if ip in self.known else None)
            result.append(d if host is None or host == d.node else replace(d, node=host))
        return result
