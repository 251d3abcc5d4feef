"""What the control loop needs of the store: unions of the store's ports (``medic.ports``), one
per consumer, so each says which parts of job recovery's state it reads and writes."""

from __future__ import annotations

from typing import Protocol

from medic.ports import ActionLedger, AdviceStore, AuditLog, Evidence, Inventory

__all__ = ["EvaluationStore", "LoopStore"]


class EvaluationStore(Inventory, Evidence, AdviceStore, AuditLog, Protocol):
    """What evaluating jobs reads and writes (:class:`~medic.control.evaluation.JobEvaluator`):
    attempts and progress, detections and verdicts, advice, the audit trail."""


class LoopStore(EvaluationStore, ActionLedger, Protocol):
    """What a pass of the loop uses (:class:`~medic.control.loop.ControlLoop`): the inventory it
    syncs, its evaluator's store, and the step ledger of its embedded controller."""
