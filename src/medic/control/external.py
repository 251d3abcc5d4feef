"""Second opinions: an external attribution service's verdict, recorded beside medic's own.

Advisory only. The call runs on a worker thread after medic has published its advice, so it never
delays a decision or a scheduler action; its answer (or its failure) becomes one
``external-verdict`` audit event on the job, with whether it agrees with medic.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from medic.control import records
from medic.domain.audit import AuditKind
from medic.domain.cluster import Job
from medic.domain.diagnosis import Detection, Verdict
from medic.errors import MedicError, is_retryable
from medic.ports import AttributionProvider, AuditLog, Clock

__all__ = ["SecondOpinion"]

logger = logging.getLogger(__name__)


class SecondOpinion:
    """Asks ``provider`` about each verdict medic makes, in the background."""

    def __init__(self, provider: AttributionProvider, *, audit: AuditLog, clock: Clock) -> None:
        self._provider = provider
        self._audit = audit
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="medic-attribution")

    def ask(self, job: Job, verdict: Verdict, evidence: Sequence[Detection]) -> None:
        self._pool.submit(self._ask, job, verdict, tuple(evidence))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _ask(self, job: Job, verdict: Verdict, evidence: tuple[Detection, ...]) -> None:
        payload: dict[str, object] = {"provider": self._provider.name, "attempt": verdict.attempt}
        try:
            theirs = self._provider.attribute(job, verdict.attempt, evidence)
        except MedicError as exc:
            payload |= {"error": str(exc), "retryable": is_retryable(exc)}
            domain = action = None
        else:
            payload |= {
                "implicated_nodes": sorted(theirs.implicated_nodes),
                "confidence": theirs.confidence,
                "summary": theirs.summary,
                "agrees": theirs.domain is verdict.domain
                and theirs.action is verdict.action
                and theirs.implicated_nodes == verdict.implicated_nodes,
            }
            domain, action = theirs.domain.value, theirs.action.value
        try:
            self._audit.append_audit(
                records.job_event(
                    job.cluster,
                    job.id,
                    AuditKind.EXTERNAL_VERDICT,
                    self._clock.now(),
                    payload=payload,
                    verdict=domain,
                    action=action,
                )
            )
        except Exception:  # a worker thread: log, never lose the loop over a second opinion
            logger.exception("job %s: cannot record the external verdict", job.id)
