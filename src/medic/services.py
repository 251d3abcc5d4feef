"""The running parts of one medic process, built by ``medic.wiring`` and handed to the API, the CLI
and the demo. Typed by ports only, so nothing above the composition root names an adapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from medic.config.settings import Settings
from medic.control.loop import ControlLoop
from medic.domain.ids import ClusterName
from medic.ports import Clock, FaultInjector, LogSource, Metrics, Scheduler, Store, Workload
from medic.repair.engine import RepairEngine

__all__ = ["Services"]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    cluster: ClusterName
    clock: Clock
    store: Store
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
