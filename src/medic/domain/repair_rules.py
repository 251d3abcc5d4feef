"""The rule ids of node repair's decisions: one enum, so a decision is matched by identity.

Every decision node repair records names the rule that made it: the ``rule`` of a repair's
audit records (``repair-transition``, ``repair-recommended``, ``repair-skipped``, ...), and the
approval rule kept on the repair row. The values are the ids the audit trail has always carried
(docs/audit-events.md lists them; tests/test_docs.py checks the list).

An automatic approval names what the policy approved as well: ``auto:action:<action>``,
``auto:xid:<code>``, ``auto:detector:<entry>``. :class:`Approval` keeps the rule and that subject
apart, and :attr:`Approval.id` writes them as one id for the trail.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from medic.domain.repairs import RepairState

__all__ = ["AUTOMATIC", "Approval", "RepairRule"]


class RepairRule(enum.StrEnum):
    """Why a node-repair decision went the way it did."""

    # Guardrails (medic.repair.rules.guards): each answers one question.
    PERSISTENCE = "persistence"
    COOLDOWN = "cooldown"
    BUDGET = "budget"
    BREAKER = "breaker"
    DETECTOR_CAP = "detector-cap"
    ALERT_CLEARED = "alert-cleared"
    EVIDENCE = "evidence"
    # medic's own recommendation (medic.repair.rules.recommend).
    NO_ALERT = "no-alert"
    OPEN_REPAIR = "open-repair"
    UNMAPPED = "unmapped"
    EXECUTOR = "executor"
    # Wait for idle (medic.repair.rules.waiting).
    IDLE = "idle"
    WAIT = "wait-for-idle"
    WAIT_TIMEOUT = "wait-timeout"
    CHECKPOINT = "checkpoint-saved"
    # Escalation ladder (medic.repair.rules.ladder).
    ESCALATION = "escalation"
    MIGRATION_GATE = "migration-gate"
    # Approval (medic.repair.rules.approval).
    APPROVAL_REQUIRED = "approval-required"
    BREAKER_TRIPPED = "breaker-tripped"
    DETECTOR_UNTRUSTED = "detector-untrusted"
    DETECTOR_UNAUTHENTICATED = "detector-unauthenticated"
    USER_REQUEST = "user-request"
    REMOVE_HUMAN_ONLY = "remove-human-only"
    AUTO_ACTION = "auto:action"
    AUTO_XID = "auto:xid"
    AUTO_DETECTOR = "auto:detector"
    # Requests (medic.repair.intake, medic.repair.actors).
    REPEAT = "idempotent-repeat"
    INVALID = "invalid-request"
    IDENTITY = "identity"
    REFUSED = "refused"
    # People's decisions (medic.repair.decisions, medic.repair.policy_changes).
    MANUAL_APPROVAL = "manual-approval"
    MANUAL_REJECTION = "manual-rejection"
    MANUAL_CANCELLATION = "manual-cancellation"
    MANUAL_ACTION = "manual-action"
    MANUAL_POLICY = "manual-policy"
    MANUAL_RESET = "manual-breaker-reset"
    # The lifecycle's own steps (medic.repair.lifecycle, execution, return_to_service).
    CORDONED = "cordoned"
    CORDON_REFUSED = "cordon-refused"
    NO_EXECUTOR = "no-executor"
    DRAINED = "drained"
    BOOT_ID_CHANGED = "boot-id-changed"
    EXECUTED = "executed"
    EXECUTE_FAILED = "execute-failed"
    EXECUTION_LOST = "execution-lost"
    REJOINED = "rejoined"
    REJOIN_TIMEOUT = "rejoin-timeout"
    REMOVED = "removed"
    VALIDATION_PASSED = "validation-passed"
    VALIDATION_FAILED = "validation-failed"
    VALIDATION_ABORTED = "validation-aborted"


AUTOMATIC = frozenset({RepairRule.AUTO_ACTION, RepairRule.AUTO_XID, RepairRule.AUTO_DETECTOR})
"""The approval rules under which the policy approves a repair without a person."""


class Approval(NamedTuple):
    """Who approves a new repair (``medic.repair.rules.approval.approve``)."""

    state: RepairState
    """PENDING_APPROVAL or APPROVED."""
    approved_by: str | None
    rule: RepairRule
    subject: str | None = None
    """What an automatic approval approved: the action, the Xid code or the trusted entry."""

    @property
    def automatic(self) -> bool:
        return self.rule in AUTOMATIC

    @property
    def id(self) -> str:
        """The rule id the trail records: ``auto:xid:79``, ``approval-required``."""
        return str(self.rule) if self.subject is None else f"{self.rule}:{self.subject}"
