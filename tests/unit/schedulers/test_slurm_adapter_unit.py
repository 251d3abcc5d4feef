"""SlurmScheduler / SlurmNodeProvider logic against a scripted runner (no Slurm needed): which
commands run, idempotency, the drain-ownership rule, opt-in, and error mapping."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from medic.config.settings import RebootNextState, SlurmSettings
from medic.domain.cluster import JobState, NodeState
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.repairs import RepairAction
from medic.errors import NotFoundError, PermanentError, TransientError
from medic.schedulers.slurm.adapter import SlurmNodeProvider, SlurmScheduler, is_opted_in
from medic.schedulers.slurm.convert import node_from_canonical
from medic.schedulers.slurm.normalise import normalise_nodes
from medic.schedulers.slurm.runner import CommandResult

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "slurm" / "23.11"
RECORDED = ASSETS.parent / "22.05"
"""Outputs recorded on one 22.05 cluster in each situation (scontrol and sinfo alike)."""

# Real 22.05 ``scontrol show node -o`` / ``show job -o`` lines (trimmed), with placeholders.
NODE = (
    "NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.68 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17902 Version=22.05.8 OS=Linux 6.1 #1 SMP  RealMemory=16000 "
    "AllocMem=0 FreeMem=22843 Sockets=8 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=batch  BootTime=2026-11-30T08:04:21 "
    "SlurmdStartTime=2026-11-30T08:40:48 LastBusyTime=2026-11-30T08:40:48 "
    "CfgTRES=cpu=8,mem=16000M,billing=8 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s{reason}\n"
)
JOB = (
    "JobId={id} JobName=train UserId=root(0) GroupId=root(0) MCS_label=N/A Priority={prio} "
    "Nice=0 Account=(null) QOS=(null) JobState={state} Reason={reason} Dependency=(null) "
    "Requeue=1 Restarts={restarts} BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:03 "
    "TimeLimit=365-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T08:40:52 "
    "EligibleTime=2026-11-30T08:40:52 AccrueTime=2026-11-30T08:40:52 "
    "StartTime=2026-11-30T08:40:52 EndTime={end} Deadline=N/A SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-11-30T08:40:52 Scheduler=Backfill Partition=batch "
    "AllocNode:Sid=localhost:28975 ReqNodeList=(null) ExcNodeList=(null) NodeList={nodes} "
    "NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 WorkDir=/tmp Comment={comment}  "
    "StdErr=/tmp/train-{id}.out StdIn=/dev/null StdOut=/tmp/train-{id}.out Power= \n"
)
OK = CommandResult("", "", 0)
NO_JOB = CommandResult("", "slurm_load_jobs error: Invalid job id specified\n", 1)
NO_ACCOUNTING = CommandResult("", "Slurm accounting storage is disabled\n", 1)


def node_out(name: str = "node2", state: str = "IDLE", reason: str = "") -> CommandResult:
    suffix = f" Reason={reason} [root@2026-11-30T08:41:39]" if reason else ""
    return CommandResult(NODE.format(name=name, state=state, reason=suffix), "", 0)


def job_out(
    job_id: str = "7",
    state: str = "RUNNING",
    *,
    prio: int = 100,
    reason: str = "None",
    restarts: int = 0,
    nodes: str = "node1",
    end: str = "2027-11-30T08:40:52",
    comment: str = '{"medic": {}}',
) -> CommandResult:
    text = JOB.format(
        id=job_id,
        state=state,
        prio=prio,
        reason=reason,
        restarts=restarts,
        nodes=nodes,
        end=end,
        comment=comment,
    )
    return CommandResult(text, "", 0)


class Script:
    """A runner answering argv prefixes with queued results, in order; records every call."""

    def __init__(self) -> None:
        self.answers: list[tuple[tuple[str, ...], CommandResult]] = []
        self.calls: list[list[str]] = []

    def on(self, *prefix: str, result: CommandResult = OK) -> Script:
        self.answers.append((prefix, result))
        return self

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        self.calls.append(list(argv))
        for i, (prefix, result) in enumerate(self.answers):
            if tuple(argv[: len(prefix)]) == prefix:
                del self.answers[i]
                return result
        raise AssertionError(f"unexpected command {list(argv)}")

    def ran(self, *prefix: str) -> bool:
        return any(tuple(c[: len(prefix)]) == prefix for c in self.calls)


def scheduler(script: Script, *, opt_in: bool = True) -> SlurmScheduler:
    return SlurmScheduler(script, ClusterName("c"), SlurmSettings(opt_in=opt_in))


def test_list_nodes_reads_scontrol() -> None:
    payload = (RECORDED / "scontrol-show-node-o.drained.txt").read_text()
    script = Script().on("scontrol", "show", "nodes", "-o", result=CommandResult(payload, "", 0))
    nodes = {str(n.name): n for n in scheduler(script).list_nodes()}
    assert nodes["node2"].state is NodeState.DRAINED and nodes["node2"].reason == "medic: test"


@pytest.mark.parametrize("situation", ["idle", "drained", "down"])
def test_scontrol_listing_gives_the_nodes_sinfo_json_gave(situation: str) -> None:
    """The listing moved from ``sinfo -N --json`` to ``scontrol show nodes -o`` (7x cheaper
    for Slurm to print at 12,500 nodes): on the same recorded cluster both give the same nodes."""
    text = (RECORDED / f"scontrol-show-node-o.{situation}.txt").read_text()
    from_scontrol = scheduler(
        Script().on("scontrol", "show", "nodes", "-o", result=CommandResult(text, "", 0))
    ).list_nodes()
    payload = json.loads((RECORDED / f"sinfo-json.{situation}.json").read_text())
    from_json = [node_from_canonical(n) for n in normalise_nodes(payload) if n["name"]]
    shown = {n.name: n for n in from_scontrol}
    assert [shown[n.name] for n in from_json if n.name in shown] == [
        n for n in from_json if n.name in shown
    ]
    assert shown, "the recording names nodes"


def jobs_payload(*comments: str) -> CommandResult:
    """``scontrol show jobs -o`` of jobs 1, 2, ... with these comments (empty: none)."""
    lines = [
        job_out(str(i), comment=comment or "(null)").stdout
        for i, comment in enumerate(comments, start=1)
    ]
    return CommandResult("".join(lines), "", 0)


LIST_JOBS = ("scontrol", "show", "jobs")


def test_list_jobs_keeps_only_opted_in_jobs_and_remembers_accounting_is_off() -> None:
    script = Script()
    script.on(*LIST_JOBS, result=jobs_payload("", '{"medic": {"mode": "act"}}'))
    script.on("sacct", result=NO_ACCOUNTING)
    script.on(*LIST_JOBS, result=jobs_payload("", '{"medic": {"mode": "act"}}'))
    s = scheduler(script)
    assert [j.id for j in s.list_jobs()] == ["2"]
    assert [j.id for j in s.list_jobs()] == ["2"]
    assert sum(1 for c in script.calls if c[0] == "sacct") == 1


def test_list_jobs_without_opt_in_sees_every_job() -> None:
    script = Script().on(*LIST_JOBS, result=jobs_payload("", "plain"))
    script.on("sacct", result=NO_ACCOUNTING)
    assert {j.id for j in scheduler(script, opt_in=False).list_jobs()} == {"1", "2"}


def test_list_jobs_adds_recently_ended_jobs_from_accounting() -> None:
    sacct = json.loads((ASSETS / "sacct-json.all-situations.json").read_text())
    for job in sacct["jobs"]:
        job["job_id"] += 100
        job["comment"]["job"] = '{"medic": {}}'
    script = Script().on(*LIST_JOBS, result=jobs_payload("", '{"medic": {}}'))
    script.on("sacct", result=CommandResult(json.dumps(sacct), "", 0))
    jobs = {str(j.id): j for j in scheduler(script).list_jobs()}
    assert jobs["102"].state is JobState.CANCELLED and jobs["102"].restart_count == 1
    assert jobs["103"].state is JobState.FAILED and "2" in jobs
    sacct_argv = next(c for c in script.calls if c[0] == "sacct")
    assert "--duplicates" in sacct_argv and "--allusers" in sacct_argv


def test_accounting_is_asked_at_most_every_poll_interval() -> None:
    sacct = (ASSETS / "sacct-json.all-situations.json").read_text()
    script = Script().on(*LIST_JOBS, result=jobs_payload("", "{}"))
    script.on("sacct", result=CommandResult(sacct, "", 0))
    script.on(*LIST_JOBS, result=jobs_payload("", "{}"))
    s = scheduler(script, opt_in=False)
    first, second = s.list_jobs(), s.list_jobs()
    assert {j.id for j in first} == {j.id for j in second} and len(first) > 2
    assert sum(1 for c in script.calls if c[0] == "sacct") == 1


def test_a_failing_sacct_does_not_blind_the_loop() -> None:
    script = Script().on(*LIST_JOBS, result=jobs_payload("", '{"medic": {}}'))
    script.on("sacct", result=CommandResult("", "sacct: error: Problem talking to the database", 1))
    assert [j.id for j in scheduler(script).list_jobs()] == ["2"]


def test_a_failed_job_listing_is_transient_not_empty() -> None:
    down = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
    script = Script().on(*LIST_JOBS, result=CommandResult("", down, 1))
    with pytest.raises(TransientError):
        scheduler(script).list_jobs()


def test_no_jobs_in_the_system_is_an_empty_listing() -> None:
    script = Script().on(*LIST_JOBS, result=CommandResult("No jobs in the system\n", "", 0))
    script.on("sacct", result=NO_ACCOUNTING)
    assert scheduler(script).list_jobs() == []


def test_get_job_reads_scontrol() -> None:
    job = scheduler(Script().on("scontrol", "show", "job", result=job_out())).get_job(JobId("7"))
    assert job.state is JobState.RUNNING and job.nodes == ("node1",)
    assert job.log_paths == ("/tmp/train-7.out",) and job.comment == '{"medic": {}}'


def test_get_job_of_an_array_task() -> None:
    text = job_out("130").stdout.replace("JobName=", "ArrayJobId=123 ArrayTaskId=4 JobName=")
    script = Script().on("scontrol", result=CommandResult(text, "", 0))
    assert scheduler(script).get_job(JobId("123_4")).id == "130"


def test_get_job_falls_back_to_accounting_then_not_found() -> None:
    sacct = (ASSETS / "sacct-json.all-situations.json").read_text()
    script = Script().on("scontrol", result=NO_JOB).on("sacct", result=CommandResult(sacct, "", 0))
    assert scheduler(script).get_job(JobId("3")).state is JobState.FAILED
    script = Script().on("scontrol", result=NO_JOB).on("sacct", result=NO_ACCOUNTING)
    with pytest.raises(NotFoundError):
        scheduler(script).get_job(JobId("3"))


@pytest.mark.parametrize("bad", ["abc", "-1", "7; rm -rf /", ""])
def test_malformed_job_ids_are_not_found_without_running_anything(bad: str) -> None:
    script = Script()
    with pytest.raises(NotFoundError):
        scheduler(script).get_job(JobId(bad))
    assert script.calls == []


@pytest.mark.parametrize("bad", ["-n", "a b", "node1,node2", "", "x;y"])
def test_malformed_node_names_are_not_found_without_running_anything(bad: str) -> None:
    script = Script()
    with pytest.raises(NotFoundError):
        scheduler(script).drain_node(NodeName(bad), "medic: x")
    with pytest.raises(NotFoundError):
        scheduler(script).set_excluded_nodes(JobId("7"), frozenset({NodeName(bad)}))
    assert script.calls == []


def test_requeue_hold_of_a_running_job() -> None:
    script = Script().on("scontrol", "requeuehold", "7")
    scheduler(script).requeue_hold(JobId("7"))
    assert script.calls == [["scontrol", "requeuehold", "7"]]


def test_requeue_hold_of_a_held_job_is_a_no_op() -> None:
    pending = CommandResult("", "Job is pending execution for job 7\n", 1)
    script = Script().on("scontrol", "requeuehold", result=pending)
    script.on("scontrol", "show", "job", result=job_out(state="PENDING", prio=0, nodes=""))
    scheduler(script).requeue_hold(JobId("7"))
    assert not script.ran("scontrol", "hold")


def test_requeue_hold_of_a_pending_job_holds_it() -> None:
    pending = CommandResult("", "Job is pending execution for job 7\n", 1)
    script = Script().on("scontrol", "requeuehold", result=pending)
    script.on("scontrol", "show", "job", result=job_out(state="PENDING", reason="Priority"))
    script.on("scontrol", "hold", "7")
    scheduler(script).requeue_hold(JobId("7"))
    assert script.ran("scontrol", "hold", "7")


def test_requeue_hold_of_an_unknown_job_is_not_found() -> None:
    script = Script().on("scontrol", result=CommandResult("", "Invalid job id specified\n", 1))
    with pytest.raises(NotFoundError):
        scheduler(script).requeue_hold(JobId("999"))


def test_excluded_nodes_are_written_compressed() -> None:
    script = Script().on("scontrol", "update")
    nodes = frozenset(NodeName(n) for n in ("node3", "node1", "node2", "gpu07"))
    scheduler(script).set_excluded_nodes(JobId("7"), nodes)
    assert script.calls == [["scontrol", "update", "JobId=7", "ExcNodeList=gpu07,node[1-3]"]]


def test_excluding_an_unknown_node_is_permanent_not_a_missing_job() -> None:
    bad = CommandResult("", "Invalid node name specified for job 7\n", 1)
    script = Script().on("scontrol", "update", result=bad)
    with pytest.raises(PermanentError) as caught:
        scheduler(script).set_excluded_nodes(JobId("7"), frozenset({NodeName("nodeZ")}))
    assert not isinstance(caught.value, NotFoundError)


def test_cancel() -> None:
    script = Script().on("scontrol", result=NO_JOB).on("sacct", result=NO_ACCOUNTING)
    with pytest.raises(NotFoundError):  # scancel itself says nothing for an unknown id
        scheduler(script).cancel(JobId("999"), "medic: x")
    script = Script().on("scontrol", result=job_out(state="CANCELLED", end="2026-11-30T09:00:00"))
    scheduler(script).cancel(JobId("7"), "medic: x")
    assert not script.ran("scancel")
    script = Script().on("scontrol", result=job_out()).on("scancel", "7")
    scheduler(script).cancel(JobId("7"), "medic: x")
    assert script.ran("scancel", "7")


def test_drain_adds_the_medic_prefix() -> None:
    script = Script().on("scontrol", "show", "node", result=node_out()).on("scontrol", "update")
    scheduler(script).drain_node(NodeName("node2"), "xid 79 on gpu 3")
    assert script.calls[-1] == [
        "scontrol",
        "update",
        "NodeName=node2",
        "State=DRAIN",
        "Reason=medic: xid 79 on gpu 3",
    ]


@pytest.mark.parametrize("state", ["IDLE+DRAIN", "MIXED+DRAIN", "DOWN+NOT_RESPONDING", "IDLE*"])
def test_drain_never_overrides_someone_elses(state: str) -> None:
    script = Script().on("scontrol", result=node_out(state=state, reason="NHC: bad disk"))
    with pytest.raises(PermanentError, match=r"root.*NHC: bad disk"):
        scheduler(script).drain_node(NodeName("node2"), "medic: x")
    assert not script.ran("scontrol", "update")


def test_drain_of_a_node_medic_drained_is_a_no_op() -> None:
    script = Script().on("scontrol", result=node_out(state="IDLE+DRAIN", reason="medic: old"))
    scheduler(script).drain_node(NodeName("node2"), "medic: new")
    assert not script.ran("scontrol", "update")


def test_resume() -> None:
    script = Script().on("scontrol", result=node_out(state="IDLE+DRAIN", reason="medic: x"))
    script.on("scontrol", "update")
    scheduler(script).resume_node(NodeName("node2"), "medic: healthy")
    assert script.calls[-1] == ["scontrol", "update", "NodeName=node2", "State=RESUME"]
    script = Script().on("scontrol", result=node_out(state="IDLE"))
    scheduler(script).resume_node(NodeName("node2"), "medic: healthy")
    assert not script.ran("scontrol", "update")


@pytest.mark.parametrize(("state", "reason"), [("IDLE+DRAIN", "NHC: x"), ("DOWN", "")])
def test_resume_refuses_nodes_medic_did_not_drain(state: str, reason: str) -> None:
    script = Script().on("scontrol", result=node_out(state=state, reason=reason))
    with pytest.raises(PermanentError):
        scheduler(script).resume_node(NodeName("node2"), "medic: x")
    assert not script.ran("scontrol", "update")


def test_unknown_node_is_not_found() -> None:
    script = Script().on("scontrol", result=CommandResult("", "Node nodeX not found\n", 1))
    with pytest.raises(NotFoundError):
        scheduler(script).drain_node(NodeName("nodeX"), "medic: x")


def test_reboot_asap_with_resume_and_medic_reason() -> None:
    script = Script().on("scontrol", "show", result=node_out()).on("scontrol", "reboot")
    SlurmNodeProvider(script, SlurmSettings()).reboot(NodeName("node2"), "xid 79")
    assert script.calls[-1] == [
        "scontrol",
        "reboot",
        "ASAP",
        "nextstate=RESUME",
        "reason=medic: xid 79",
        "node2",
    ]


def test_nextstate_down_keeps_a_rebooted_node_out_until_medic_returns_it() -> None:
    down = SlurmSettings(reboot_nextstate=RebootNextState.DOWN)
    script = Script().on("scontrol", "show", result=node_out()).on("scontrol", "reboot")
    SlurmNodeProvider(script, down).reboot(NodeName("node2"), "xid 79")
    assert script.calls[-1][3] == "nextstate=DOWN"

    before = "node2@" + str(int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()))

    def rejoined(settings: SlurmSettings, state: str, reason: str) -> bool:
        script = Script().on("scontrol", result=node_out(state=state, reason=reason))
        provider = SlurmNodeProvider(script, settings)
        return provider.rejoined(NodeName("node2"), RepairAction.REBOOT, before)

    ours = "medic: repair 4 reboot"
    # back, held DOWN for medic (a new BootTime): rejoined, and only under nextstate=DOWN
    assert rejoined(down, "DOWN", ours)
    assert not rejoined(SlurmSettings(), "DOWN", ours)
    assert not rejoined(down, "DOWN", "admin: bad PSU"), "someone else's DOWN is not back"
    assert not rejoined(down, "DOWN+NOT_RESPONDING", ours), "not answering is not back"
    assert rejoined(down, "IDLE+DRAIN", ours), "ReturnToService=2 brought it back: fine too"


def test_slurm_reboots_and_removes_by_itself_and_needs_hooks_for_the_rest() -> None:
    provider = SlurmNodeProvider(Script(), SlurmSettings())
    assert {a for a in RepairAction if provider.can(a)} == {
        RepairAction.REBOOT,
        RepairAction.REMOVE,
    }
    provider.execute(NodeName("node2"), RepairAction.REMOVE, 7)  # stays drained: nothing to run
    with pytest.raises(PermanentError, match=r"repair\.reprovision_command"):
        provider.execute(NodeName("node2"), RepairAction.REPROVISION, 7)


@pytest.mark.parametrize(
    ("state", "action", "expected"),
    [
        ("IDLE+DRAIN+REBOOT_REQUESTED", RepairAction.REBOOT, True),
        ("DOWN+DRAIN+REBOOT_ISSUED", RepairAction.REBOOT, True),
        ("IDLE+DRAIN", RepairAction.REBOOT, False),  # answers, nothing pending: never happened
        ("IDLE+DRAIN+NOT_RESPONDING", RepairAction.REBOOT, None),  # on its way, or broken
        ("DOWN+DRAIN", RepairAction.REBOOT, None),
        ("IDLE+DRAIN", RepairAction.REMOVE, False),  # nothing runs for a removal
        ("IDLE+DRAIN", RepairAction.REPROVISION, None),  # an operator hook's: not Slurm's
    ],
)
def test_in_flight_reads_the_reboot_flags(
    state: str, action: RepairAction, expected: bool | None
) -> None:
    script = Script().on("scontrol", result=node_out(state=state, reason="medic: repair 4"))
    provider = SlurmNodeProvider(script, SlurmSettings())
    assert provider.in_flight(NodeName("node2"), action) is expected


def test_reboot_is_idempotent_and_respects_other_owners() -> None:
    pending = node_out(state="IDLE+DRAIN+REBOOT_REQUESTED", reason="medic: xid 79")
    script = Script().on("scontrol", result=pending)
    SlurmNodeProvider(script, SlurmSettings()).reboot(NodeName("node2"), "xid 79")
    assert not script.ran("scontrol", "reboot")
    script = Script().on("scontrol", result=node_out(state="IDLE+DRAIN", reason="Action:Replace"))
    with pytest.raises(PermanentError):
        SlurmNodeProvider(script, SlurmSettings()).reboot(NodeName("node2"), "xid 79")


def test_boot_id_is_the_boot_time() -> None:
    script = Script().on("scontrol", result=node_out()).on("scontrol", result=node_out())
    provider = SlurmNodeProvider(script, SlurmSettings())
    first = provider.boot_id(NodeName("node2"))
    assert first.startswith("node2@") and first == provider.boot_id(NodeName("node2"))


@pytest.mark.parametrize(
    ("comment", "opted"),
    [
        ('{"medic": {"mode": "act"}}', True),
        ('{"medic": null}', True),
        ('{"APS": {}}', False),
        ("medic", False),
        ("", False),
        (None, False),
        ("[1]", False),
        # a number too long to convert does not hide an opted-in job (its options are reported)
        ('{"medic": {"max_attempts_without_progress": ' + "9" * 5000 + "}}", True),
        ("[" * 100_000, False),  # nested deeper than the parser goes
    ],
)
def test_is_opted_in(comment: str | None, opted: bool) -> None:
    assert is_opted_in(comment) is opted


def test_a_comment_cannot_forge_the_fields_its_job_printed_before_it() -> None:
    forged = '{"medic": {}} x Restarts=5 NodeList=node9 JobState=COMPLETED'
    job = scheduler(Script().on("scontrol", "show", "job", result=job_out(comment=forged))).get_job(
        JobId("7")
    )
    assert job.restart_count == 0 and job.nodes == ("node1",) and job.state is JobState.RUNNING
    assert job.comment == forged
