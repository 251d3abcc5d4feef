"""A job requeued-and-held while Slurm still cleans up its previous run must count as held.

Found by the Slurm recovery benchmark: medic's ``scontrol requeuehold`` of a job whose run had just
ended (srun ``--kill-on-bad-exit`` after an Xid 79) reached slurmctld while the job was still
COMPLETING. Slurm 22.05 then shows ``JobState=COMPLETING`` with ``Restarts=1``, ``Priority=0``,
``Reason=job_requeued_in_held_state`` and, depending on timing, ``EndTime=Unknown`` or an end time
a time limit ahead; it turns PENDING and held only once the clean-up is done. Read as "not held",
the controller skipped the release, reported convergence, and the job stayed held for good.
"""

from __future__ import annotations

import time
from pathlib import Path

from medic.config.settings import SlurmSettings
from medic.dev.slurm import LocalSlurm
from medic.domain.cluster import JobState
from medic.domain.ids import ClusterName, JobId
from medic.schedulers.slurm import LocalRunner, SlurmScheduler, convert, scontrol

from .harness import ACT, poll, scontrol_job

# `scontrol show job -o` from Slurm 22.05.8 (this suite's local cluster), 0.2 s after
# `scontrol requeuehold` of a job that had ended and was still completing.
REQUEUED_WHILE_COMPLETING = (
    "JobId=23 JobName=ign3.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=0 Nice=0 "
    "Account=root QOS=normal JobState=COMPLETING Reason=job_requeued_in_held_state "
    "Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=1:0 RunTime=00:00:00 "
    "TimeLimit=365-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T09:48:56 "
    "EligibleTime=2026-11-30T09:48:56 AccrueTime=2026-11-30T09:48:56 "
    "StartTime=2026-11-30T09:49:03 EndTime=2027-11-30T09:49:03 Deadline=N/A SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-11-30T09:48:56 Scheduler=Main Partition=gpu "
    "AllocNode:Sid=localhost:29847 ReqNodeList=(null) ExcNodeList=(null) NodeList=node[1-2] "
    "BatchHost=node1 NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=2,node=2,billing=2 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/tmp/ign3.sh "
    "WorkDir=/tmp StdErr=/tmp/ign-23.out StdIn=/dev/null StdOut=/tmp/ign-23.out Power="
)
# The batch script ends while its step's tasks ignore SIGTERM: the job stays COMPLETING for a few
# seconds (KillWait) after its run ended, the window the benchmark hit by chance.
SLOW_CLEANUP = """#!/bin/bash
srun bash -c 'trap "" TERM; while true; do sleep 0.1; done' &
sleep 2
exit 1
"""


def test_a_job_requeued_and_held_while_completing_reads_as_held() -> None:
    (fields,) = scontrol.parse_scontrol_records(REQUEUED_WHILE_COMPLETING)
    record = scontrol.job_from_scontrol(fields)
    job = convert.job_from_canonical(record, ClusterName("medic"))
    assert job.restart_count == 1
    assert job.state in (JobState.COMPLETING, JobState.PENDING)
    assert job.held


def test_a_job_requeued_while_completing_is_released_and_runs_again(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    env = cluster.env
    script = tmp_path / "slow-cleanup.sh"
    script.write_text(SLOW_CLEANUP)
    out = env.shared_dir / "slow-cleanup-%j.out"
    done = env.run(
        "sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--requeue",
        f"--output={out}", f"--comment={ACT}", str(script),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    settings = SlurmSettings(slurm_conf=str(env.slurm_conf), command_timeout_seconds=30)
    slurm = SlurmScheduler(LocalRunner(env.env), ClusterName("medic"), settings)
    try:
        poll("the job to run", lambda: scontrol_job(env, job_id).get("JobState") == "RUNNING",
             timeout=60)  # fmt: skip
        poll("the run to end", lambda: scontrol_job(env, job_id).get("JobState") != "RUNNING",
             timeout=30, every=0.02)  # fmt: skip
        slurm.requeue_hold(JobId(job_id))
        job = slurm.get_job(JobId(job_id))
        listed = {j.id: j for j in slurm.list_jobs()}[JobId(job_id)]
        assert job.restart_count == 1 and job.held, scontrol_job(env, job_id)
        assert listed.restart_count == 1 and listed.held
        slurm.release(JobId(job_id))
        released = slurm.get_job(JobId(job_id))
        assert not released.held

        def running_again() -> bool:
            info = scontrol_job(env, job_id)
            return info.get("JobState") == "RUNNING" and info.get("Restarts") == "1"

        # Not stuck held once the clean-up is over: it runs again (cred_expire + a sched pass).
        poll("the job running again", running_again, timeout=60, every=0.2)
    finally:
        env.run("scancel", job_id)
        time.sleep(0.5)
