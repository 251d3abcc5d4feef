"""Failed Slurm commands -> medic.errors, from stderr that real Slurm 22.05 printed."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from medic.errors import (
    AdapterError,
    NotFoundError,
    PermanentError,
    TransientError,
    UnauthorizedError,
)
from medic.schedulers.slurm.commands import SlurmCli, classify_failure
from medic.schedulers.slurm.runner import CommandResult

# (argv, stderr, exit status) as printed by Slurm 22.05.8 (Debian 12) on a local cluster.
RECORDED: list[tuple[list[str], str, int, type[AdapterError]]] = [
    (
        ["scontrol", "show", "job", "-o", "1"],
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
        1,
        TransientError,
    ),
    (
        ["scancel", "1"],
        "scancel: error: Kill job error on job id 1: Unable to contact slurm controller "
        "(connect failure)\n",
        8,
        TransientError,
    ),
    (
        ["scontrol", "requeuehold", "1"],
        "Unexpected message received for job 1\n",
        1,
        TransientError,
    ),
    (
        ["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=x"],
        "slurm_update error: Unable to contact slurm controller (connect failure)\n",
        1,
        TransientError,
    ),
    (
        ["squeue"],
        "slurm_load_jobs error: Socket timed out on send/recv operation\n",
        1,
        TransientError,
    ),
    (
        ["scontrol", "requeuehold", "999"],
        "Invalid job id specified for job 999\n",
        1,
        NotFoundError,
    ),
    (
        ["scontrol", "release", "999"],
        "Invalid job id specified for job 999\nslurm_suspend error: Invalid job id specified\n",
        1,
        NotFoundError,
    ),
    (
        ["scontrol", "show", "job", "-o", "999"],
        "slurm_load_jobs error: Invalid job id specified\n",
        1,
        NotFoundError,
    ),
    (["scontrol", "show", "node", "-o", "nodeX"], "Node nodeX not found\n", 1, NotFoundError),
    (
        ["scontrol", "update", "NodeName=nodeX", "State=DRAIN", "Reason=medic: x"],
        "slurm_update error: Invalid node name specified\n",
        1,
        NotFoundError,
    ),
    (
        ["scontrol", "update", "JobId=1", "ExcNodeList=node2"],
        "Job is no longer pending execution for job 1\n",
        1,
        PermanentError,
    ),
    (["scontrol", "requeuehold", "2"], "Job is pending execution for job 2\n", 1, PermanentError),
    (
        ["scontrol", "update", "NodeName=node3", "State=RESUME"],
        "slurm_update error: Invalid node state specified\n",
        1,
        PermanentError,
    ),
    (
        ["scontrol", "update", "NodeName=node3", "State=DRAIN"],
        "You must specify a reason when DOWNING or DRAINING a node. Request denied\n",
        1,
        PermanentError,
    ),
    (
        ["scontrol", "reboot", "ASAP", "nextstate=RESUME", "reason=medic: x", "node4"],
        "scontrol: error: RebootProgram isn't defined\n"
        "scontrol_reboot_nodes error: Unspecified error\n",
        1,
        PermanentError,
    ),
    (
        ["scontrol", "requeue", "5"],
        "Requested operation is presently disabled for job 5\n",
        1,
        PermanentError,
    ),
    (
        ["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=x"],
        "slurm_update error: Access/permission denied\n",
        1,
        UnauthorizedError,
    ),
]


@pytest.mark.parametrize(("argv", "stderr", "code", "kind"), RECORDED)
def test_recorded_failures_are_classified(
    argv: list[str], stderr: str, code: int, kind: type[AdapterError]
) -> None:
    error = classify_failure(argv, CommandResult("", stderr, code))
    assert type(error) is kind
    assert " ".join(argv[:2]) in str(error) and stderr.splitlines()[0] in str(error)


def test_a_command_killed_by_a_signal_is_transient() -> None:
    assert isinstance(classify_failure(["sinfo"], CommandResult("", "", -9)), TransientError)


class FakeRunner:
    """Answers each argv with a canned result; records what ran."""

    def __init__(self, *results: CommandResult) -> None:
        self.results = list(results)
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        self.calls.append(list(argv))
        return self.results.pop(0)


def test_run_raises_unless_tolerated() -> None:
    failed = CommandResult("", "Job is pending execution for job 2\n", 1)
    cli = SlurmCli(FakeRunner(failed, failed), timeout=5)
    with pytest.raises(PermanentError, match="pending execution"):
        cli.run(["scontrol", "requeuehold", "2"])
    assert cli.run(["scontrol", "requeuehold", "2"], tolerate=("pending execution",)) == failed


def test_json_errors_inside_a_successful_command_are_transient() -> None:
    # squeue --json with slurmctld down: exit 0, an empty job list and an error entry.
    payload = {
        "meta": {"plugin": {"type": "openapi/v0.0.38"}},
        "errors": [
            {
                "description": "Failed while looking for jobs",
                "error_number": -1,
                "error": "Unspecified error",
                "source": "slurm_load_jobs",
            }
        ],
        "jobs": [],
    }
    cli = SlurmCli(FakeRunner(CommandResult(json.dumps(payload), "", 0)), timeout=5)
    with pytest.raises(TransientError, match="Failed while looking for jobs"):
        cli.json(["squeue", "--json"])


@pytest.mark.parametrize("stdout", ["", "not json", "[1, 2]"])
def test_json_that_is_not_an_object_is_transient(stdout: str) -> None:
    cli = SlurmCli(FakeRunner(CommandResult(stdout, "", 0)), timeout=5)
    with pytest.raises(TransientError):
        cli.json(["sinfo", "--json"])
