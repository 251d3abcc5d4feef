"""medic.schedulers.sim: the built-in simulated GPU cluster (docs/simulator.md).

:class:`SimCluster` holds the state and exposes the ports as attributes: ``scheduler``
(``Scheduler``), ``logs`` (``LogSource``), ``node_provider`` (``NodeProvider``),
``fault_injector`` (``FaultInjector``) and ``workload`` (``Workload``).
"""

from medic.schedulers.sim.adapters import (
    SimFaultInjector,
    SimLogSource,
    SimNodeProvider,
    SimScheduler,
    SimWorkload,
)
from medic.schedulers.sim.cluster import SimCluster

__all__ = [
    "SimCluster",
    "SimFaultInjector",
    "SimLogSource",
    "SimNodeProvider",
    "SimScheduler",
    "SimWorkload",
]
