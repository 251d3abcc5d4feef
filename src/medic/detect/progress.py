"""Per-attempt progress tracking: steps, checkpoints, and the hang and straggler findings.

A :class:`ProgressTracker` follows one attempt of one job. The loop feeds it the attempt's
progress detections (iteration, checkpoint and ``[timing]`` lines) and asks it, at its own pace,
for the :class:`~medic.domain.attempts.Progress` to store and for derived findings: a hang
(``medic.hang.no_progress``), a slow job (``medic.straggler.slow_job``) and a slow node
(``medic.straggler.slow_node``). Each finding is reported at most once per attempt.

Only completed markers count as progress (a newer iteration or a newer saved checkpoint); a loaded
checkpoint is the resume point, not progress. Times are the detections' times and the ``now``
passed in: no clock reads, no I/O. Malformed fields are ignored, never raised on. Memory is bounded
whatever the length of the attempt.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from datetime import datetime, timedelta

from medic.config.settings import DetectSettings
from medic.detect.hang import hang_detection, hang_threshold, percentile
from medic.detect.signatures import SLOW_JOB_SIGNATURE_ID, SLOW_NODE_SIGNATURE_ID
from medic.detect.straggler import ThroughputWatch, find_slow_node
from medic.domain.attempts import Progress
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import JobId, NodeName, SignatureId

__all__ = ["ProgressTracker"]

_INTERVALS_KEPT = 256
"""Recent progress intervals kept for the p95 (the rhythm may change over a long run)."""
_NODE_SAMPLES_KEPT = 20
"""Recent compute-time samples kept per node (the window of its median)."""


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _float(value: str | None) -> float | None:
    """A finite float, or None (absent, malformed, inf or nan are not measurements). Thousands
    separators are dropped (torchtitan prints ``tps: 6,253``)."""
    try:
        number = float(value.replace(",", "")) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


class ProgressTracker:
    """Progress and derived findings for one attempt of one job."""

    def __init__(self, job_id: JobId | None = None, attempt: int = -1) -> None:
        """``job_id`` and ``attempt`` stamp the derived findings (-1: the caller stamps them)."""
        self.job_id = job_id
        self.attempt = attempt
        self._first_step: int | None = None
        self._last_step: int | None = None
        self._saved: int | None = None
        self._loaded: int | None = None
        self._last_progress_at: datetime | None = None
        self._intervals: deque[float] = deque(maxlen=_INTERVALS_KEPT)
        self._throughput = ThroughputWatch()
        self._metric: str | None = None
        self._rate_from: tuple[datetime, int] | None = None
        self._compute: dict[tuple[NodeName, int], deque[float]] = {}
        """Recent compute times per (node, rank); rank -1 where the line names no rank."""
        self._node_slow_since: dict[tuple[NodeName, int], datetime] = {}
        self._reported: set[str] = set()

    # --- input ---------------------------------------------------------------------------------
    def observe(self, detection: Detection) -> None:
        """Take one detection into account; anything but a progress detection is ignored."""
        if detection.role is not Role.PROGRESS:
            return
        fields = detection.fields
        step = _int(fields.get("step"))
        checkpoint = fields.get("checkpoint")
        if checkpoint == "loaded":
            if step is not None:
                self._loaded = step
        elif checkpoint == "saved":
            if step is not None and (self._saved is None or step > self._saved):
                self._saved = step
                self._advance(detection.time)
        elif "compute_ms" in fields:
            # The sim's per-node [timing] line: compute time only (its iteration line is apart).
            self._observe_compute(detection, _float(fields.get("compute_ms")))
        else:
            compute_s = _float(fields.get("compute_s"))
            samples = _float(fields.get("samples_per_s"))
            if compute_s is not None:
                self._observe_compute(detection, 1000.0 * compute_s)
            elif samples is not None and samples > 0.0:
                # A worker's rate is its node's speed: the time per 1000 samples compares nodes.
                self._observe_compute(detection, 1_000_000.0 / samples)
            if step is not None:
                self._observe_iteration(detection, step)
            else:
                # A rate without a run-wide step (flashy prints a per-epoch index, tqdm-loggable
                # a rounded count, MXNet a per-epoch batch): throughput only.
                self._observe_rate(detection.time, fields, samples)

    def _observe_rate(
        self, time: datetime, fields: Mapping[str, str], samples: float | None
    ) -> None:
        metric, value = "samples", samples
        if value is None:
            metric, value = "iter_ms", _float(fields.get("it_per_s"))
            if value is None:
                seconds = _float(fields.get("iter_s"))
                iter_ms = _float(fields.get("iter_ms"))
                seconds = iter_ms / 1000.0 if seconds is None and iter_ms is not None else seconds
                value = 1.0 / seconds if seconds is not None and seconds > 0.0 else None
        if value is not None and value > 0.0 and self._metric in (None, metric):
            self._metric = metric
            self._throughput.add(time, value)

    def _observe_iteration(self, detection: Detection, step: int) -> None:
        if self._first_step is None or step < self._first_step:
            self._first_step = step
        if self._last_step is None or step > self._last_step:
            self._last_step = step
            self._advance(detection.time)
        tokens = _float(detection.fields.get("tokens_per_s"))
        iter_ms = _float(detection.fields.get("iter_ms"))
        rate = _float(detection.fields.get("it_per_s"))
        seconds = _float(detection.fields.get("iter_s"))
        if iter_ms is None and rate is not None and rate > 0.0:
            iter_ms = 1000.0 / rate
        elif iter_ms is None and seconds is not None:
            iter_ms = 1000.0 * seconds
        if self._metric is None:
            self._metric = (
                "tokens" if tokens is not None else "iter_ms" if iter_ms is not None else "steps"
            )
        # One metric per attempt: tokens/s when the first iteration line had it, else 1/iter time,
        # else the step rate between lines (a framework that prints only its step number).
        if self._metric == "tokens" and tokens is not None:
            self._throughput.add(detection.time, tokens)
        elif self._metric == "iter_ms" and iter_ms is not None and iter_ms > 0.0:
            self._throughput.add(detection.time, 1000.0 / iter_ms)
        elif self._metric == "steps":
            self._observe_step_rate(detection.time, step)

    def _observe_step_rate(self, time: datetime, step: int) -> None:
        previous = self._rate_from
        if previous is None or step <= previous[1] or time < previous[0]:
            self._rate_from = (time, step) if previous is None or step > previous[1] else previous
            return
        seconds = (time - previous[0]).total_seconds()
        if seconds <= 0.0:
            return  # read in the same pass: wait for a line with a later time
        self._throughput.add(time, (step - previous[1]) / seconds)
        self._rate_from = (time, step)

    def _observe_compute(self, detection: Detection, compute_ms: float | None) -> None:
        if detection.node is None or compute_ms is None or compute_ms <= 0.0:
            return
        # Per rank where the line says which: one slow GPU of eight shows in its rank's compute
        # time, and would vanish in a median of the node's eight ranks.
        rank = _int(detection.fields.get("rank"))
        key = (detection.node, -1 if rank is None else rank)
        samples = self._compute.setdefault(key, deque(maxlen=_NODE_SAMPLES_KEPT))
        samples.append(compute_ms)

    def _advance(self, time: datetime) -> None:
        last = self._last_progress_at
        if last is None:
            self._last_progress_at = time
        elif time > last:
            # Lines read in the same pass share a time; only a later observation is an interval.
            self._intervals.append((time - last).total_seconds())
            self._last_progress_at = time

    def resume(self, stored: Progress) -> None:
        """Start from what a previous medic stored for this attempt: its steps, checkpoints and
        last progress time. A job that went silent just before medic restarted prints nothing
        more, and must still be found hanging (from the stored time, with the cautious threshold
        of an attempt with no measured rhythm)."""
        self._first_step = stored.first_step
        self._last_step = stored.last_step
        self._saved = stored.last_checkpoint_step
        self._loaded = stored.loaded_checkpoint_step
        self._last_progress_at = stored.last_progress_at

    # --- output --------------------------------------------------------------------------------
    def progress(self) -> Progress:
        return Progress(
            first_step=self._first_step,
            last_step=self._last_step,
            last_checkpoint_step=self._saved,
            loaded_checkpoint_step=self._loaded,
            last_progress_at=self._last_progress_at,
        )

    def next_check_at(self, settings: DetectSettings) -> datetime | None:
        """The earliest time :meth:`check_hang` or :meth:`check_straggler` could report
        something without a new progress line (None: only a new line can change their answer).
        The loop skips a quiet job until then."""
        due: list[datetime] = []
        if "hang" not in self._reported and self._last_progress_at is not None:
            threshold = hang_threshold(self._intervals, settings)
            due.append(self._last_progress_at + timedelta(seconds=threshold))
        if "slow_node" not in self._reported and self._node_slow_since:
            since = min(self._node_slow_since.values())
            due.append(since + timedelta(seconds=settings.straggler_seconds))
        return min(due) if due else None

    def check_hang(self, now: datetime, settings: DetectSettings) -> Detection | None:
        """A hang finding when the attempt has been silent for longer than its threshold.

        Only after the attempt's first progress line (see :mod:`medic.detect.hang`); call it only
        while the job runs (a completed job is silent too).
        """
        if "hang" in self._reported or self._last_progress_at is None:
            return None
        threshold = hang_threshold(self._intervals, settings)
        silence = (now - self._last_progress_at).total_seconds()
        if silence <= threshold:
            return None
        self._reported.add("hang")
        return hang_detection(
            job_id=self.job_id,
            attempt=self.attempt,
            now=now,
            silence=silence,
            threshold=threshold,
            p95_interval=percentile(self._intervals, 95.0) if self._intervals else 0.0,
            last_step=self._last_step,
        )

    def check_straggler(
        self, now: datetime, settings: DetectSettings, *, slow_samples: int | None = None
    ) -> Detection | None:
        """A slow-node finding, else a slow-job finding, each at most once per attempt.

        Both need the condition to hold for ``straggler_seconds``. When both hold, the slow node
        comes first; call again for the other. ``slow_samples`` (a post-mortem): a job slow for
        that many progress samples in a row counts too, however short they were, and a slow node
        counts by the medians of what was read (a post-mortem reads a log that ends where it
        ends: a slowdown that lasted until then is the finding, and no later line can show it
        was a blip).
        """
        if "slow_node" not in self._reported:
            found = self._check_slow_node(now, settings, persist=slow_samples is None)
            if found is not None:
                self._reported.add("slow_node")
                return found
        if "slow_job" in self._reported:
            return None
        slow = self._throughput.slow_seconds(settings.straggler_drop)
        if slow is None or (
            slow < settings.straggler_seconds
            and (slow_samples is None or self._throughput.slow_samples < slow_samples)
        ):
            return None
        self._reported.add("slow_job")
        baseline = self._throughput.baseline or 0.0
        current = self._throughput.current or 0.0
        unit = {"tokens": "tokens/s", "samples": "samples/s"}.get(
            self._metric or "", "iterations/s"
        )
        return self._finding(
            SLOW_JOB_SIGNATURE_ID,
            FaultDomain.SYSTEM_SOFTWARE,
            now,
            None,
            f"job throughput {current:.3g} {unit} is below {1.0 - settings.straggler_drop:.0%}"
            f" of its baseline {baseline:.3g} for {slow:.0f} s"
            f" ({self._throughput.slow_samples} samples)",
            {
                "baseline": f"{baseline:.6g}",
                "current": f"{current:.6g}",
                "unit": unit,
                "slow_s": f"{slow:.3f}",
                "slow_samples": str(self._throughput.slow_samples),
            },
        )

    def _check_slow_node(
        self, now: datetime, settings: DetectSettings, *, persist: bool
    ) -> Detection | None:
        """``persist``: the node must stay the slowest for ``straggler_seconds`` of ``now``
        (live); a post-mortem has only the medians of the samples it read."""
        slow = find_slow_node(self._compute, settings.straggler_drop)
        if slow is None:
            self._node_slow_since = {}
            return None
        # Only the currently slowest node keeps its clock running; a node that recovered (or is
        # no longer the worst) starts again from zero.
        since = self._node_slow_since.get(slow.key, now)
        self._node_slow_since = {slow.key: since}
        if persist and (now - since).total_seconds() < settings.straggler_seconds:
            return None
        node, rank = slow.key
        what = f"node {node}" if rank < 0 else f"rank {rank} on node {node}"
        fields = {} if rank < 0 else {"rank": str(rank)}
        return self._finding(
            SLOW_NODE_SIGNATURE_ID,
            FaultDomain.HARDWARE,
            now,
            node,
            f"{what} computes in {slow.node_ms:.1f} ms, {slow.ratio:.2f}x its peers'"
            f" median {slow.peers_ms:.1f} ms",
            {
                **fields,
                "node_compute_ms": f"{slow.node_ms:.3f}",
                "peers_compute_ms": f"{slow.peers_ms:.3f}",
                "ratio": f"{slow.ratio:.3f}",
            },
        )

    def _finding(
        self,
        signature_id: SignatureId,
        domain: FaultDomain,
        now: datetime,
        node: NodeName | None,
        text: str,
        fields: dict[str, str],
    ) -> Detection:
        # Root (the cause of the slowness) with action none: a straggler is not fatal, so it never
        # triggers a requeue by itself (is_fatal is False); the policy excludes the node instead.
        return Detection(
            job_id=self.job_id,
            attempt=self.attempt,
            signature_id=signature_id,
            domain=domain,
            role=Role.ROOT,
            severity=Severity.WARNING,
            action=JobAction.NONE,
            time=now,
            node=node,
            implicates_node=node is not None,
            text=text,
            fields=fields,
        )
