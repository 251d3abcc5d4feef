"""Typed ports: the small interfaces the control loop depends on.

Each port has a real adapter and a fake or simulator next to it. Adapters raise only
``medic.errors`` exceptions: ``TransientError`` for "try again", ``PermanentError`` /
``NotFoundError`` for "this will not work", so the loop can decide without parsing messages.

The ports live in four modules by what they face, and are imported from here:

- :mod:`.cluster`: ``Clock``, ``Scheduler``, ``LogSource``, ``NodeProvider``,
  ``FaultInjector``, ``Workload``;
- :mod:`.store`: job recovery's state, a port per consumer's need: ``Inventory``, ``Evidence``,
  ``AdviceStore``, ``AuditLog``, ``AuditQuery``, ``ActionLedger``, ``CursorStore``,
  ``LeaseStore``; ``Store``,
  all of them (the composition root's); ``ControllerLedger`` (embedded or remote controller);
- :mod:`.repairs`: ``RepairStore``, ``TokenStore``, ``ModeStore`` (node repair's and the API's);
- :mod:`.decisions`: ``Diagnoser``, ``AttributionProvider``, ``Metrics``.
"""

from __future__ import annotations

from medic.ports.cluster import Clock, FaultInjector, LogSource, NodeProvider, Scheduler, Workload
from medic.ports.decisions import AttributionProvider, Diagnoser, Metrics
from medic.ports.repairs import ModeStore, RepairStore, TokenStore
from medic.ports.store import (
    ActionLedger,
    AdviceStore,
    AuditLog,
    AuditQuery,
    ControllerLedger,
    CursorStore,
    Evidence,
    Inventory,
    LeaseStore,
    Store,
)

__all__ = [
    "ActionLedger",
    "AdviceStore",
    "AttributionProvider",
    "AuditLog",
    "AuditQuery",
    "Clock",
    "ControllerLedger",
    "CursorStore",
    "Diagnoser",
    "Evidence",
    "FaultInjector",
    "Inventory",
    "LeaseStore",
    "LogSource",
    "Metrics",
    "ModeStore",
    "NodeProvider",
    "RepairStore",
    "Scheduler",
    "Store",
    "TokenStore",
    "Workload",
]
