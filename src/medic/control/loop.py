"""The control loop: observe -> detect -> attribute -> decide -> act -> verify, once per pass.

Level-triggered: each pass reads a full scheduler snapshot and the log lines that appeared since
the previous pass, and compares them with what the store already holds; nothing depends on having
seen an event, so any pass can be rerun. Decisions are pure calls into ``detect``, ``attribute``
and ``policy``; effects go through the ports. A job whose evaluation raises is paused for
``loop.error_backoff_seconds`` and recorded, and never stops the pass for the other jobs.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial

from medic.attribute.blame import attribute, fan_out_kernel, node_failures
from medic.config.settings import Settings
from medic.control import records
from medic.control.executor import Controller
from medic.control.watch import JobWatch
from medic.domain.advice import Advice, AdviceAction, AdviceRequest
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, JobState, Mode, Node, NodeState
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import JobId, NodeName
from medic.errors import InputError, MedicError
from medic.policy.options import parse_job_options
from medic.policy.recovery import decide, effective_mode
from medic.ports import Clock, Diagnoser, LogSource, Metrics, Scheduler, Store

__all__ = ["ControlLoop", "PassReport"]

logger = logging.getLogger(__name__)

_PROGRESS_SAVE_SECONDS = 5.0


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
    ) -> None:
        self._scheduler = scheduler
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
        lines = self._logs.read_new(jobs)
        detections = self._route(self._diagnoser.scan(lines), jobs)
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
        """Group detections by job, copying kernel ones to every job on the emitting node."""
        on_node: dict[NodeName, list[JobId]] = defaultdict(list)
        for job in jobs:
            if job.state is JobState.RUNNING:
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
            watch = JobWatch(
                job_id=job.id,
                attempt=job.restart_count,
                mode=effective_mode(self._settings.scheduler.mode, options),
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
                    self._take(job, watch, [_with_attempt(derived, watch.attempt)], now)
        self._save_progress(job, watch, now)
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
        """Enough evidence to decide: the attempt ended badly, or it is failing and the settle
        time for evidence from other nodes has passed."""
        if job.state in (JobState.FAILED, JobState.NODE_FAIL, JobState.TIMEOUT):
            return True
        if job.state in (JobState.COMPLETED, JobState.CANCELLED):
            return False  # ended on purpose (by its user or by medic): nothing to recover
        if watch.first_fatal_at is None:
            return any(d.signature_id.startswith("medic.straggler.") for d in watch.evidence)
        settle = timedelta(seconds=self._settings.detect.settle_seconds)
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
        self._store.add_verdict(self._cluster, verdict)
        self._counts["verdicts"] += 1
        self._store.append_audit(records.verdict_event(self._cluster, verdict, watch.mode, now))
        advice = self._store.publish_advice(request, now)
        self._metrics.advice(self._cluster, advice.action.value)
        self._store.append_audit(records.advice_event(advice, verdict, now))
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

    def _audit(self, job_id: JobId, kind: AuditKind, payload: dict[str, object]) -> None:
        now = self._clock.now()
        self._store.append_audit(
            records.job_event(self._cluster, job_id, kind, now, payload=payload)
        )


def _with_attempt(det: Detection, attempt: int) -> Detection:
    return det if det.attempt == attempt else replace(det, attempt=attempt)


def _with_exclusions(request: AdviceRequest, extra: frozenset[NodeName]) -> AdviceRequest:
    return replace(request, exclude_nodes=request.exclude_nodes | extra)
