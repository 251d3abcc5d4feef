"""Round 6 of the issue-12 rules, one by one on hand-made detections: a node's own link explains
its completion errors (rule 3), a missing JAX task is a launch failure of the node srun ran it on
(rule 2), timeouts are never deterministic while KeyError and IndexError are (rule 4), a verdict
whose root names no node takes the domain of the evidence against the node it implicates, and a
warning (a row remap) names no node in a failure it did not cause."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from medic.attribute.deterministic import is_curable
from medic.config.settings import DEFAULT_DETERMINISTIC_ERRORS
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role

from .test_general_rules import NODES, bootstrap, completion, det, verdict


def link_down(node: str, at: float) -> Detection:
    return det(
        "mlx5.link_down", node, Role.ROOT, at=at, domain=FaultDomain.NETWORK, implicates_node=True
    )


# --- 3. a reporter with its own port event is not evidence against its peer ---------------------
def test_completion_errors_of_a_node_with_its_own_link_down_name_only_it() -> None:
    # node002 (10.0.1.10) lost its link; its own reports point at node003 (10.0.2.10).
    base = [bootstrap(i) for i in range(4)]
    own = verdict([*base, link_down("node002", 10), completion("node002", "10.0.2.10", at=11)])
    assert (own.domain, own.implicated_nodes) == (FaultDomain.NETWORK, {"node002"})
    # Without the link event, two reporters pointing at node003 still implicate it.
    peers = [completion("node001", "10.0.2.10", at=11), completion("node002", "10.0.2.10", at=11)]
    assert verdict([*base, *peers]).implicated_nodes == {"node003"}


# --- 2. a JAX task that never reached the barrier ---------------------------------------------
def _srun(node: str, tasks: str, sid: str = "slurm.task_exit") -> Detection:
    return det(sid, None, Role.CASCADE, at=40, domain=FaultDomain.APPLICATION,
               fields={"node": node, "task": tasks, "code": "1"})  # fmt: skip


def _missing(task: int, reporter: str) -> Detection:
    return det("jax.barrier_task_missing", reporter, Role.ROOT, at=30, fields={"task": str(task)})


def test_a_missing_jax_task_implicates_the_node_srun_ran_it_on() -> None:
    srun = [_srun("node001", "0-1"), _srun("node002", "2-3"), _srun("node004", "6,7")]
    srun.append(_srun("node003", "4-5", "slurm.task_killed"))
    missing = [_missing(t, r) for r in ("node001", "node002", "node004") for t in (4, 5)]
    v = verdict([*srun, *missing])
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SYSTEM_SOFTWARE,
        JobAction.RESTART,
        {"node003"},
    )
    assert v.root_signature == "jax.barrier_task_missing"


def test_a_missing_task_srun_does_not_place_names_nobody() -> None:
    v = verdict([_missing(4, "node001"), _missing(4, "node002")])
    assert (v.domain, v.implicated_nodes) == (FaultDomain.SYSTEM_SOFTWARE, frozenset())


def test_most_tasks_missing_is_not_one_node_s_fault() -> None:
    srun = [_srun(n, str(i)) for i, n in enumerate(NODES)]
    missing = [_missing(t, "node001") for t in (1, 2, 3)]
    assert verdict([*srun, *missing]).implicated_nodes == frozenset()


# --- 4. what a retry can cure, and what it cannot ------------------------------------------------
@pytest.mark.parametrize(
    ("message", "curable"),
    [
        ("DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: PjRT_Client_Connect", True),
        ("UNAVAILABLE: failed to connect to all addresses", True),
        ("Timed out after 1800 seconds waiting for clients", True),
        ("[Errno 3] No such process", True),  # a torn-down peer
        ("[Errno 32] Broken pipe", True),
        ("'t5905'", False),
        ("index 1000 is out of bounds for axis 0 with size 1000", False),
        ("No such file or directory: '/ckpt/iter_0000500'", False),
    ],
)
def test_timeouts_are_curable(message: str, curable: bool) -> None:
    d = det("python.exception", "node001", Role.ROOT, domain=FaultDomain.APPLICATION,
            fields={"exception": "XlaRuntimeError", "message": message})  # fmt: skip
    assert is_curable(d) is curable


def test_key_and_index_errors_are_deterministic_by_default() -> None:
    assert {"KeyError", "IndexError"} <= set(DEFAULT_DETERMINISTIC_ERRORS)
    error = det("python.exception", "node002", Role.ROOT, at=10, domain=FaultDomain.APPLICATION,
                fields={"exception": "IndexError", "message": "index out of range"})  # fmt: skip
    watchdog = [det("nccl.watchdog_timeout", n, at=600) for n in ("node001", "node003")]
    v = verdict([error, *watchdog])
    assert (v.domain, v.action) == (FaultDomain.APPLICATION, JobAction.STOP)
    timeout = det("python.exception", "node002", Role.ROOT, at=10, domain=FaultDomain.APPLICATION,
                  fields={"exception": "KeyError", "message": "timed out"})  # fmt: skip
    assert verdict([timeout, *watchdog]).action is JobAction.RESTART


# --- the domain follows the evidence against the implicated node ---------------------------------
def _launch_failed(node: str, at: float) -> Detection:
    return det("slurm.task_launch_failed", None, Role.ROOT, at=at, domain=FaultDomain.SCHEDULER,
               fields={"node": node, "message": "Communication connection failure"})  # fmt: skip


def test_a_node_s_own_kernel_says_what_srun_s_launch_failure_was() -> None:
    launch = [_launch_failed(n, 10) for n in NODES]
    hung = det("kernel.hung_task", "node003", Role.CONFIRMATION, at=15, implicates_node=True)
    v = verdict([*launch, hung], window_seconds=300.0)
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.SYSTEM_SOFTWARE,
        JobAction.RESTART,
        {"node003"},
    )
    assert v.summary.startswith("system_software fault")
    # The node's own hardware line says what the launch failure was.
    pcie = det("kernel.pcie_fatal", "node003", Role.CONFIRMATION, at=15, implicates_node=True,
               domain=FaultDomain.HARDWARE)  # fmt: skip
    v = verdict([*launch, pcie], window_seconds=300.0)
    assert (v.domain, v.implicated_nodes) == (FaultDomain.HARDWARE, {"node003"})
    # Without the node's own line, srun's report is all there is: the scheduler's domain.
    assert verdict(launch).domain is FaultDomain.SCHEDULER


def test_evidence_after_the_failure_window_does_not_change_the_domain() -> None:
    launch = [_launch_failed(n, 10) for n in NODES]
    pcie = det("kernel.pcie_fatal", "node003", Role.CONFIRMATION, at=60, implicates_node=True,
               domain=FaultDomain.HARDWARE)  # fmt: skip
    assert verdict([*launch, pcie], window_seconds=300.0).domain is FaultDomain.HARDWARE
    assert verdict([*launch, pcie], window_seconds=30.0).domain is FaultDomain.SCHEDULER


# --- a warning does not name its node in a failure it did not cause ---------------------------
def test_a_row_remap_warning_names_nobody_in_a_failure_it_did_not_cause() -> None:
    remap = det("xid.memory_remap", "node002", Role.ROOT, at=0, domain=FaultDomain.HARDWARE,
                action=JobAction.NONE, implicates_node=True)  # fmt: skip
    errors = [
        det("python.exception", n, Role.ROOT, at=10, domain=FaultDomain.APPLICATION,
            fields={"exception": "TypeError", "message": "forward() got an unexpected keyword"})
        for n in NODES
    ]  # fmt: skip
    v = verdict([remap, *errors])
    assert (v.domain, v.action, v.implicated_nodes) == (
        FaultDomain.APPLICATION,
        JobAction.STOP,
        frozenset(),
    )
    # A fatal root on that node still names it.
    xid = det("xid.fallen_off_bus", "node002", Role.ROOT, at=9, domain=FaultDomain.HARDWARE,
              implicates_node=True)  # fmt: skip
    assert verdict([remap, xid, *errors]).implicated_nodes == {"node002"}


# --- 1. a code error after the loop finished is not a completion ---------------------------------
def test_a_listed_error_after_completion_stops_and_teardown_errors_do_not() -> None:
    done = det("hf.training_completed", "node001", Role.PROGRESS, at=10, domain=FaultDomain.NONE,
               action=JobAction.NONE)  # fmt: skip
    save = det("python.exception", "node001", Role.ROOT, at=20, domain=FaultDomain.APPLICATION,
               fields={"exception": "TypeError", "message": "not JSON serializable"})  # fmt: skip
    v = verdict([done, save])
    assert (v.domain, v.action) == (FaultDomain.APPLICATION, JobAction.STOP)
    gone = {"exception": "XlaRuntimeError", "message": "UNAVAILABLE: shutdown"}
    teardown = det("python.exception", "node002", Role.ROOT, at=20,
                   domain=FaultDomain.APPLICATION, fields=gone)  # fmt: skip
    assert verdict([done, teardown]).domain is FaultDomain.NONE
    before = replace(save, time=done.time - timedelta(seconds=5), seq=1)
    assert verdict([done, before]).domain is FaultDomain.NONE  # raised and caught before the end
