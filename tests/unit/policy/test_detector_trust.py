"""Issue 11, defect 2: a detector's request is approved automatically only when the repair policy
trusts the detector by name, and a name that came through Slurm (a drain reason or a node
comment, which anyone who may drain a node writes) only when the policy also trusts that channel.
By default every detector's request waits for a person."""

from __future__ import annotations

from typing import Any

import pytest

from medic.domain.ids import ClusterName, NodeName
from medic.domain.repair_rules import Approval, RepairRule
from medic.domain.repairs import (
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequestChannel,
    RequesterKind,
)
from medic.errors import InputError
from medic.repair.policy_changes import check_policy
from medic.repair.rules.approval import approval_text, approve, trusted_as


def _decided(*args: Any, **kwargs: Any) -> tuple[RepairState, str | None, str]:
    """``approve``'s answer as (state, approved_by, rule id), as the trail records it."""
    approval = approve(*args, **kwargs)
    return approval.state, approval.approved_by, approval.id


PENDING, APPROVED = RepairState.PENDING_APPROVAL, RepairState.APPROVED
API, SCHEDULER = RequestChannel.API, RequestChannel.SCHEDULER
TRUSTING = RepairPolicy(trusted_detectors=frozenset({"nvsentinel", "agent"}))


def _detector(name: str, channel: RequestChannel = API) -> RepairRequest:
    return RepairRequest(
        ClusterName("c1"),
        NodeName("n1"),
        RepairAction.REBOOT,
        name,
        RequesterKind.DETECTOR,
        "GPU memory test failed",
        ("detector:x:gpu_mem",),
        request_id="r-1",
        channel=channel,
    )


def test_by_default_every_detector_waits_for_a_person() -> None:
    for channel in RequestChannel:
        assert _decided(_detector("nvsentinel", channel), RepairPolicy()) == (
            PENDING,
            None,
            "detector-untrusted",
        )
    assert "waits for a person" in approval_text(
        Approval(PENDING, None, RepairRule.DETECTOR_UNTRUSTED)
    )


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        ("nvsentinel", "nvsentinel"),
        ("nvsentinel:burn-in", "nvsentinel"),  # foo trusts foo:<part>
        ("agent:gpu-node-017", "agent"),  # every node agent
        ("agent", "agent"),
        ("nvsentinelx", None),  # a longer name is another detector
        ("NVSentinel", None),  # names compare exactly, as token names do
        ("dcgm", None),
        ("x:nvsentinel", None),
    ],
)
def test_the_policy_trusts_a_detector_by_name(name: str, entry: str | None) -> None:
    assert trusted_as(name, TRUSTING) == entry
    if entry is None:
        assert _decided(_detector(name), TRUSTING) == (PENDING, None, "detector-untrusted")
    else:
        assert _decided(_detector(name), TRUSTING) == (APPROVED, "auto", f"auto:detector:{entry}")


def test_the_most_specific_entry_names_the_rule() -> None:
    policy = RepairPolicy(trusted_detectors=frozenset({"agent", "agent:n1"}))
    assert trusted_as("agent:n1", policy) == "agent:n1"
    assert trusted_as("agent:n2", policy) == "agent"


def test_a_name_from_slurm_is_not_authenticated() -> None:
    spoofed = _detector("nvsentinel", SCHEDULER)  # detector=nvsentinel in a drain reason
    assert _decided(spoofed, TRUSTING) == (PENDING, None, "detector-unauthenticated")
    assert "not authenticated" in approval_text(
        Approval(PENDING, None, RepairRule.DETECTOR_UNAUTHENTICATED)
    )
    # only a policy that explicitly trusts the scheduler channel takes the name as given
    both = RepairPolicy(trusted_detectors=TRUSTING.trusted_detectors, trust_scheduler_requests=True)
    assert _decided(spoofed, both) == (APPROVED, "auto", "auto:detector:nvsentinel")
    assert _decided(_detector("dcgm", SCHEDULER), both) == (PENDING, None, "detector-untrusted")


def test_a_request_that_does_not_say_how_it_came_is_not_authenticated() -> None:
    request = RepairRequest(
        ClusterName("c1"),
        NodeName("n1"),
        RepairAction.REBOOT,
        "nvsentinel",
        RequesterKind.DETECTOR,
        "r",
        request_id="r-1",
    )
    assert request.channel is SCHEDULER
    assert _decided(request, TRUSTING)[2] == "detector-unauthenticated"


@pytest.mark.parametrize(
    "name", ["detector:nvsentinel", "user:alice", "auto", "medic", "bad name", "a:b:c", ""]
)
def test_a_trusted_name_must_be_a_detector_token_name(name: str) -> None:
    with pytest.raises(InputError, match=r"^trusted_detectors: "):
        check_policy(RepairPolicy(trusted_detectors=frozenset({name})))


def test_trusted_names_that_detector_tokens_can_have_are_accepted() -> None:
    check_policy(RepairPolicy(trusted_detectors=frozenset({"nvsentinel", "agent", "ci-bot:p1"})))
