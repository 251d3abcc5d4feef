"""The composition root: builds a running medic from :class:`Settings`.

The only module that names concrete adapters (the SQL store, the simulator, the Slurm adapter,
Prometheus metrics). Everything above it (CLI, API, demo) receives
:class:`~medic.services.Services`, typed by ports, so swapping an adapter never touches
them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from medic.config.settings import Settings
from medic.control.leases import LeaseKeeper, process_holder
from medic.control.loop import ControlLoop
from medic.detect.catalogue import site_catalogue
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.cluster import JobSpec
from medic.domain.ids import ClusterName
from medic.domain.leases import controller_lease, loop_lease
from medic.errors import ConfigError
from medic.ports import (
    Clock,
    CursorStore,
    FaultInjector,
    LogSource,
    NodeProvider,
    Scheduler,
    Workload,
)
from medic.repair.engine import RepairEngine
from medic.schedulers.cache import SnapshotCache
from medic.schedulers.hooks import HookNodeProvider, hook_commands, run_command
from medic.schedulers.sim import SimCluster
from medic.schedulers.slurm import (
    SlurmLogSource,
    SlurmNodeProvider,
    SlurmScheduler,
    runner_from_settings,
)
from medic.schedulers.slurm.requests import parse_request
from medic.services import Services
from medic.store import SqlStore, create_store, default_database_url
from medic.telemetry.metrics import PrometheusMetrics
from medic.telemetry.state import StateCollector
from medic.workers import ProcessShardPool
from medic.workers import second_opinion as make_second_opinion

__all__ = ["SystemClock", "build", "build_scheduler", "open_store"]

logger = logging.getLogger(__name__)

SCHEDULERS = ("sim", "slurm")


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Cluster:
    scheduler: Scheduler
    logs: LogSource
    injector: FaultInjector | None
    workload: Workload | None
    provider: NodeProvider


def open_store(settings: Settings, *, migrate: bool = True) -> SqlStore:
    """The configured store, migrated to the latest schema (``migrate=False``: read as it is;
    an older or missing schema is a ``StoreError``)."""
    return create_store(settings.store.url or default_database_url(), migrate=migrate)


def build_scheduler(settings: Settings, *, clock: Clock | None = None) -> Scheduler:
    """The configured scheduler on its own, for a remote controller (``medic controller``)."""
    _check_scheduler(settings)
    if settings.scheduler.kind == "slurm":
        runner = runner_from_settings(settings.slurm)
        return SlurmScheduler(runner, ClusterName(settings.scheduler.cluster), settings.slurm)
    cluster = ClusterName(settings.scheduler.cluster)
    return SimCluster(clock or SystemClock(), settings.sim, cluster=cluster).scheduler


def _check_scheduler(settings: Settings) -> None:
    if settings.scheduler.kind not in SCHEDULERS:
        raise ConfigError(
            "scheduler.kind",
            f"unknown scheduler {settings.scheduler.kind!r}; available: {', '.join(SCHEDULERS)}",
        )


def _cluster(
    settings: Settings, cursors: CursorStore, clock: Clock, start_workload: bool
) -> _Cluster:
    name = ClusterName(settings.scheduler.cluster)
    if settings.scheduler.kind == "slurm":
        runner = runner_from_settings(settings.slurm)
        scheduler = SnapshotCache(
            SlurmScheduler(runner, name, settings.slurm),
            clock=clock,
            ttl_seconds=settings.slurm.snapshot_seconds,
        )
        logs = SlurmLogSource(cursors, settings.slurm, clock=clock)
        # Slurm reboots by itself; every other repair action runs the operator's hook command.
        hooked = HookNodeProvider.from_settings(
            SlurmNodeProvider(runner, settings.slurm), settings.repair
        )
        return _Cluster(scheduler, logs, injector=None, workload=None, provider=hooked)
    sim = SimCluster(clock, settings.sim, cluster=name)
    if start_workload:
        for i in range(settings.sim.jobs):
            sim.workload.submit(
                JobSpec.numbered(
                    i + 1, num_nodes=settings.sim.nodes_per_job, partitions=settings.sim.partitions
                )
            )
    provider: NodeProvider = sim.node_provider
    if hook_commands(settings.repair):  # the simulator does every action; hooks may override
        provider = HookNodeProvider.from_settings(provider, settings.repair)
    return _Cluster(sim.scheduler, sim.logs, sim.fault_injector, sim.workload, provider)


def build(
    settings: Settings, *, clock: Clock | None = None, start_workload: bool = False
) -> Services:
    """Wire one medic process. ``start_workload`` submits the simulator's initial jobs."""
    _check_scheduler(settings)
    signatures = site_catalogue(settings.detect.extra_signature_files)  # before opening anything
    clock = clock or SystemClock()
    store = open_store(settings)
    parts = _cluster(settings, store, clock, start_workload)
    metrics = PrometheusMetrics()
    metrics.registry.register(StateCollector(store, parts.scheduler.cluster, clock))
    diagnoser = SignatureDiagnoser(signatures)
    repairs = None
    if settings.repair.enabled:
        repairs = RepairEngine(
            store=store,
            scheduler=parts.scheduler,
            provider=parts.provider,
            clock=clock,
            settings=settings.repair,
            metrics=metrics,
            validation_runner=run_command,
            signatures=diagnoser.signatures,
            drain_requests=parse_request if settings.scheduler.kind == "slurm" else None,
        )
    second_opinion = make_second_opinion(settings, store, clock)
    shards = ProcessShardPool(settings) if settings.loop.workers > 1 else None
    cluster, ttl = parts.scheduler.cluster, settings.controller.lease_seconds
    holder = process_holder()
    leases = [
        LeaseKeeper(store, name, clock=clock, ttl_seconds=ttl, metrics=metrics, holder=holder)
        for name in (loop_lease(cluster), controller_lease(cluster))
    ]
    loop = ControlLoop(
        scheduler=parts.scheduler,
        logs=parts.logs,
        store=store,
        modes=store,
        diagnoser=diagnoser,
        clock=clock,
        metrics=metrics,
        settings=settings,
        repairs=repairs,
        second_opinion=second_opinion,
        shards=shards,
        lease=leases[0],
        controller_lease=leases[1],
        single_process=store.single_process,
    )

    def close() -> None:
        if shards is not None:
            shards.close()
        if second_opinion is not None:
            second_opinion.close()
        store.close()

    return Services(
        settings=settings,
        cluster=parts.scheduler.cluster,
        clock=clock,
        store=store,
        repair_store=store,
        tokens=store,
        modes=store,
        scheduler=parts.scheduler,
        logs=parts.logs,
        metrics=metrics,
        exposition=metrics.render,
        loop=loop,
        injector=parts.injector,
        workload=parts.workload,
        close=close,
        repairs=repairs,
    )
