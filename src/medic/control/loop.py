"""The control loop: observe -> detect -> attribute -> decide -> act -> verify, once per pass.

Level-triggered: each pass reads a full scheduler snapshot and the log lines that appeared since
the previous pass, and compares them with what the store already holds; nothing depends on having
seen an event, so any pass can be rerun. Decisions are pure calls into ``detect``, ``attribute``
and ``policy``; effects go through the ports. A job whose evaluation raises is paused for
``loop.error_backoff_seconds`` and recorded, and never stops the pass for the other jobs.

With a ``repairs`` collaborator (node auto-repair, :class:`NodeRepairs`), each pass hands it the
nodes, jobs and detections it read, before evaluating jobs; a requeue then also excludes the nodes
it says job recovery must avoid (under repair, out of service, or with a critical alert firing).

With a ``lease`` (:class:`~medic.control.leases.LeaseKeeper`, the composition root's default) a
pass runs only in the process that holds the cluster's loop lease; the other replicas stand by,
serve the API, and take over once the holder's lease runs out. Its embedded controller acts only
while it also holds the cluster's controller lease, the one remote controllers take
(``docs/replicas.md``).

This module sequences the pass and carries out act-mode advice; what happens to each job (its
watch, evidence, verdict, advice and mode) is :class:`~medic.control.evaluation.JobEvaluator`'s.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Protocol

from medic.config.settings import Acting, Settings
from medic.control.evaluation import JobEvaluator
from medic.control.executor import Controller
from medic.control.external import SecondOpinion
from medic.control.leases import LeaseKeeper
from medic.control.shards import ShardedJobs, ShardPool
from medic.control.stores import LoopStore
from medic.domain.advice import Advice, AdviceAction
from medic.domain.cluster import Job, Mode, Node
from medic.domain.diagnosis import Detection
from medic.domain.ids import NodeName
from medic.errors import FencedError, MedicError
from medic.ports import Clock, Diagnoser, LogSource, Metrics, ModeStore, Scheduler

__all__ = ["ControlLoop", "NodeRepairs", "PassReport"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassReport:
    """What one pass saw and did (for the demo's live view, benchmarks and tests)."""

    jobs: int
    lines: int
    detections: int
    verdicts: int
    actions: int
    errors: int
    seconds: float


class NodeRepairs(Protocol):
    """Node auto-repair as the loop sees it (``medic.repair.engine.RepairEngine``)."""

    def run_pass(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[Job],
        detections: Sequence[Detection],
        acting: frozenset[NodeName] = ...,
        changed: frozenset[NodeName] | None = ...,
    ) -> object:
        """One repair pass over what this loop pass read (detections: every scan result;
        ``acting``: the nodes in act mode, which it may take out of the pool; ``changed``: the
        nodes whose state changed since the previous pass)."""
        ...

    def placement_exclusions(self) -> frozenset[NodeName]:
        """Nodes job recovery must never place a job on."""
        ...

    def before_release(self, job: Job) -> None:
        """Right before a requeued job is released: take off the exclusions medic added for
        nodes that are back in service."""
        ...


class ControlLoop:
    """One cluster's loop. ``run_once`` is a pass; ``run_forever`` paces passes until stopped."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        logs: LogSource,
        store: LoopStore,
        modes: ModeStore,
        diagnoser: Diagnoser,
        clock: Clock,
        metrics: Metrics,
        settings: Settings,
        repairs: NodeRepairs | None = None,
        second_opinion: SecondOpinion | None = None,
        shards: ShardPool | None = None,
        lease: LeaseKeeper | None = None,
        controller_lease: LeaseKeeper | None = None,
        single_process: bool = False,
    ) -> None:
        self._scheduler = scheduler
        self._lease = lease
        self._single_process = single_process
        self._warned_other: str | None = None
        self._repairs = repairs
        self._logs = logs
        self._store = store
        self._diagnoser = diagnoser
        self._clock = clock
        self._metrics = metrics
        self._settings = settings
        self._cluster = scheduler.cluster
        self._controller = Controller(
            scheduler=scheduler,
            ledger=store,
            clock=clock,
            before_release=None if repairs is None else repairs.before_release,
            lease=controller_lease,
        )
        self._controller_lease = controller_lease
        self._acting = settings.controller.acting is Acting.EMBEDDED
        self._counts: defaultdict[str, int] = defaultdict(int)
        self._last_nodes: dict[NodeName, Node] = {}
        self.last_report: PassReport | None = None
        """The latest pass's report (the demo's live view shows it)."""
        self._jobs = JobEvaluator(
            cluster=self._cluster,
            store=store,
            modes=modes,
            clock=clock,
            metrics=metrics,
            settings=settings,
            counts=self._counts,
            placement_exclusions=None if repairs is None else repairs.placement_exclusions,
            second_opinion=second_opinion,
        )
        self._shards = None
        if shards is not None:
            self._shards = ShardedJobs(
                shards,
                diagnoser=diagnoser,
                store_kernel=partial(store.add_detections, self._cluster),
                metrics=metrics,
                counts=self._counts,
                skip_quiet=settings.loop.skip_quiet_jobs,
            )
        store.ensure_cluster(self._cluster, settings.scheduler.kind)

    # ------------------------------------------------------------------ passes
    def run_forever(self, stop: threading.Event) -> None:
        """Run passes every ``loop.interval_seconds`` until ``stop`` is set; then give the lease
        up, so another replica takes the work over at once."""
        try:
            self._run_passes(stop)
        finally:
            for lease in (self._controller_lease, self._lease):
                if lease is not None:
                    lease.release()

    def _run_passes(self, stop: threading.Event) -> None:
        interval = self._settings.loop.interval_seconds
        while not stop.is_set():
            started = self._clock.now()
            try:
                self.run_once()
            except Exception:
                # The pass itself failed (store down, bug): log, back off, try again. Never exit.
                logger.exception("control-loop pass failed")
                stop.wait(self._settings.loop.error_backoff_seconds)
                continue
            spent = (self._clock.now() - started).total_seconds()
            stop.wait(max(0.0, interval - spent))

    @property
    def holder(self) -> str | None:
        """This process's name as a lease holder (None: it runs without leases)."""
        return None if self._lease is None else self._lease.holder

    def leases(self) -> dict[str, bool]:
        """The leases this loop takes, and whether it may act under each now."""
        keepers = (self._lease, self._controller_lease)
        return {k.name: k.may_act() for k in keepers if k is not None}

    def run_once(self) -> PassReport:
        """One full pass over the cluster; nothing while another process holds its lease."""
        started = self._clock.now()
        self._counts.clear()
        if not self._hold_lease():
            return self._report(started, 0, 0)
        try:
            nodes = list(self._scheduler.list_nodes())
            jobs = list(self._scheduler.list_jobs())
        except MedicError as exc:
            logger.warning("cannot read the scheduler: %s", exc)
            self._metrics.loop_error("observe")
            return self._report(started, 0, 0)
        now = self._clock.now()
        self._store.sync_nodes(self._cluster, nodes, now)
        self._store.sync_jobs(self._cluster, jobs, now)
        self._jobs.modes.read()
        lines = self._logs.read_new(jobs)
        node_states = {n.name: n for n in nodes}
        changed = self._changed_nodes(node_states)
        if self._shards is not None:
            found = self._shards.observe(now, jobs, nodes, changed, lines)
            repaired = self._repair_pass(nodes, jobs, found, changed)
            placement = (
                frozenset() if self._repairs is None else self._repairs.placement_exclusions()
            )
            self._shards.evaluate(self._clock.now(), placement)
        else:
            found = self._diagnoser.scan(lines)
            kernel = [d for d in found if d.job_id is None]
            if kernel:  # node evidence (for node repair) whatever the jobs there do
                self._store.add_detections(self._cluster, kernel)
            detections = self._jobs.route(found, jobs)
            repaired = self._repair_pass(nodes, jobs, found, changed)
            skip = changed if self._settings.loop.skip_quiet_jobs else None
            self._jobs.evaluate_all(jobs, detections, node_states, skip)
        # Only now, and only when node repair went through: a pass that failed before this
        # point leaves its node changes to the next one.
        if repaired:
            self._last_nodes = node_states
        self._reconcile()
        return self._report(started, len(jobs), len(lines))

    def _hold_lease(self) -> bool:
        """Take or renew the cluster's lease; False (standby) while another process holds it."""
        if self._lease is None or self._lease.hold() is not None:
            self._warned_other = None
            return True
        other = self._lease.other
        if other is not None and other.holder != self._warned_other:
            self._warned_other = other.holder
            if self._single_process:
                logger.error(
                    "another medic process (%s) acts on this SQLite database: SQLite serves one "
                    "process. Stop the other one, or run replicas on PostgreSQL or MySQL "
                    "(store.url); this one only serves the API until the other's lease ends",
                    other.holder,
                )
            else:
                logger.info("standing by: %s holds %s", other.holder, other.name)
        return False

    def _changed_nodes(self, nodes: dict[NodeName, Node]) -> frozenset[NodeName]:
        """Nodes whose scheduler state differs from the last pass that went through (all, on
        the first)."""
        before = self._last_nodes
        return frozenset(
            name
            for name, node in nodes.items()
            if (old := before.get(name)) is not node
            and (
                old is None
                or old != node
                # Left out of Node's ==, and what a worker's down-node wait reads:
                or old.not_responding != node.not_responding
                or old.comment != node.comment
            )
        )

    def _report(self, started: datetime, jobs: int, lines: int) -> PassReport:
        seconds = (self._clock.now() - started).total_seconds()
        self._metrics.loop_pass(seconds)
        c = self._counts
        self.last_report = PassReport(
            jobs, lines, c["detections"], c["verdicts"], c["actions"], c["errors"], seconds
        )
        return self.last_report

    def _repair_pass(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[Job],
        detections: Sequence[Detection],
        changed: frozenset[NodeName],
    ) -> bool:
        """Run node repair's pass; False when it failed (logged, never raised)."""
        if self._repairs is None:
            return True
        try:
            acting = self._jobs.modes.acting_nodes(nodes)
            self._repairs.run_pass(nodes, jobs, detections, acting, changed)
        except Exception:  # node repair failing must not stop job recovery
            self._metrics.loop_error("repair")
            logger.exception("node-repair pass failed")
            return False
        return True

    # ------------------------------------------------------------------ act + verify
    def _reconcile(self) -> None:
        """Carry out act-mode advice that has not converged yet (the embedded controller), while
        this process holds the lease and ``controller.acting`` is ``embedded``."""
        if not self._acting or not self._hold_lease():
            return
        if self._controller_lease is not None and self._controller_lease.hold() is None:
            return  # a remote controller (``medic controller``) acts on this cluster
        for advice in self._store.list_advice(cluster=self._cluster, active_only=True):
            if advice.mode is not Mode.ACT or advice.action is AdviceAction.EXCLUDE_NEXT:
                continue
            try:
                outcome = self._controller.reconcile(advice)
            except FencedError as exc:  # lost the lease: the next holder carries on
                logger.warning("job %s: stopped acting: %s", advice.job_id, exc)
                return
            except MedicError as exc:
                logger.warning("job %s: reconcile failed, will retry: %s", advice.job_id, exc)
                self._metrics.loop_error("act")
                continue
            if outcome.first_effect_at is not None:
                self._counts["actions"] += 1
                self._observe_action_latency(advice, outcome.first_effect_at)

    def _observe_action_latency(self, advice: Advice, done_at: datetime) -> None:
        source = self._jobs if self._shards is None else self._shards
        start = source.first_fatal_at(advice.job_id, advice.attempt) or advice.created_at
        self._metrics.action_latency(max(0.0, (done_at - start).total_seconds()))
