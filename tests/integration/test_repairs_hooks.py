"""Operator hooks (``medic.schedulers.hooks``) and the validation suite's format, through the
engine on the simulator: placeholders, a failing hook, a hook past its timeout."""

from __future__ import annotations

from pathlib import Path

from medic.config.settings import RepairSettings, SimSettings
from medic.domain.audit import AuditKind
from medic.domain.cluster import NodeState
from medic.domain.ids import NodeName
from medic.domain.repairs import RepairAction, RepairPolicy, RepairState
from medic.repair.validation import ValidationCheck, parse_validation_commands
from medic.schedulers.hooks import HookNodeProvider, hook_commands, render, run_command
from medic.schedulers.sim import SimCluster
from medic.testing import FakeClock

from .conftest import MakeHarness
from .test_repairs_rig import rig

REBOOT_BY_HOOK = RepairPolicy(auto_actions=frozenset({RepairAction.REBOOT}), cooldown_seconds=0)


def test_render_quotes_the_placeholders_and_keeps_shell_braces() -> None:
    assert render("ipmi {node} --id {repair_id} ${HOME}", NodeName("n 1;rm"), 7) == (
        "ipmi 'n 1;rm' --id 7 ${HOME}"
    )
    settings = RepairSettings(power_cycle_command="bmc {node}", migrate_command="  ")
    assert hook_commands(settings) == {RepairAction.POWER_CYCLE: "bmc {node}"}
    assert run_command("echo out; echo err >&2; exit 3", {}, 5) == (3, "out\nerr\n")
    status, output = run_command("sleep 5", {}, 0.2)
    assert status is None and "timed out" in output


def test_a_hook_under_way_cannot_be_seen_by_another_medic() -> None:
    sim = SimCluster(FakeClock(), SimSettings(nodes=2, partitions=1, jobs=0, seed=1))
    hooked = HookNodeProvider(sim.node_provider, {RepairAction.REPROVISION: "rebuild {node}"})
    node = NodeName("node001")
    assert hooked.in_flight(node, RepairAction.REPROVISION) is None, "its own session's"
    assert hooked.in_flight(node, RepairAction.REBOOT) is False  # the simulator's, idle
    hooked.execute(node, RepairAction.REBOOT, 1)
    assert hooked.in_flight(node, RepairAction.REBOOT) is True  # restarting


def test_the_validation_suite_format() -> None:
    checks = parse_validation_commands(
        "[dcgm] dcgmi diag -r 2 ;;  ;; /opt/bin/gpu-burn 60 ;; [ib] ib_write_bw {node}"
    )
    assert checks == (
        ValidationCheck("dcgm", "dcgmi diag -r 2"),
        ValidationCheck("gpu-burn#3", "/opt/bin/gpu-burn 60"),
        ValidationCheck("ib", "ib_write_bw {node}"),
    )


def _hooked(command: str, timeout: float = 30) -> type[HookNodeProvider]:
    class Hooked(HookNodeProvider):
        def __init__(self, sim: SimCluster) -> None:
            super().__init__(sim.node_provider, {RepairAction.REBOOT: command}, timeout=timeout)

    return Hooked


def test_a_hook_runs_with_the_node_and_the_repair_id(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    out = tmp_path / "hook.out"
    hook = f'echo "{{node}} {{repair_id}} $MEDIC_ACTION $MEDIC_NODE" > {out}'
    r = rig(make_harness, policy=REBOOT_BY_HOOK, provider=_hooked(hook))
    r.kernel("node002")
    done = r.run_until_state("node002", RepairState.DONE, within=30)
    assert out.read_text() == f"node002 {done.id} reboot node002\n"
    assert r.h.sim.repairs == []  # the hook did it, not the simulator's own reboot
    assert r.node("node002") == (NodeState.IDLE, None)


def test_a_failing_hook_fails_the_repair_and_the_node_stays_drained(
    make_harness: MakeHarness,
) -> None:
    r = rig(make_harness, policy=REBOOT_BY_HOOK, provider=_hooked("echo no BMC >&2; exit 4"))
    r.kernel("node003")
    failed = r.run_until_state("node003", RepairState.FAILED, within=30)
    assert failed.error is not None and "exited 4" in failed.error and "no BMC" in failed.error
    assert r.transitions(failed.id)[-1] == ("executing", "failed")
    step = [e for e in r.events(AuditKind.REPAIR_STEP_FAILED) if e.payload["step"] == "execute"]
    assert len(step) == 1 and step[0].payload["permanent"] is True
    assert r.node("node003")[0] is NodeState.DRAINED  # medic's drain: a person looks at it
    assert r.firing("node003") == ["xid:79"]


def test_a_hook_past_its_timeout_fails_the_repair(make_harness: MakeHarness) -> None:
    r = rig(make_harness, policy=REBOOT_BY_HOOK, provider=_hooked("sleep 10", timeout=0.3))
    r.kernel("node004")
    failed = r.run_until_state("node004", RepairState.FAILED, within=30)
    assert failed.error is not None and "could not run or timed out" in failed.error
