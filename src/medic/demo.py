"""The demo driver: a simulated cluster in act mode, a fault every few seconds, and the figures.

``medic demo`` shows it live; ``medic demo --json`` and ``benchmarks/bench_loop.py`` read the same
figures. Every figure is measured from the store (the audit trail) against the injector's ground
truth, never from the loop's own bookkeeping: fault injected -> first detection or verdict stored
for that job -> first scheduler action done.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from medic.domain.audit import AuditEvent, AuditKind
from medic.domain.cluster import Job, JobSpec, JobState
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import JobId
from medic.errors import PermanentError
from medic.services import Services

__all__ = ["DemoDriver", "FaultOutcome", "Summary", "percentile"]

_DETECTED = (AuditKind.DETECTION, AuditKind.VERDICT)


@dataclass(slots=True)
class FaultOutcome:
    """One injected fault and what medic did about it (filled in as the audit trail grows)."""

    fault: FaultRecord
    attempt: int
    detected_at: datetime | None = None
    signature: str | None = None
    verdict: str | None = None
    advice: str | None = None
    acted_at: datetime | None = None
    action: str | None = None
    outcome: str = "open"
    """open, recovered (running again on a new attempt), stopped (medic stopped the job) or
    flagged (a straggler node to exclude at the next restart)."""

    @property
    def detection_latency(self) -> float | None:
        if self.detected_at is None:
            return None
        return max(0.0, (self.detected_at - self.fault.time).total_seconds())

    @property
    def action_latency(self) -> float | None:
        if self.acted_at is None or self.detected_at is None:
            return None
        return max(0.0, (self.acted_at - self.detected_at).total_seconds())


@dataclass(frozen=True, slots=True)
class Summary:
    faults_injected: int
    detected: int
    recovered: int
    stopped: int
    detection_latency_p50_s: float | None
    action_latency_p50_s: float | None
    detection_latency_p99_s: float | None = None
    action_latency_p99_s: float | None = None
    per_kind: dict[str, dict[str, float | int | None]] = field(default_factory=dict)

    def headline(self) -> dict[str, float | int | None]:
        """The figures ``medic demo --json`` prints."""
        return {
            "faults_injected": self.faults_injected,
            "detected": self.detected,
            "recovered": self.recovered,
            "stopped": self.stopped,
            "detection_latency_p50_s": self.detection_latency_p50_s,
            "action_latency_p50_s": self.action_latency_p50_s,
        }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 4)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return round(cuts[max(0, min(98, round(q) - 1))], 4)


class DemoDriver:
    """Keeps ``jobs`` training jobs running and injects one fault every ``fault_every`` seconds."""

    def __init__(
        self,
        services: Services,
        *,
        fault_every: float,
        kinds: Sequence[FaultKind] = tuple(FaultKind),
        seed: int = 1,
        max_faults: int | None = None,
    ) -> None:
        if services.injector is None or services.workload is None:
            raise PermanentError("the demo needs a scheduler that can inject faults (sim)")
        self._services = services
        self._injector = services.injector
        self._workload = services.workload
        self._fault_every = fault_every
        self._max_faults = max_faults
        self._kinds = list(kinds)
        self._rng = random.Random(seed)
        self._next_fault: datetime | None = None
        self._submitted = 0
        self.outcomes: list[FaultOutcome] = []

    # ------------------------------------------------------------------ driving
    def tick(self) -> None:
        """Top up the workload and inject a fault when one is due (call a few times a second)."""
        now = self._services.clock.now()
        jobs = list(self._services.scheduler.list_jobs())
        self._top_up(jobs)
        if self._next_fault is None:
            self._next_fault = now
        if now >= self._next_fault and (
            self._max_faults is None or len(self.outcomes) < self._max_faults
        ):
            self._inject(jobs)
            self._next_fault = now + timedelta(seconds=self._fault_every)
        self._resolve(jobs)

    def _top_up(self, jobs: Sequence[Job]) -> None:
        alive = [j for j in jobs if not j.state.is_terminal and j.state is not JobState.COMPLETED]
        settings = self._services.settings.sim
        for _ in range(settings.jobs - len(alive)):
            self._submitted += 1
            self._workload.submit(
                JobSpec.numbered(
                    self._submitted,
                    num_nodes=settings.nodes_per_job,
                    partitions=settings.partitions,
                )
            )

    def _inject(self, jobs: Sequence[Job]) -> None:
        busy = {o.fault.job_id for o in self.outcomes if o.outcome == "open"}
        candidates = [
            j for j in jobs if j.state is JobState.RUNNING and j.id not in busy and j.nodes
        ]
        if not candidates:
            return
        job = self._rng.choice(sorted(candidates, key=lambda j: j.id))
        kind = self._kinds[len(self.outcomes) % len(self._kinds)]
        try:
            fault = self._injector.inject(kind, job_id=job.id)
        except PermanentError:
            return  # the job ended between the snapshot and the injection
        self.outcomes.append(FaultOutcome(fault=fault, attempt=job.restart_count))

    # ------------------------------------------------------------------ measuring
    def _resolve(self, jobs: Sequence[Job]) -> None:
        by_id = {j.id: j for j in jobs}
        for o in self.outcomes:
            if o.outcome != "open":
                continue
            if o.detected_at is None or o.acted_at is None:
                self._read_audit(o)
            job = by_id.get(o.fault.job_id)
            if job is not None and job.restart_count > o.attempt and job.state is JobState.RUNNING:
                o.outcome = "recovered"
            elif o.advice == "stop" and (job is None or job.state.is_terminal):
                o.outcome = "stopped"
            elif o.advice == "exclude_next":
                o.outcome = "flagged"  # straggler: excluded at the job's next restart

    def _read_audit(self, o: FaultOutcome) -> None:
        events = self._services.store.query_audit(
            cluster=self._services.cluster,
            job_id=JobId(o.fault.job_id),
            since=o.fault.time,
            limit=500,
        )
        for e in events:
            self._take(o, e)

    @staticmethod
    def _take(o: FaultOutcome, e: AuditEvent) -> None:
        if o.detected_at is None and e.kind in _DETECTED:
            o.detected_at, o.signature = e.time, e.signature_id
        if e.kind is AuditKind.VERDICT and o.verdict is None:
            o.verdict = e.verdict
        if e.kind is AuditKind.ADVICE and o.advice is None:
            o.advice = e.action
        if (
            o.acted_at is None
            and o.detected_at is not None
            and e.kind in (AuditKind.ACTION_SUCCEEDED, AuditKind.ACTION_SKIPPED)
        ):
            o.acted_at, o.action = e.time, e.action

    def summary(self) -> Summary:
        det = [o.detection_latency for o in self.outcomes if o.detection_latency is not None]
        act = [o.action_latency for o in self.outcomes if o.action_latency is not None]
        per_kind: dict[str, dict[str, float | int | None]] = {}
        for kind in sorted({o.fault.kind for o in self.outcomes}):
            mine = [o for o in self.outcomes if o.fault.kind is kind]
            d = [o.detection_latency for o in mine if o.detection_latency is not None]
            a = [o.action_latency for o in mine if o.action_latency is not None]
            per_kind[kind.value] = {
                "faults": len(mine),
                "detected": len(d),
                "detection_p50_s": percentile(d, 50),
                "action_p50_s": percentile(a, 50),
            }
        return Summary(
            faults_injected=len(self.outcomes),
            detected=len(det),
            recovered=sum(o.outcome == "recovered" for o in self.outcomes),
            stopped=sum(o.outcome == "stopped" for o in self.outcomes),
            detection_latency_p50_s=percentile(det, 50),
            action_latency_p50_s=percentile(act, 50),
            detection_latency_p99_s=percentile(det, 99),
            action_latency_p99_s=percentile(act, 99),
            per_kind=per_kind,
        )
