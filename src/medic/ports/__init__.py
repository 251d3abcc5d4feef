"""Typed ports: the small interfaces the control loop depends on.

Each port has a real adapter and a fake or simulator next to it. Adapters raise only
``medic.errors`` exceptions: ``TransientError`` for "try again", ``PermanentError`` /
``NotFoundError`` for "this will not work", so the loop can decide without parsing messages.

The ports live in four modules by what they face, and are imported from here:

- :mod:`.cluster`: ``Clock``, ``Scheduler``, ``LogSource``, ``NodeProvider``,
  ``FaultInjector``, ``Workload``;
- :mod:`.store`: ``AuditQuery``, ``Store``, ``ControllerLedger`` (job recovery's state);
- :mod:`.repairs`: ``RepairStore``, ``TokenStore``, ``ModeStore`` (node repair's and the API's);
- :mod:`.decisions`: ``Diagnoser``, ``AttributionProvider``, ``Metrics``.
"""

from __future__ import annotations

from medic.ports.cluster import Clock, FaultInjector, LogSource, NodeProvider, Scheduler, Workload
from medic.ports.decisions import AttributionProvider, Diagnoser, Metrics
from medic.ports.repairs import ModeStore, RepairStore, TokenStore
from medic.ports.store import AuditQuery, ControllerLedger, Store

__all__ = [
    "AttributionProvider",
    "AuditQuery",
    "Clock",
    "ControllerLedger",
    "Diagnoser",
    "FaultInjector",
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
