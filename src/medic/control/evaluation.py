"""Per-job evaluation for the control loop: evidence in, verdict and advice out.

:class:`JobEvaluator` keeps one :class:`~medic.control.watch.JobWatch` per watched job (its
current attempt) and, each pass, routes the scan's detections to the jobs they concern, adds the
scheduler's word on down nodes and derived findings (hang, straggler), saves progress, and once an
attempt's evidence has settled asks ``attribute`` for a verdict and ``policy`` for advice, which it
publishes with its audit records, in the mode :class:`~medic.control.job_modes.JobModes` gives
the job.

Attempt boundaries: a watch's attempt counts as started once the job is seen running (or ended
after running). Until then the job's log lines are the previous attempt's teardown (a requeue's
``CANCELLED ... DUE TO JOB REQUEUE`` banner, the killed tasks' exits): stored and audited as that
attempt's, never evidence against the new one. When the scheduler requeues an attempt before
medic decided it (a node it declared down), the attempt is decided then, so that the next run
still avoids the nodes it implicated.

:class:`~medic.control.loop.ControlLoop` sequences the pass and owns error handling: it calls
:meth:`JobEvaluator.evaluate` once per job, guarded, and :meth:`JobEvaluator.back_off` when that
raised. Watches are derived state: a restarted medic seeds them again from the store
(``_resume``), and a decision already stored is never repeated.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from medic.attribute.blame import node_failures
from medic.config.settings import Settings
from medic.control import records
from medic.control.decisions import Decisions
from medic.control.external import SecondOpinion
from medic.control.job_modes import JobModes
from medic.control.progress_writes import ProgressWriteFailed, ProgressWrites
from medic.control.routing import ENDED_BADLY, awaits_evidence, route
from medic.control.stores import EvaluationStore
from medic.control.watch import JobWatch, of_attempt
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job, JobState, Node, NodeState
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.errors import InputError
from medic.policy.options import parse_job_options
from medic.policy.recovery import effective_mode
from medic.ports import Clock, Metrics, ModeStore

__all__ = ["JobEvaluator"]

logger = logging.getLogger(__name__)

_RAN = (JobState.RUNNING, JobState.COMPLETED, JobState.PREEMPTED, *ENDED_BADLY)
"""States an attempt reaches only by running (COMPLETING and CANCELLED may be a queued job's)."""


class JobEvaluator:
    """The watched jobs of one cluster, each evaluated once per pass of the loop.

    ``counts`` is the loop's per-pass tally: this adds ``detections`` and ``verdicts`` to it.
    ``placement_exclusions`` (node auto-repair's, when it runs) names the nodes a requeue must
    avoid.
    """

    def __init__(
        self,
        *,
        cluster: ClusterName,
        store: EvaluationStore,
        modes: ModeStore,
        clock: Clock,
        metrics: Metrics,
        settings: Settings,
        counts: defaultdict[str, int],
        placement_exclusions: Callable[[], frozenset[NodeName]] | None = None,
        second_opinion: SecondOpinion | None = None,
    ) -> None:
        self._cluster = cluster
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._settings = settings
        self._counts = counts
        self._placement_exclusions = placement_exclusions
        self._second_opinion = second_opinion
        self._watches: dict[JobId, JobWatch] = {}
        self._progress = ProgressWrites(cluster, store)
        self._decisions = Decisions(
            cluster=cluster,
            store=store,
            metrics=metrics,
            policy=settings.policy,
            counts=counts,
            placement_exclusions=placement_exclusions,
            second_opinion=second_opinion,
        )
        self._invalid_options: dict[JobId, str | None] = {}
        self.modes = JobModes(cluster, modes, settings.scheduler.mode)
        """Each watched job's mode; the loop reads the stored modes once per pass."""

    # ------------------------------------------------------------------ errors + latency
    def back_off(self, job_id: JobId, exc: Exception) -> None:
        """The job's evaluation raised: pause its decisions for ``loop.error_backoff_seconds``
        (poison-pill guard) and audit the error."""
        # Looked up after the failure: the evaluation may have created or replaced the watch.
        watch = self._watches.get(job_id)
        if watch is not None:
            backoff = timedelta(seconds=self._settings.loop.error_backoff_seconds)
            watch.retry_after = self._clock.now() + backoff
        self._audit(job_id, AuditKind.LOOP_ERROR, {"error": repr(exc)})

    def _backing_off(self) -> set[JobId]:
        now = self._clock.now()
        return {
            job_id
            for job_id, w in self._watches.items()
            if w.retry_after is not None and now < w.retry_after
        }

    def failing(self) -> dict[JobId, tuple[int, datetime]]:
        """Each watched job whose current attempt has a fatal detection: (attempt, stored at)."""
        return {
            job_id: (w.attempt, w.first_fatal_at)
            for job_id, w in self._watches.items()
            if w.first_fatal_at is not None
        }

    def first_fatal_at(self, job_id: JobId, attempt: int) -> datetime | None:
        """When the attempt's first fatal detection was stored, if this still watches it."""
        watch = self._watches.get(job_id)
        return watch.first_fatal_at if watch and watch.attempt == attempt else None

    # ------------------------------------------------------------------ observe
    def route(
        self, detections: Sequence[Detection], jobs: Sequence[Job]
    ) -> dict[JobId, list[Detection]]:
        """The pass's detections by job (:func:`medic.control.routing.route`); storing the
        kernel ones is the loop's."""
        now, settle = self._clock.now(), self._settings.detect.settle_seconds
        return route(
            detections, jobs, lambda j: awaits_evidence(j, self._watches.get(j.id), now, settle)
        )

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
            self.modes.set_override(job.id, options.mode)
            watch = JobWatch(
                job_id=job.id,
                attempt=job.restart_count,
                mode=effective_mode(self.modes.stored(job), options),
                max_attempts_without_progress=options.max_attempts_without_progress,
                # First seen already past its queue: its lines are its own.
                started=job.state not in (JobState.PENDING, JobState.UNKNOWN),
            )
            self._watches[job.id] = self._resume(watch)
        elif job.restart_count > watch.attempt:
            now = self._clock.now()
            self._progress.offer(watch, now, force=True)
            if not watch.decided and watch.first_fatal_at is not None and watch.last_job:
                # The scheduler requeued the attempt before medic decided (a node it declared
                # down, a preemption): the verdict still names the nodes the next run must avoid.
                self._decide(watch.last_job, watch, now)
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
                watch.tracker.resume(attempt.progress)
        return watch

    # ------------------------------------------------------------------ detect + decide
    def evaluate(
        self,
        job: Job,
        routed: dict[JobId, list[Detection]],
        nodes: dict[NodeName, Node],
        changed_nodes: frozenset[NodeName] | None = None,
    ) -> None:
        """One pass's evaluation of ``job``. With ``changed_nodes`` (the nodes whose scheduler
        state changed since the previous pass), a quiet job (:meth:`JobWatch.quiet`: no new line,
        none of its nodes changed) is skipped: a pass costs what changed, not the cluster's
        size. Without it, every job is evaluated in full."""
        now = self._clock.now()
        known = self._watches.get(job.id)
        if (
            known is not None
            and changed_nodes is not None
            and job.id not in routed
            and known.quiet(job, now)
            and not any(n in changed_nodes for n in job.nodes)
        ):
            return
        watch = self._watch(job)
        if watch is None:
            return
        self._evaluate(job, watch, routed, nodes, now)
        watch.seen_job = job
        due = [t for t in (self._progress.due_at(watch),) if t is not None]
        if job.state is JobState.RUNNING:
            check = watch.tracker.next_check_at(self._settings.detect)
            if check is not None:
                due.append(check)
        watch.next_due = min(due) if due else None

    def evaluate_all(
        self,
        jobs: Sequence[Job],
        routed: dict[JobId, list[Detection]],
        nodes: dict[NodeName, Node],
        changed_nodes: frozenset[NodeName] | None,
    ) -> None:
        """The pass's evaluation of every job (one that raises is backed off and never stops
        the others), then the pass's writes, then the watches of jobs gone from the listing
        are dropped."""
        for job in jobs:
            try:
                self.evaluate(job, routed, nodes, changed_nodes)
            except Exception as exc:  # one bad job must not stop the pass for the others
                self._counts["errors"] += 1
                self._metrics.loop_error("evaluate")
                logger.exception("job %s: evaluation failed", job.id)
                self.back_off(job.id, exc)
        self.flush()
        self.forget_finished(jobs)

    def flush(self) -> None:
        """Write what the pass gathered to write at its end (progress). A failed write backs
        off each job it held, as if its own evaluation had raised."""
        try:
            self._progress.flush(self._backing_off())
        except ProgressWriteFailed as failed:
            logger.warning("cannot save progress, will retry: %s", failed)
            for job_id in failed.jobs:
                self._counts["errors"] += 1
                self._metrics.loop_error("evaluate")
                self.back_off(job_id, failed.cause)

    def _evaluate(
        self,
        job: Job,
        watch: JobWatch,
        routed: dict[JobId, list[Detection]],
        nodes: dict[NodeName, Node],
        now: datetime,
    ) -> None:
        watch.mode = self.modes.of(job)  # an operator may have switched it since the last pass
        if job.state in _RAN:
            watch.started = True
        if job.state is JobState.RUNNING:
            watch.last_job = job
        if watch.started:
            # Progress lines are many and never stored: not copied just to carry the attempt.
            fresh = [
                d if d.role is Role.PROGRESS else of_attempt(d, watch.attempt)
                for d in routed.get(job.id, [])
            ]
            self._take(job, watch, fresh, now)
        else:
            self._take_teardown(job, watch, routed.get(job.id, []), now)
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
        self._progress.offer(watch, now)
        if job.state in ENDED_BADLY and watch.ended_at is None:
            watch.ended_at = now
        if not watch.decided and self._is_ready(job, watch, nodes, now):
            self._decide(job, watch, now)

    def _take_teardown(
        self, job: Job, watch: JobWatch, routed: list[Detection], now: datetime
    ) -> None:
        """Lines read before the attempt has been seen running: the previous attempt's teardown
        (the ``CANCELLED ... DUE TO JOB REQUEUE`` banner and the killed tasks' exits of a requeue,
        medic's own included). Kept and audited as that attempt's evidence, never this one's:
        they must not fail the new attempt, and its progress starts from its own lines."""
        ended = [
            of_attempt(d, watch.previous_attempt) for d in routed if d.role is not Role.PROGRESS
        ]
        if not ended:
            return
        self._store.add_detections(self._cluster, ended)
        for det in ended:
            self._store.append_audit(
                records.detection_event(self._cluster, job.id, det, watch.mode, now)
            )

    def _take(self, job: Job, watch: JobWatch, fresh: list[Detection], now: datetime) -> None:
        if not fresh:
            return
        evidence = [d for d in fresh if d.role is not Role.PROGRESS]
        if evidence:
            self._store.add_detections(self._cluster, evidence)
        failing = watch.first_fatal_at is not None
        for det in fresh:
            if watch.add(det, now):
                self._counts["detections"] += 1
                self._metrics.detection(self._cluster, det.signature_id)
                self._metrics.detection_latency(max(0.0, (now - det.time).total_seconds()))
                self._store.append_audit(
                    records.detection_event(self._cluster, job.id, det, watch.mode, now)
                )
        if not failing and watch.first_fatal_at is not None:
            watch.fatal_while_running = job.state is JobState.RUNNING

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

    def _is_ready(
        self, job: Job, watch: JobWatch, nodes: dict[NodeName, Node], now: datetime
    ) -> bool:
        """Enough evidence to decide: the attempt is failing or ended badly, and the settle time
        for evidence from other nodes (counted from the first fatal detection, or from the end
        when nothing fatal was seen) has passed: a kernel line read a pass after the crash it
        explains still names the node.

        Not while the job is completing with no failure seen while it ran (a person's cancel
        looks like that until Slurm says CANCELLED), nor while a node of a running job is only
        not responding: the scheduler is about to declare it down and end (and requeue) the job
        itself, and a requeue issued before that leaves the job's resources half released; that
        wait is bounded by ``detect.node_failure_wait_seconds``."""
        settle = timedelta(seconds=self._settings.detect.settle_seconds)
        if job.state in ENDED_BADLY:
            seen = [t for t in (watch.first_fatal_at, watch.ended_at) if t is not None]
            return not seen or now - min(seen) >= settle
        if job.state in (JobState.COMPLETED, JobState.CANCELLED):
            return False  # ended on purpose (by its user or by medic): nothing to recover
        if job.state is JobState.COMPLETING and not watch.fatal_while_running:
            return False
        if watch.first_fatal_at is None:
            return not watch.exclusion_advised and watch.straggler_seen
        if job.state is JobState.RUNNING and self._awaits_node_down(watch, nodes, now):
            return False
        return now - watch.first_fatal_at >= settle

    def _awaits_node_down(
        self, watch: JobWatch, nodes: dict[NodeName, Node], now: datetime
    ) -> bool:
        """True while a node of the attempt is only not responding (not declared down yet), for
        at most ``detect.node_failure_wait_seconds``."""
        waiting = any(nodes[n].not_responding for n in watch.down_nodes if n in nodes)
        if not waiting:
            return False
        watch.node_wait_since = watch.node_wait_since or now
        limit = timedelta(seconds=self._settings.detect.node_failure_wait_seconds)
        return now - watch.node_wait_since < limit

    def _decide(self, job: Job, watch: JobWatch, now: datetime) -> None:
        self._progress.flush(self._backing_off())  # the policy reads the attempts' progress
        self._decisions.decide(job, watch, now)

    def forget_finished(self, jobs: Sequence[Job]) -> None:
        present = {j.id for j in jobs}
        for job_id in [j for j in self._watches if j not in present]:
            del self._watches[job_id]
            self.modes.forget(job_id)

    def _audit(self, job_id: JobId, kind: AuditKind, payload: dict[str, object]) -> None:
        now = self._clock.now()
        self._store.append_audit(
            records.job_event(self._cluster, job_id, kind, now, payload=payload)
        )


def _derived(det: Detection, job_id: JobId, attempt: int) -> Detection:
    """A finding the loop derived for the job (hang, straggler), stamped with the job and attempt:
    the watch's tracker knows neither, and a detection stored without its job is lost to the
    job's history (and to a restarted medic's ``_resume``)."""
    return replace(det, job_id=job_id, attempt=attempt)
