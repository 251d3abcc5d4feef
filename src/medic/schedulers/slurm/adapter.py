"""``SlurmScheduler`` and ``SlurmNodeProvider``: medic's ``Scheduler`` and ``NodeProvider`` ports
on a real Slurm cluster, through ``scontrol``/``sacct``/``scancel``.

Reads: ``scontrol show nodes -o`` (nodes) and ``scontrol show jobs -o`` (pending, running and
recently ended jobs, which slurmctld keeps for ``MinJobAge``), ``sacct --json`` for jobs that
ended within ``RECENT_END_SECONDS`` but are gone from slurmctld (when accounting is on), and
``scontrol show job/node -o`` for one fresh object. The listings were ``sinfo -N --json`` and
``squeue --json``: at 12,500 nodes and 2,000 jobs Slurm prints the one-line records 7x faster
(``docs/scale.md``), and one parser serves listings and single reads. Writes follow the
requeue-hold -> exclude -> release recipe and the drain-ownership rule: medic only resumes or
re-drains nodes whose reason starts with ``medic:`` and never touches a node someone else drained
or downed (that raises ``PermanentError`` naming the owner).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence

from medic.config.settings import RebootNextState, SlurmSettings
from medic.domain.cluster import (
    MEDIC_REASON_PREFIX,
    OUT_OF_SERVICE,
    REQUEST_PREFIX,
    Job,
    Node,
    NodeState,
    is_medic_reason,
)
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.repairs import RepairAction
from medic.errors import AdapterError, NotFoundError, PermanentError
from medic.schedulers.slurm import convert, scontrol
from medic.schedulers.slurm.commands import SlurmCli
from medic.schedulers.slurm.hostlist import compress_hostlist
from medic.schedulers.slurm.normalise import (
    normalise_accounting_jobs,
)
from medic.schedulers.slurm.records import CanonicalJob, CanonicalNode
from medic.schedulers.slurm.runner import CommandRunner

__all__ = [
    "ACCOUNTING_POLL_SECONDS",
    "RECENT_END_SECONDS",
    "SlurmNodeProvider",
    "SlurmScheduler",
    "is_opted_in",
]

logger = logging.getLogger(__name__)

RECENT_END_SECONDS = 600
"""How far back ``list_jobs`` asks accounting for jobs that ended (and slurmctld forgot)."""
ACCOUNTING_POLL_SECONDS = 30.0
"""``list_jobs`` asks slurmdbd at most this often (it only adds jobs slurmctld already forgot,
which keeps ended jobs for ``MinJobAge``, 300 s by default)."""

_JOB_ID = re.compile(r"^\d+(_\d+)?(\+\d+)?$")
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ACCOUNTING_OFF = "accounting storage is disabled"
_REBOOTING = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED"})
_VALIDATION_FAILED = "medic: validation failed"
"""A drain reason of node repair that names the hardware ticket: it replaces medic's earlier one."""


def _job_id(job_id: JobId) -> str:
    if not _JOB_ID.match(job_id):
        raise NotFoundError(f"{job_id!r} is not a Slurm job id")
    return str(job_id)


def _node_name(node: NodeName) -> str:
    if not _NODE_NAME.match(node):
        raise NotFoundError(f"{node!r} is not a Slurm node name")
    return str(node)


def _ids_of(fields: dict[str, str]) -> set[str]:
    """The ids a ``scontrol show job`` record answers to: ``JobId`` and ``<array>_<task>``."""
    ids = {fields.get("JobId", "")}
    if fields.get("ArrayTaskId"):
        ids.add(f"{fields.get('ArrayJobId', '')}_{fields['ArrayTaskId']}")
    return ids


def _medic_reason(reason: str) -> str:
    reason = " ".join(reason.split()) or "medic"
    return reason if is_medic_reason(reason) else f"{MEDIC_REASON_PREFIX} {reason}"


def is_opted_in(comment: str | None) -> bool:
    """True when the job comment is a JSON object with a ``"medic"`` key (its numbers are not
    converted: one too long to convert must not hide an opted-in job, whose options the loop then
    reports as invalid)."""
    try:
        data = json.loads(comment or "", parse_int=lambda _text: 0)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "medic" in data


