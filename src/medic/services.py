"""The running parts of one medic process, built by ``medic.wiring`` and handed to the API, the CLI
and the demo. Typed by ports only, so nothing above the composition root names an adapter.

The store fields are views of the one store the composition root opened, each typed by the
ports its consumers use: nobody above it casts the store to reach another port."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from medic.config.settings import Settings
from medic.control.loop import ControlLoop
from medic.domain.ids import ClusterName
from medic.ports import (
    Clock,
    FaultInjector,
    LogSource,
    Metrics,
    ModeStore,
    Scheduler,
    Store,
    TokenStore,
    Workload,
)
from medic.repair.alerts import RepairStores
from medic.repair.engine import RepairEngine

__all__ = ["Services"]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    cluster: ClusterName
    clock: Clock
    store: Store
    """Job recovery's state: inventory, evidence, advice, actions, audit trail, cursors."""
    repair_store: RepairStores
    """Node repair's state (alerts, repairs, policy, breaker, node health) with job recovery's,
    which repairs read and audit into; kept whether or not the engine runs (agents post alerts)."""
    tokens: TokenStore
    """API tokens and console sessions."""
    modes: ModeStore
    """The observe/act modes operators switch at run time."""
    scheduler: Scheduler
    logs: LogSource
    metrics: Metrics
    exposition: Callable[[], tuple[bytes, str]]
    """Renders the Prometheus exposition text and its content type for ``/metrics``."""
    loop: ControlLoop
    injector: FaultInjector | None
    """Fault injection, where the scheduler supports it (the simulator)."""
    workload: Workload | None
    close: Callable[[], None]
    """Releases what the composition root opened (database engine)."""
    repairs: RepairEngine | None = None
    """Node auto-repair (``repair.enabled``), also run by the loop once per pass."""
