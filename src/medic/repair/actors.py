"""Who acts on a repair, and the errors a refused repair request raises.

An :class:`Actor` is a person (``user:NAME``) or a detector (``detector:NAME``, or a node agent's
``agent:NODE``); medic's own names (``medic`` recommends, ``auto`` approves by policy) and kind are
never anyone else's. :func:`as_person` guards the decisions only people make (approve, reject,
cancel, change an action, the policy, the breaker).

A refused request raises one of these, each with its ``rule`` (the intake audits it as
``repair-request-refused``): :class:`GuardrailRefused` (a
:class:`~medic.errors.SafetyBudgetExceeded`: budget, detector cap, cooldown, breaker),
:class:`EvidenceRequired` (a :class:`~medic.errors.PolicyViolation`), :class:`RepairInProgress`
(a :class:`~medic.errors.ConflictError`: the node has an open repair) and
:class:`IdentityViolation` (a ``PolicyViolation``: who asked may not ask for this).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from medic.domain.repair_rules import RepairRule
from medic.domain.repairs import RequesterKind
from medic.errors import ConflictError, InputError, PolicyViolation, SafetyBudgetExceeded
from medic.repair.rules.guards import AUTO_APPROVER
from medic.repair.rules.recommend import MEDIC_REQUESTER

__all__ = [
    "RESERVED_NAMES",
    "Actor",
    "EvidenceRequired",
    "GuardrailRefused",
    "IdentityViolation",
    "RepairInProgress",
    "as_person",
]

RESERVED_NAMES = frozenset({AUTO_APPROVER, MEDIC_REQUESTER})
"""Names only medic itself acts under (``auto`` approves by policy, ``medic`` recommends)."""
_NAME = re.compile(r"^[A-Za-z0-9][\w.:@+-]{0,127}$")
_PREFIXES = {"user:": RequesterKind.USER, "detector:": RequesterKind.DETECTOR}
_AGENT_PREFIX = "agent:"


# --- refusals ------------------------------------------------------------------------------------
class GuardrailRefused(SafetyBudgetExceeded):
    """A guardrail refused the request now (budget, detector cap, cooldown, breaker)."""

    def __init__(self, rule: RepairRule, reason: str) -> None:
        super().__init__(f"{rule}: {reason}")
        self.rule = rule
        self.reason = reason


class EvidenceRequired(PolicyViolation):
    """No alert the request names is firing on its node: no repair without a failed check."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{RepairRule.EVIDENCE}: {reason}")
        self.rule = RepairRule.EVIDENCE
        self.reason = reason


class RepairInProgress(ConflictError):
    """The node already has an unfinished repair (one repair per node at a time)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{RepairRule.OPEN_REPAIR}: {reason}")
        self.rule = RepairRule.OPEN_REPAIR
        self.reason = reason


class IdentityViolation(PolicyViolation):
    """Who asked may not ask for this (medic's own name or kind, a detector acting as a person,
    a detector asking for removal, a migration without evidence)."""

    def __init__(self, rule: RepairRule, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


# --- actors --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a person (``user:NAME``) or a detector (``detector:NAME``; a node agent's
    ``agent:NODE`` name is a detector too)."""

    name: str
    kind: RequesterKind

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}"

    @classmethod
    def parse(cls, text: str, kind: RequesterKind | None = None) -> Actor:
        """``user:alice``, ``detector:nvsentinel``, ``agent:node7`` or a bare name (of ``kind``,
        a person by default). ``InputError`` for a malformed name or a prefix contradicting
        ``kind``; ``PolicyViolation`` for medic's own names or kind."""
        text = text.strip()
        found: RequesterKind | None = None
        name = text
        for prefix, prefixed in _PREFIXES.items():
            if text.startswith(prefix):
                found, name = prefixed, text.removeprefix(prefix)
        if found is None and text.startswith(_AGENT_PREFIX):
            found = RequesterKind.DETECTOR  # the node agent keeps its agent: name
        if found is not None and kind is not None and found is not kind:
            raise InputError("actor", f"{text!r} names a {found.value}, not a {kind.value}")
        resolved = found or kind or RequesterKind.USER
        if resolved is RequesterKind.MEDIC:
            raise IdentityViolation(RepairRule.IDENTITY, "only medic's own policy acts as medic")
        if not _NAME.match(name):
            raise InputError(
                "actor",
                f"{name!r} is not a valid name (letters, digits and _.:@+-, at most 128, "
                "starting with a letter or digit)",
            )
        if name in RESERVED_NAMES:
            raise IdentityViolation(
                RepairRule.IDENTITY,
                f"{name!r} is medic's own name: a person or detector cannot use it",
            )
        return cls(name, resolved)


def as_person(actor: Actor | str, verb: str) -> Actor:
    """``actor`` as a person who may ``verb``; ``IdentityViolation`` for a detector."""
    who = actor if isinstance(actor, Actor) else Actor.parse(actor)
    if who.kind is not RequesterKind.USER:
        raise IdentityViolation(
            RepairRule.IDENTITY,
            f"{who} is a detector: only a person may {verb} (detectors never act as people)",
        )
    return who
