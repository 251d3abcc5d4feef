"""Every supported Slurm version's JSON -> the same canonical records and domain objects.

22.05 files are real recordings (``tests/assets/slurm/22.05``, made by the dev cluster's tests);
23.11 files are written in that version's documented shape with the same situations (see
``tests/assets/slurm/23.11/README.md``). Times and output directories differ between recording
runs, so jobs are compared without them.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from pathlib import Path
from typing import Any

import pytest

from medic.domain.cluster import Job, JobState, Node, NodeState
from medic.domain.ids import ClusterName
from medic.schedulers.slurm import convert
from medic.schedulers.slurm.normalise import (
    normalise_accounting_jobs,
    normalise_jobs,
    normalise_nodes,
)
from medic.schedulers.slurm.versions import ADAPTERS, payload_errors, payload_version

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "slurm"
VERSIONS = ("22.05", "23.11")
CLUSTER = ClusterName("c")


def load(version: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ASSETS / version / name).read_text())
    return data


def comparable(job: Job) -> Job:
    return dataclasses.replace(
        job,
        submit_time=None,
        start_time=None,
        end_time=None,
        log_paths=tuple(posixpath.basename(p) for p in job.log_paths),
    )


def jobs(version: str, name: str) -> dict[str, Job]:
    found = normalise_jobs(load(version, name))
    return {r["job_id"]: convert.job_from_canonical(r, CLUSTER) for r in found}


def nodes(version: str, name: str) -> dict[str, Node]:
    return {n["name"]: convert.node_from_canonical(n) for n in normalise_nodes(load(version, name))}


def test_versions_are_read_from_meta() -> None:
    assert payload_version(load("22.05", "squeue-json.running.json")) == (0, 0, 38)
    assert payload_version(load("22.05", "sacct-json.all-situations.json")) == (0, 0, 38)
    assert payload_version(load("23.11", "squeue-json.running.json")) == (0, 0, 40)
    assert payload_version({"meta": {"slurm": {"release": "23.02.7"}}}) == (0, 0, 39)
    assert payload_version({"meta": {"Slurm": {"release": "25.05.1"}}}) == max(ADAPTERS)
    assert payload_version({}) == (0, 0, 38)


@pytest.mark.parametrize(
    "name",
    [
        "squeue-json.running.json",
        "squeue-json.pending-held.json",
        "squeue-json.failed.json",
        "squeue-json.node-failure.json",
    ],
)
def test_squeue_of_both_versions_gives_the_same_jobs(name: str) -> None:
    old, new = ({k: comparable(v) for k, v in jobs(version, name).items()} for version in VERSIONS)
    shared = old.keys() & new.keys()
    assert shared  # the recording still shows the situations the 23.11 file mirrors
    assert {k: old[k] for k in shared} == {k: new[k] for k in shared}


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_scenarios(version: str) -> None:
    running = jobs(version, "squeue-json.running.json")["2"]
    assert running.state is JobState.RUNNING and running.nodes == ("node1",)
    assert running.comment == "medic-test" and not running.held
    assert running.log_paths[0].endswith("/requeue-2.out")
    held = jobs(version, "squeue-json.pending-held.json")["2"]
    assert held.state is JobState.PENDING and held.held and held.restart_count == 1
    assert held.excluded_nodes == frozenset({"node1"}) and held.nodes == ()
    ended = jobs(version, "squeue-json.node-failure.json")
    assert ended["1"].state is JobState.COMPLETED and ended["1"].nodes == ("node1", "node2")
    assert ended["2"].state is JobState.CANCELLED and ended["2"].exit_code == 128 + 15
    assert ended["3"].state is JobState.FAILED and ended["3"].exit_code == 3
    assert ended["4"].state is JobState.NODE_FAIL
    assert ended["5"].state is JobState.PENDING and ended["5"].restart_count == 1
    assert not ended["5"].held


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sinfo-json.idle.json", {"node1": NodeState.IDLE, "node2": NodeState.IDLE}),
        ("sinfo-json.drained.json", {"node1": NodeState.IDLE, "node2": NodeState.DRAINED}),
        ("sinfo-json.down.json", {"node1": NodeState.DOWN, "node2": NodeState.IDLE}),
    ],
)
def test_sinfo_of_both_versions_gives_the_same_nodes(
    name: str, expected: dict[str, NodeState]
) -> None:
    old, new = (nodes(version, name) for version in VERSIONS)
    assert old == new
    assert {n: node.state for n, node in old.items()} == expected
    for node in old.values():
        assert node.gpus == 8 and node.partitions == ("gpu",)
    if name == "sinfo-json.drained.json":
        assert old["node2"].reason == "medic: test"


def test_sacct_of_both_versions_gives_the_same_jobs() -> None:
    def read(version: str) -> dict[str, Job]:
        records = normalise_accounting_jobs(load(version, "sacct-json.all-situations.json"))
        merged = convert.merge_accounting_runs(records)
        return {r["job_id"]: comparable(convert.job_from_canonical(r, CLUSTER)) for r in merged}

    old, new = read("22.05"), read("23.11")
    # Jobs 1-4 ended well before the recording; later ones depend on slurmdbd's timing.
    shared = {"1", "2", "3", "4"}
    # 22.05's sacct reports the job-level exit code as SUCCESS/0 even for a failed job.
    assert {k: dataclasses.replace(old[k], exit_code=None) for k in shared} == {
        k: dataclasses.replace(new[k], exit_code=None) for k in shared
    }
    for found in (old, new):
        assert found["2"].state is JobState.CANCELLED and found["2"].restart_count == 1
        assert found["2"].comment == "medic-test" and found["2"].log_paths == ()
        assert found["1"].nodes == ("node1", "node2") and found["1"].num_nodes == 2
    assert new["3"].exit_code == 3 and new["2"].exit_code == 143
    assert new["5"].restart_count == 1 and new["5"].nodes == ()  # "None assigned"


def test_sinfo_entries_merge_partitions_and_take_reason_strings() -> None:
    entry: dict[str, Any] = {
        "node": {"state": ["MIXED", "DRAIN"]},
        "nodes": {"nodes": ["gpu01"]},
        "gres": {"total": "gpu:h100:4(S:0-1)"},
        "reason": "NHC: bad",
    }
    payload = {
        "meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}},
        "sinfo": [
            {**entry, "partition": {"name": "a"}},
            {**entry, "partition": {"name": "b"}},
        ],
    }
    (node,) = [convert.node_from_canonical(n) for n in normalise_nodes(payload)]
    assert node.partitions == ("a", "b") and node.gpus == 4
    assert node.state is NodeState.DRAINING and node.reason == "NHC: bad"


def test_slurmrestd_style_node_lists_of_v0_0_40_are_read() -> None:
    payload = {
        "meta": {"plugin": {"data_parser": "data_parser/v0.0.40"}},
        "nodes": [
            {
                "name": "cn1",
                "state": ["IDLE", "DRAIN"],
                "reason": "ECC memory error",
                "reason_set_by_user": "root",
                "partitions": ["batch"],
                "gres": "gpu:2",
                "boot_time": {"set": True, "infinite": False, "number": 1731514097},
            }
        ],
    }
    (record,) = normalise_nodes(payload)
    assert record["state"] == "IDLE" and record["flags"] == ["DRAIN"]
    assert record["boot_time"] == 1731514097 and record["reason_user"] == "root"


def test_v0_0_39_exit_codes_and_number_objects() -> None:
    job = {
        "job_id": 9,
        "job_state": ["FAILED"],
        "exit_code": {"status": "SIGNALED", "return_code": 0, "signal": {"signal_id": 9}},
        "priority": {"set": True, "infinite": False, "number": 7},
        "end_time": {"set": True, "infinite": False, "number": 1700000000},
        "node_count": {"set": False, "infinite": False, "number": 0},
        "time_limit": {"set": False, "infinite": True, "number": 0},
    }
    (record,) = normalise_jobs({"meta": {"plugin": {"data_parser": "v0.0.39"}}, "jobs": [job]})
    assert record["exit_code"] == 137 and record["priority"] == 7
    assert record["end_time"] == 1700000000 and record["node_count"] is None


def test_errors_inside_a_payload_are_reported() -> None:
    payload = {
        "errors": [
            {
                "description": "Failed while looking for jobs",
                "error_number": -1,
                "error": "Unspecified error",
                "source": "slurm_load_jobs",
            },
            "plain",
        ]
    }
    assert payload_errors(payload) == [
        "slurm_load_jobs: Unspecified error: Failed while looking for jobs",
        "plain",
    ]
    assert payload_errors({"errors": []}) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_every_recorded_file_parses(version: str) -> None:
    for path in sorted((ASSETS / version).glob("*.json")):
        payload = json.loads(path.read_text())
        assert payload_errors(payload) == [], path.name
        if path.name.startswith("squeue"):
            assert all(
                convert.job_state(r) is not JobState.UNKNOWN for r in normalise_jobs(payload)
            )
        elif path.name.startswith("sinfo"):
            assert all(n["name"] for n in normalise_nodes(payload))
        elif path.name.startswith("sacct"):
            assert normalise_accounting_jobs(payload)