class _NodeReader:
    """One node's current state from ``scontrol show node -o`` (fresher than ``sinfo``)."""

    def __init__(self, cli: SlurmCli) -> None:
        self._cli = cli

    def read(self, node: NodeName) -> CanonicalNode:
        name = _node_name(node)
        out = self._cli.run(["scontrol", "show", "node", "-o", name]).stdout
        for fields in scontrol.parse_scontrol_records(out):
            if fields.get("NodeName") == name:
                return scontrol.node_from_scontrol(fields)
        raise NotFoundError(f"scontrol show node {name}: no such node")

    @staticmethod
    def out_of_service(record: CanonicalNode) -> bool:
        """Drained, draining or down (DRAIN and FAIL flags count on a busy node too)."""
        state = convert.node_state(record["state"], record["flags"])
        return state in OUT_OF_SERVICE or bool({"DRAIN", "FAIL"} & set(record["flags"]))

    def refuse_foreign(self, node: NodeName, record: CanonicalNode, action: str) -> None:
        """Raise ``PermanentError`` when someone other than medic drained or downed the node.

        A drain whose reason is a repair request (``medic-request: ...``) was handed to medic:
        medic may take it over (drain it with its own reason, reboot it)."""
        reason = record["reason"]
        handed_over = reason.lower().startswith(REQUEST_PREFIX) and action != "resume"
        if (
            self.out_of_service(record)
            and reason
            and not is_medic_reason(reason)
            and not handed_over
        ):
            state = convert.node_state(record["state"], record["flags"]).value
            owner = f" by {record['reason_user']}" if record["reason_user"] else ""
            raise PermanentError(
                f"node {node} was taken out of service{owner} (now {state}) with reason "
                f"{reason!r}; medic does not {action} a node it did not take out of service"
            )


