"""The control loop: observe -> detect -> attribute -> decide -> act -> verify, once per pass.

Level-triggered: each pass reads a full scheduler snapshot and the log lines that appeared since
the previous pass, and compares them with what the store already holds; nothing depends on having
seen an event, so any pass can be rerun. Decisions are pure calls into ``detect``, ``attribute``
and ``policy``; effects go through the ports. A job whose evaluation raises is paused for
``loop.error_backoff_seconds`` and recorded, and never stops the pass for the other jobs.

With a ``repairs`` collaborator (node auto-repair, :class:`NodeRepairs`), each pass hands it the
nodes, jobs and detections it read, before evaluating jobs; a requeue then also excludes the nodes
it says job recovery must avoid (under repair, out of service, or with a critical alert firing).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol

from medic.attribute.blame import attribute, fan_out_kernel, node_failures
from medic.config.settings import Settings
from medic.control import records
from medic.control.executor import Controller
from medic.control.external import SecondOpinion
from medic.control.watch import JobWatch
from medic.domain.advice import Advice, AdviceAction, AdviceRequest
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, JobState, Mode, Node, NodeState
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import JobId, NodeName
from medic.domain.modes import ClusterModes
from medic.errors import InputError, MedicError
from medic.policy.options import parse_job_options
from medic.policy.recovery import decide, effective_mode
from medic.ports import Clock, Diagnoser, LogSource, Metrics, ModeStore, Scheduler, Store

__all__ = ["ControlLoop", "NodeRepairs", "PassReport"]

logger = logging.getLogger(__name__)

_PROGRESS_SAVE_SECONDS = 5.0
_ENDED_BADLY = (JobState.FAILED, JobState.NODE_FAIL, JobState.TIMEOUT)
_KERNEL_LAG_SECONDS = 30.0
"""How long after an attempt ended badly a kernel line on its nodes still counts as its evidence
(while its failure is not decided)."""


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
    """Node auto-repair as the loop sees it (``medic.control.repairs.RepairEngine``)."""

    def run_pass(
        self, nodes: Sequence[Node], jobs: Sequence[Job], detections: Sequence[Detection]
    ) -> object:
        """One repair pass over what this loop pass read (detections: every scan result)."""
        ...

    def placement_exclusions(self) -> frozenset[NodeName]:
        """Nodes job recovery must never place a job on."""
        ...


class ControlLoop:
    """One cluster's loop. ``run_once`` is a pass; ``run_forever`` paces passes until stopped."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        logs: LogSource,
        store: Store,
        diagnoser: Diagnoser,
        clock: Clock,
        metrics: Metrics,
        settings: Settings,
        repairs: NodeRepairs | None = None,
        second_opinion: SecondOpinion | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._second_opinion = second_opinion
        self._repairs = repairs
        self._logs = logs
        self._store = store
        self._diagnoser = diagnoser
        self._clock = clock
        self._metrics = metrics
        self._settings = settings
        self._cluster = scheduler.cluster
        self._controller = Controller(scheduler=scheduler, ledger=store, clock=clock)
        self._watches: dict[JobId, JobWatch] = {}
        self._invalid_options: dict[JobId, str | None] = {}
        self._overrides: dict[JobId, Mode | None] = {}
        """Each watched job's own mode from its comment (None: it sets none)."""
        self._modes: ClusterModes | None = None
        """The run-time modes stored for this cluster, read once per pass."""
        self._counts: defaultdict[str, int] = defaultdict(int)
        store.ensure_cluster(self._cluster, settings.scheduler.kind)

    # ------------------------------------------------------------------ passes
    def run_forever(self, stop: threading.Event) -> None:
        """Run passes every ``loop.interval_seconds`` until ``stop`` is set."""
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

    def run_once(self) -> PassReport:
        """One full pass over the cluster."""
        started = self._clock.now()
        self._counts.clear()
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
        self._read_modes()
        lines = self._logs.read_new(jobs)
        found = self._diagnoser.scan(lines)
        detections = self._route(found, jobs)
        self._repair_pass(nodes, jobs, found)
        node_states = {n.name: n for n in nodes}
        for job in jobs:
            self._guarded(job, partial(self._evaluate, job, detections, node_states))
        self._reconcile()
        self._forget_finished(jobs)
        return self._report(started, len(jobs), len(lines))

    def _report(self, started: datetime, jobs: int, lines: int) -> PassReport:
        seconds = (self._clock.now() - started).total_seconds()
        self._metrics.loop_pass(seconds)
        c = self._counts
        return PassReport(
            jobs, lines, c["detections"], c["verdicts"], c["actions"], c["errors"], seconds
        )

    def _repair_pass(
        self, nodes: Sequence[Node], jobs: Sequence[Job], detections: Sequence[Detection]
    ) -> None:
        if self._repairs is None:
            return
        try:
            self._repairs.run_pass(nodes, jobs, detections)
        except Exception:  # node repair failing must not stop job recovery
            self._metrics.loop_error("repair")
            logger.exception("node-repair pass failed")

    def _guarded(self, job: Job, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # one bad job must not stop the pass for the others
            self._counts["errors"] += 1
            self._metrics.loop_error("evaluate")
            logger.exception("job %s: evaluation failed", job.id)
            # Looked up after the failure: the evaluation may have created or replaced the watch.
            watch = self._watches.get(job.id)
            if watch is not None:
                backoff = timedelta(seconds=self._settings.loop.error_backoff_seconds)
                watch.retry_after = self._clock.now() + backoff
            self._audit(job.id, AuditKind.LOOP_ERROR, {"error": repr(exc)})

    # ------------------------------------------------------------------ observe
    def _route(
        self, detections: Sequence[Detection], jobs: Sequence[Job]
    ) -> dict[JobId, list[Detection]]:
        """Group detections by job, copying kernel ones to every job on the emitting node: the
        jobs running there, and a job that just ended badly there whose failure is not decided
        yet (a kernel line often arrives a pass after the crash it explains)."""
        on_node: dict[NodeName, list[JobId]] = defaultdict(list)
        for job in jobs:
            if job.state is JobState.RUNNING or self._awaits_evidence(job):
                for node in job.nodes:
                    on_node[node].append(job.id)
        kernel = [d for d in detections if d.job_id is None]
        if kernel:
            # Kernel lines are node evidence (for node repair) whatever the jobs there do.
            self._store.add_detections(self._cluster, kernel)
        routed: dict[JobId, list[Detection]] = defaultdict(list)
        for det in fan_out_kernel(detections, on_node):
            if det.job_id is not None:
                routed[det.job_id].append(det)
        return routed

    def _awaits_evidence(self, job: Job) -> bool:
        """The job's current attempt ended badly, recently, and is not decided yet."""
        if job.state not in _ENDED_BADLY and job.state is not JobState.COMPLETING:
            return False
        watch = self._watches.get(job.id)
        if watch is None or watch.attempt != job.restart_count or watch.decided:
            return False  # a requeue in progress (new attempt), or decided already
        if watch.ended_at is None:
            return True
        lag = timedelta(seconds=max(self._settings.detect.settle_seconds, _KERNEL_LAG_SECONDS))
        return self._clock.now() - watch.ended_at <= lag

    def _watch(self, job: Job) -> JobWatch | None:
        """The job's watch for its current attempt, or None when medic must leave it alone."""
        watch = self._watches.get(job.id)
        if watch is None:
            try:
                options = parse_job_options(job.comment)
            except InputError as exc:
                if self._invalid_options.get(job.id, "") != job.comment:
                    self._invalid_options[job.id] = job.comment
                    self._audit(job.id, AuditKind.JOB_OPTIONS_INVALID, {"error": str(exc)})
                return None
            self._overrides[job.id] = options.mode
            watch = JobWatch(
                job_id=job.id,
                attempt=job.restart_count,
                mode=effective_mode(self._stored_mode(job), options),
                max_attempts_without_progress=options.max_attempts_without_progress,
            )
            self._watches[job.id] = self._resume(watch)
        elif job.restart_count > watch.attempt:
            self._save_progress(job, watch, self._clock.now(), force=True)
            watch = self._watches[job.id] = self._resume(watch.next_attempt(job.restart_count))
        return watch

    def _resume(self, watch: JobWatch) -> JobWatch:
        """Seed a new watch with what the store knows of its attempt (medic may have restarted
        mid-attempt): the evidence stored so far and the progress recorded."""
        for det in self._store.list_detections(self._cluster, watch.job_id, watch.attempt):
            watch.add(det, det.time)
        for attempt in self._store.list_attempts(self._cluster, watch.job_id):
            if attempt.number == watch.attempt:
                watch.saved_progress = attempt.progress
        return watch

    # ------------------------------------------------------------------ detect + decide
    def _evaluate(
        self,
        job: Job,
        routed: dict[JobId, list[Detection]],
        nodes: dict[NodeName, Node],
    ) -> None:
        watch = self._watch(job)
        if watch is None:
            return
        watch.mode = self._mode_of(job)  # an operator may have switched it since the last pass
        now = self._clock.now()
        fresh = [_with_attempt(d, watch.attempt) for d in routed.get(job.id, [])]
        self._take(job, watch, fresh, now)
        self._take(job, watch, self._down_nodes(job, watch, nodes, now), now)
        if watch.retry_after is not None and now < watch.retry_after:
            return  # backing off after an error: keep gathering evidence, decide later
        if job.state is JobState.RUNNING:
            for derived in (
                watch.tracker.check_hang(now, self._settings.detect),
                watch.tracker.check_straggler(now, self._settings.detect),
            ):
                if derived is not None:
                    self._take(job, watch, [_derived(derived, job.id, watch.attempt)], now)
        self._save_progress(job, watch, now)
        if job.state in _ENDED_BADLY and watch.ended_at is None:
            watch.ended_at = now
        if not watch.decided and self._is_ready(job, watch, now):
            self._decide(job, watch, now)

    def _take(self, job: Job, watch: JobWatch, fresh: list[Detection], now: datetime) -> None:
        if not fresh:
            return
        evidence = [d for d in fresh if d.role is not Role.PROGRESS]
        if evidence:
            self._store.add_detections(self._cluster, evidence)
        for det in fresh:
            if watch.add(det, now):
                self._counts["detections"] += 1
                self._metrics.detection(self._cluster, det.signature_id)
                self._metrics.detection_latency(max(0.0, (now - det.time).total_seconds()))
                self._store.append_audit(
                    records.detection_event(self._cluster, job.id, det, watch.mode, now)
                )

    def _down_nodes(
        self, job: Job, watch: JobWatch, nodes: dict[NodeName, Node], now: datetime
    ) -> list[Detection]:
        """The scheduler's word that a node of the job is down: direct evidence against it,
        seen at once (the job itself may take a while to end in NODE_FAIL)."""
        if job.state not in (JobState.RUNNING, JobState.NODE_FAIL):
            return []
        down = {n for n in job.nodes if n in nodes and nodes[n].state is NodeState.DOWN}
        new = frozenset(down - watch.down_nodes)
        watch.down_nodes |= new
        return node_failures(job, watch.attempt, new, now) if new else []

    def _is_ready(self, job: Job, watch: JobWatch, now: datetime) -> bool:
        """Enough evidence to decide: the attempt is failing or ended badly, and the settle time
        for evidence from other nodes (counted from the first fatal detection, or from the end
        when nothing fatal was seen) has passed: a kernel line read a pass after the crash it
        explains still names the node."""
        settle = timedelta(seconds=self._settings.detect.settle_seconds)
        if job.state in _ENDED_BADLY:
            seen = [t for t in (watch.first_fatal_at, watch.ended_at) if t is not None]
            return not seen or now - min(seen) >= settle
        if job.state in (JobState.COMPLETED, JobState.CANCELLED):
            return False  # ended on purpose (by its user or by medic): nothing to recover
        if watch.first_fatal_at is None:
            return any(d.signature_id.startswith("medic.straggler.") for d in watch.evidence)
        return now - watch.first_fatal_at >= settle

    def _decide(self, job: Job, watch: JobWatch, now: datetime) -> None:
        existing = self._store.advice_for_job(self._cluster, job.id)
        if (
            existing is not None
            and existing.attempt >= watch.attempt
            and (existing.action is not AdviceAction.EXCLUDE_NEXT or watch.first_fatal_at is None)
        ):
            watch.decided = True  # decided before a restart of medic: level-triggered, no repeat
            return
        evidence = [*watch.recent_progress, *watch.evidence]
        verdict = attribute(job, watch.attempt, evidence, now=now)
        attempts = self._store.list_attempts(self._cluster, job.id)
        request = decide(
            verdict,
            job,
            attempts,
            mode=watch.mode,
            settings=self._settings.policy,
            max_attempts_without_progress=watch.max_attempts_without_progress,
        )
        if request.action is AdviceAction.NONE:
            return
        if existing is not None and existing.action is AdviceAction.EXCLUDE_NEXT:
            # A straggler found earlier in this job joins the exclusions of its next restart.
            request = _with_exclusions(request, existing.exclude_nodes)
        if request.action is AdviceAction.REQUEUE and self._repairs is not None:
            # Never back onto a node under repair, out of service or with a critical alert.
            request = _with_exclusions(request, self._repairs.placement_exclusions())
        self._store.add_verdict(self._cluster, verdict)
        self._counts["verdicts"] += 1
        self._store.append_audit(records.verdict_event(self._cluster, verdict, watch.mode, now))
        advice = self._store.publish_advice(request, now)
        self._metrics.advice(self._cluster, advice.action.value)
        self._store.append_audit(records.advice_event(advice, verdict, now))
        if self._second_opinion is not None:
            self._second_opinion.ask(job, verdict, evidence)
        watch.decided = request.action is not AdviceAction.EXCLUDE_NEXT

    # ------------------------------------------------------------------ act + verify
    def _reconcile(self) -> None:
        """Carry out act-mode advice that has not converged yet (the embedded controller)."""
        for advice in self._store.list_advice(cluster=self._cluster, active_only=True):
            if advice.mode is not Mode.ACT or advice.action is AdviceAction.EXCLUDE_NEXT:
                continue
            try:
                outcome = self._controller.reconcile(advice)
            except MedicError as exc:
                logger.warning("job %s: reconcile failed, will retry: %s", advice.job_id, exc)
                self._metrics.loop_error("act")
                continue
            if outcome.first_effect_at is not None:
                self._counts["actions"] += 1
                self._observe_action_latency(advice, outcome.first_effect_at)

    def _observe_action_latency(self, advice: Advice, done_at: datetime) -> None:
        watch = self._watches.get(advice.job_id)
        start = watch.first_fatal_at if watch and watch.attempt == advice.attempt else None
        start = start or advice.created_at
        self._metrics.action_latency(max(0.0, (done_at - start).total_seconds()))

    def _save_progress(
        self, job: Job, watch: JobWatch, now: datetime, *, force: bool = False
    ) -> None:
        progress = watch.saved_progress.merged(watch.tracker.progress())
        if progress == watch.saved_progress:
            return
        saved = watch.saved_progress
        milestone = (
            progress.last_checkpoint_step != saved.last_checkpoint_step
            or progress.first_step != saved.first_step
            or progress.loaded_checkpoint_step != saved.loaded_checkpoint_step
        )
        stale = watch.saved_progress_at is None or (
            (now - watch.saved_progress_at).total_seconds() >= _PROGRESS_SAVE_SECONDS
        )
        if force or milestone or stale:
            self._store.update_progress(self._cluster, job.id, watch.attempt, progress)
            watch.saved_progress, watch.saved_progress_at = progress, now

    def _forget_finished(self, jobs: Sequence[Job]) -> None:
        present = {j.id for j in jobs}
        for job_id in [j for j in self._watches if j not in present]:
            del self._watches[job_id]
            self._overrides.pop(job_id, None)

    # ------------------------------------------------------------------ modes
    def _read_modes(self) -> None:
        """Read the run-time modes operators switch through the API (``ModeStore``)."""
        if not isinstance(self._store, ModeStore):
            return
        try:
            self._modes = self._store.get_modes(self._cluster)
        except MedicError as exc:
            logger.warning("cannot read the run-time modes, keeping the last known: %s", exc)

    def _stored_mode(self, job: Job) -> Mode:
        """The job's partition mode, else the cluster's stored mode, else ``scheduler.mode``."""
        default = self._settings.scheduler.mode
        return default if self._modes is None else self._modes.for_partition(job.partition, default)

    def _mode_of(self, job: Job) -> Mode:
        """The job's mode: its comment's override on top of :meth:`_stored_mode`."""
        override = self._overrides.get(job.id)
        return override if override is not None else self._stored_mode(job)

    def _audit(self, job_id: JobId, kind: AuditKind, payload: dict[str, object]) -> None:
        now = self._clock.now()
        self._store.append_audit(
            records.job_event(self._cluster, job_id, kind, now, payload=payload)
        )


def _with_attempt(det: Detection, attempt: int) -> Detection:
    return det if det.attempt == attempt else replace(det, attempt=attempt)


def _derived(det: Detection, job_id: JobId, attempt: int) -> Detection:
    """A finding the loop derived for the job (hang, straggler), stamped with the job and attempt:
    the watch's tracker knows neither, and a detection stored without its job is lost to the
    job's history (and to a restarted medic's ``_resume``)."""
    return replace(det, job_id=job_id, attempt=attempt)


def _with_exclusions(request: AdviceRequest, extra: frozenset[NodeName]) -> AdviceRequest:
    return replace(request, exclude_nodes=request.exclude_nodes | extra)
