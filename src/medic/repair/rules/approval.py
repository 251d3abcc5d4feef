"""Who approves a new repair: the approval rules every repair decision ends with.

:func:`approve` answers, for a new request, whether it waits for a person and under which rule
(an :class:`~medic.domain.repair_rules.Approval`);
both :func:`medic.repair.rules.recommend.recommend` (medic's own recommendation) and
:func:`medic.repair.rules.admission.admit` (a detector's or a person's request) end with it, and
:func:`approval_text` turns the rule id into the sentence the audit trail shows.

- medic's own recommendation waits (``approval-required``) unless the policy approves its action
  class (``auto:action:<a>``) or its Xid (``auto:xid:<code>``) automatically;
- a detector's request is approved automatically only when the policy trusts the detector by
  name (:func:`trusted_as`: ``trusted_detectors`` entry ``foo`` trusts ``foo`` and ``foo:<part>``;
  rule ``auto:detector:<entry>``, approved by ``auto``, never as a person); any other detector's
  waits for a person (``detector-untrusted``), and so does every detector's by default;
- a detector's name that arrived in a Slurm drain reason or node comment
  (:attr:`~medic.domain.repairs.RequestChannel.SCHEDULER`) is not authenticated: anyone who may
  drain a node (or set its comment) can write ``detector=<any name>``. It is trusted only when
  the policy says so explicitly (``trust_scheduler_requests``, off by default: a site that gates
  ``scontrol`` tightly may turn it on); otherwise it waits (``detector-unauthenticated``), even
  for a trusted name. Through the API the name is the token's, so it is trusted as the policy
  says;
- a person's request answers ``user-request``: the intake (``medic.repair.admission``) then has
  it wait for another person's approval unless the policy would approve the same repair
  automatically;
- removal is never automatic (``remove-human-only``), and with the circuit breaker tripped nothing
  is approved automatically (``breaker-tripped``: pending, people still approve).

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from medic.domain.repair_rules import Approval, RepairRule
from medic.domain.repairs import (
    Breaker,
    RepairAction,
    RepairPolicy,
    RepairRequest,
    RepairState,
    RequestChannel,
    RequesterKind,
)
from medic.repair.rules.guards import AUTO_APPROVER

__all__ = [
    "approval_text",
    "approve",
    "trusted_as",
]


_APPROVAL_TEXT = {
    RepairRule.APPROVAL_REQUIRED: "waits for a person to approve (approve-before-repair)",
    RepairRule.BREAKER_TRIPPED: (
        "the circuit breaker is tripped: automatic repair is paused, a person must approve"
    ),
    RepairRule.DETECTOR_UNTRUSTED: (
        "the policy does not trust this detector (trusted_detectors): waits for a person to approve"
    ),
    RepairRule.DETECTOR_UNAUTHENTICATED: (
        "a detector's name in a Slurm drain reason or node comment is not authenticated (anyone "
        "who may drain a node writes it) and the policy does not trust scheduler requests "
        "(trust_scheduler_requests): waits for a person to approve"
    ),
    RepairRule.USER_REQUEST: "requested by a person",
    RepairRule.REMOVE_HUMAN_ONLY: "removal is never automatic: a person must approve",
}


def approve(
    request: RepairRequest,
    policy: RepairPolicy,
    *,
    escalated_from: RepairAction | None = None,
    breaker: Breaker | None = None,
) -> Approval:
    """Whether a new request waits for a person, who approves it otherwise, and under which rule.

    A person's request answers ``user-request`` (the intake decides whether it waits for another
    person, see the module docstring); removal otherwise always waits for one. A detector's
    request is approved by ``auto`` (never as a person) only when :func:`trusted_as` finds it in
    ``policy.trusted_detectors`` (``auto:detector:<entry>``) and, for a name from the scheduler
    channel, ``policy.trust_scheduler_requests`` is set; otherwise it waits
    (``detector-untrusted``, ``detector-unauthenticated``). medic's own
    recommendation waits (``approval-required``) unless its action class is in
    ``policy.auto_actions`` (``auto:action:<a>``) or its Xid is in ``policy.auto_xids``
    (``auto:xid:<code>``, for the mapped action only: an escalated action needs its class). With a
    tripped ``breaker`` nothing is approved automatically (``breaker-tripped``).
    """
    pending = RepairState.PENDING_APPROVAL
    if request.requester_kind is RequesterKind.USER:
        return Approval(RepairState.APPROVED, request.requested_by, RepairRule.USER_REQUEST)
    if request.action.human_only:
        return Approval(pending, None, RepairRule.REMOVE_HUMAN_ONLY)
    automatic: Approval
    if request.requester_kind is RequesterKind.DETECTOR:
        entry = trusted_as(request.requested_by, policy)
        if entry is None:
            return Approval(pending, None, RepairRule.DETECTOR_UNTRUSTED)
        if request.channel is not RequestChannel.API and not policy.trust_scheduler_requests:
            return Approval(pending, None, RepairRule.DETECTOR_UNAUTHENTICATED)
        automatic = Approval(RepairState.APPROVED, AUTO_APPROVER, RepairRule.AUTO_DETECTOR, entry)
    elif request.action in policy.auto_actions:
        subject = str(request.action)
        automatic = Approval(RepairState.APPROVED, AUTO_APPROVER, RepairRule.AUTO_ACTION, subject)
    elif escalated_from is None and request.xid is not None and request.xid in policy.auto_xids:
        subject = str(request.xid)
        automatic = Approval(RepairState.APPROVED, AUTO_APPROVER, RepairRule.AUTO_XID, subject)
    else:
        return Approval(pending, None, RepairRule.APPROVAL_REQUIRED)
    if breaker is not None and breaker.tripped:
        return Approval(pending, None, RepairRule.BREAKER_TRIPPED)
    return automatic


def trusted_as(detector: str, policy: RepairPolicy) -> str | None:
    """The ``policy.trusted_detectors`` entry that trusts ``detector``: the name itself, or
    ``foo`` for ``foo:<part>`` (the most specific entry when several do); None: not trusted.
    Names compare exactly (case included), as the API token's name is matched."""
    found = [
        entry
        for entry in policy.trusted_detectors
        if detector == entry or detector.startswith(f"{entry}:")
    ]
    return max(found, key=lambda entry: (len(entry), entry)) if found else None


def approval_text(approval: Approval) -> str:
    """A readable sentence for an approval."""
    if approval.automatic:
        return f"approved automatically by policy rule {approval.id}"
    return _APPROVAL_TEXT.get(approval.rule, approval.id)