class SlurmScheduler:
    """``Scheduler`` port for one Slurm cluster."""

    def __init__(
        self, runner: CommandRunner, cluster: ClusterName, settings: SlurmSettings
    ) -> None:
        self._cli = SlurmCli(runner, timeout=settings.command_timeout_seconds)
        self._cluster = cluster
        self._opt_in = settings.opt_in
        self._nodes = _NodeReader(self._cli)
        self._accounting: bool | None = None  # unknown until sacct answered once
        self._ended: tuple[float, list[CanonicalJob]] | None = None  # (monotonic time, records)

    @property
    def cluster(self) -> ClusterName:
        return self._cluster

    # --- reads ---------------------------------------------------------------------------
    def list_nodes(self) -> Sequence[Node]:
        # ``scontrol show nodes -o``, not ``sinfo -N --json``: the same fields, one line per node,
        # and at 12,500 nodes 0.09 s instead of 0.66 s for Slurm to print (7 MB instead of 16 MB;
        # benchmarks/bench_slurm_scale.py). Parsing them is scontrol.py's, as for one node.
        out = self._cli.run(["scontrol", "show", "nodes", "-o"]).stdout
        records = [scontrol.node_from_scontrol(r) for r in scontrol.parse_scontrol_records(out)]
        return [convert.node_from_canonical(n) for n in records if n["name"]]

    def list_jobs(self) -> Sequence[Job]:
        # ``scontrol show jobs -o`` as for one job, not ``squeue --json``: 0.04 s instead of
        # 0.29 s for Slurm to print 2,000 jobs (benchmarks/bench_slurm_scale.py), the same jobs.
        out = self._cli.run(["scontrol", "show", "jobs", "-o"]).stdout
        records = [
            scontrol.job_from_scontrol(fields)
            for fields in scontrol.parse_scontrol_records(out)
            if fields.get("JobId")  # "No jobs in the system"
        ]
        seen = {r["job_id"] for r in records}
        records += [r for r in self._recently_ended() if r["job_id"] not in seen]
        jobs = [convert.job_from_canonical(r, self._cluster) for r in records]
        return [j for j in jobs if is_opted_in(j.comment)] if self._opt_in else jobs

    def _accounting_records(self, argv: list[str]) -> list[CanonicalJob]:
        if self._accounting is False:
            return []
        result = self._cli.run(argv, tolerate=(_ACCOUNTING_OFF,))
        if result.returncode != 0:
            logger.info("Slurm accounting is disabled: ended jobs are seen only via scontrol")
            self._accounting = False
            return []
        self._accounting = True
        try:
            payload = json.loads(result.stdout)
        except ValueError:
            logger.warning("sacct printed no JSON; ignoring it this pass")
            return []
        return convert.merge_accounting_runs(normalise_accounting_jobs(payload))

    def _recently_ended(self) -> list[CanonicalJob]:
        now = time.monotonic()
        if self._ended is not None and now - self._ended[0] < ACCOUNTING_POLL_SECONDS:
            return self._ended[1]
        argv = ["sacct", "--json", "--allusers", "--duplicates"]
        argv += ["--starttime", f"now-{RECENT_END_SECONDS}", "--endtime", "now"]
        try:
            records = self._accounting_records(argv)
        except AdapterError as exc:  # scontrol answered; a slow slurmdbd must not blind the loop
            logger.warning("sacct failed, ended jobs come from scontrol only: %s", exc)
            return []
        live = {"PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "COMPLETING"}
        ended = [r for r in records if r["state"] not in live]
        self._ended = (now, ended)
        return ended

    def get_job(self, job_id: JobId) -> Job:
        jid = _job_id(job_id)
        try:
            out = self._cli.run(["scontrol", "show", "job", "-o", jid]).stdout
        except NotFoundError:
            argv = ["sacct", "--json", "--allusers", "--duplicates", "--jobs", jid]
            found = [r for r in self._accounting_records(argv) if r["job_id"] == jid]
            if not found:
                raise
            return convert.job_from_canonical(found[0], self._cluster)
        records = scontrol.parse_scontrol_records(out)
        fields = next((r for r in records if jid in _ids_of(r)), None)
        if fields is None:
            raise NotFoundError(f"scontrol show job {jid}: no such job")
        return convert.job_from_canonical(scontrol.job_from_scontrol(fields), self._cluster)

    # --- job actions ---------------------------------------------------------------------
    def requeue_hold(self, job_id: JobId) -> None:
        jid = _job_id(job_id)
        result = self._cli.run(["scontrol", "requeuehold", jid], tolerate=("pending execution",))
        if result.returncode != 0 and not self.get_job(job_id).held:
            # Already pending (never ran, or requeued by Slurm): hold it so it stays put.
            self._cli.run(["scontrol", "hold", jid])

    def set_admin_comment(self, job_id: JobId, text: str) -> None:
        # One argv element: scontrol takes the whole value after "=", spaces and all.
        self._cli.run(["scontrol", "update", f"JobId={_job_id(job_id)}", f"AdminComment={text}"])

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        jid = _job_id(job_id)
        names = compress_hostlist(_node_name(n) for n in sorted(nodes))
        try:
            self._cli.run(["scontrol", "update", f"JobId={jid}", f"ExcNodeList={names}"])
        except NotFoundError as exc:
            if "node name" in str(exc).lower():
                raise PermanentError(f"cannot exclude {names} from job {jid}: {exc}") from exc
            raise

    def release(self, job_id: JobId) -> None:
        self._cli.run(["scontrol", "release", _job_id(job_id)])

    def cancel(self, job_id: JobId, reason: str) -> None:
        # scancel exits 0 for an unknown job id, so look the job up first.
        job = self.get_job(job_id)
        if job.state.is_terminal:
            return
        logger.info("cancelling Slurm job %s: %s", job_id, reason)
        self._cli.run(["scancel", _job_id(job_id)], tolerate=("already completing or completed",))

    # --- node actions --------------------------------------------------------------------
    def drain_node(self, node: NodeName, reason: str) -> None:
        record = self._nodes.read(node)
        self._nodes.refuse_foreign(node, record, "drain")
        state = convert.node_state(record["state"], record["flags"])
        wanted = _medic_reason(reason)
        drained = state in (NodeState.DRAINED, NodeState.DRAINING) or "DRAIN" in record["flags"]
        ticket = wanted.startswith(_VALIDATION_FAILED) and record["reason"] != wanted
        if drained and is_medic_reason(record["reason"]) and not ticket:
            return  # ours already (only a failed validation's ticket replaces medic's reason)
        argv = ["scontrol", "update", f"NodeName={record['name']}", "State=DRAIN"]
        self._cli.run([*argv, f"Reason={wanted}"])

    def resume_node(self, node: NodeName, reason: str) -> None:
        record = self._nodes.read(node)
        if not self._nodes.out_of_service(record):
            return  # in service already
        if not is_medic_reason(record["reason"]):
            self._nodes.refuse_foreign(node, record, "resume")
            raise PermanentError(
                f"node {node} is out of service with no reason of medic's; medic resumes only "
                "the nodes it drained"
            )
        logger.info("resuming Slurm node %s: %s", node, reason)
        self._cli.run(["scontrol", "update", f"NodeName={record['name']}", "State=RESUME"])


_SLURM_ACTIONS = frozenset({RepairAction.REBOOT, RepairAction.REMOVE})
"""What Slurm does by itself: ``scontrol reboot``, and keeping a removed node drained."""


class SlurmNodeProvider:
    """``NodeProvider`` port through Slurm: reboot with ``scontrol reboot``, boot id from
    ``scontrol show node``'s ``BootTime``.

    ``execute`` does ``reboot``, and ``remove`` by leaving the node drained; every other repair
    action needs an operator hook (``medic.schedulers.hooks``; without one ``can`` is False and
    ``execute`` raises ``PermanentError``). ``rejoined``: the node answers (not
    NOT_RESPONDING), has no reboot pending or issued, is not DOWN (unless held DOWN for medic,
    below), and, after a reboot-like action, has a new ``BootTime``. ``in_flight``: a reboot is
    under way while the node carries ``REBOOT_REQUESTED`` or ``REBOOT_ISSUED``, cannot be told
    while it does not answer or is DOWN, and is not under way otherwise.

    ``reboot`` asks Slurm to reboot the node as soon as its jobs end (``ASAP`` drains it
    meanwhile, with medic's reason) and what to do after (``nextstate=``, resume by default);
    the cluster's ``RebootProgram`` does the work (``PermanentError`` when none is configured).
    With ``slurm.reboot_nextstate: resume`` (the default) Slurm has resumed the node before
    medic drains it again for a revalidation, so a job can start there in between (a reboot
    without ``ASAP``/``nextstate`` does not keep the drain either: slurmd's registration clears
    it, seen on Slurm 22.05). ``down`` closes that window: the node comes back DOWN, with
    medic's reason, and only medic returns it to service (with ``ReturnToService=2`` slurmd
    brings it back by itself, so it helps only with 0 or 1).
    ``boot_id`` is the node's ``BootTime`` as slurmd reports it: it changes at every reboot (a
    slurmd restart without a reboot may move it by a second).
    """

    def __init__(self, runner: CommandRunner, settings: SlurmSettings) -> None:
        self._cli = SlurmCli(runner, timeout=settings.command_timeout_seconds)
        self._nodes = _NodeReader(self._cli)
        self._nextstate = settings.reboot_nextstate

    def reboot(self, node: NodeName, reason: str) -> None:
        record = self._nodes.read(node)
        self._nodes.refuse_foreign(node, record, "reboot")
        if _REBOOTING & set(record["flags"]):
            return  # already on its way
        argv = ["scontrol", "reboot", "ASAP", f"nextstate={self._nextstate.value.upper()}"]
        self._cli.run([*argv, f"reason={_medic_reason(reason)}", record["name"]])

    def boot_id(self, node: NodeName) -> str:
        return self._boot_id(node, self._nodes.read(node))

    @staticmethod
    def _boot_id(node: NodeName, record: CanonicalNode) -> str:
        if record["boot_time"] is None:
            raise PermanentError(f"scontrol show node {node}: no BootTime reported")
        return f"{record['name']}@{record['boot_time']}"

    def can(self, action: RepairAction) -> bool:
        return action in _SLURM_ACTIONS

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        if action is RepairAction.REMOVE:
            return  # out for RMA: the node stays drained by medic, nothing to run here
        if action is not RepairAction.REBOOT:
            raise PermanentError(
                f"Slurm cannot {action.value} {node} by itself: configure "
                f"repair.{action.value}_command (an operator hook)"
            )
        self.reboot(node, f"medic: repair {repair_id} reboot")

    def in_flight(self, node: NodeName, action: RepairAction) -> bool | None:
        if action is RepairAction.REMOVE:
            return False  # nothing runs: the node only stays drained
        if action is not RepairAction.REBOOT:
            return None  # Slurm does not carry it out: an operator hook does
        record = self._nodes.read(node)
        flags = set(record["flags"])
        if flags & _REBOOTING:
            return True
        down = convert.node_state(record["state"], flags) is NodeState.DOWN
        if down or "NOT_RESPONDING" in flags:
            return None  # on its way down or back, or broken: the boot id tells later
        return False

    def rejoined(self, node: NodeName, action: RepairAction, boot_id_before: str | None) -> bool:
        record = self._nodes.read(node)
        flags = set(record["flags"])
        if flags & (_REBOOTING | {"NOT_RESPONDING"}):
            return False
        # With nextstate=DOWN a rebooted node comes back DOWN with medic's reason: that is the
        # node back and held for medic (a new BootTime below tells it rebooted); any other
        # DOWN is not back.
        held = self._nextstate is RebootNextState.DOWN and is_medic_reason(record["reason"])
        if convert.node_state(record["state"], flags) is NodeState.DOWN and not held:
            return False
        if boot_id_before is None or action in (RepairAction.RESET_GPU, RepairAction.REMOVE):
            return True
        return record["boot_time"] is not None and self._boot_id(node, record) != boot_id_before
