"""``medic diagnose --job ID [--attempt N]``: diagnose a stored attempt again.

The store keeps, per attempt, the detections the loop found (the matched lines, with node, rank
and fields) and the verdicts it recorded. Rediagnosis runs today's attribution on the stored
detections of the attempt (the latest attempt with detections when ``--attempt`` is not given)
and shows the stored verdict beside it, so a rule change can be checked against history. An
unknown job, or an attempt with no stored evidence, exits with code 2 and one line on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from medic.attribute import attribute, recommended_node_action
from medic.config.settings import Settings
from medic.detect.catalogue import node_actions, site_catalogue
from medic.diagnose import Diagnosis, EvidenceLine
from medic.domain.diagnosis import Verdict
from medic.domain.ids import ClusterName, JobId
from medic.errors import InputError
from medic.ports.store import Evidence, Inventory

__all__ = ["StoredDiagnosis", "StoredEvidence", "diagnose_stored"]


@dataclass(frozen=True, slots=True)
class StoredDiagnosis:
    diagnosis: Diagnosis
    """Today's verdict on the stored evidence."""
    recorded: Verdict | None
    """The verdict the loop recorded for the attempt, if any."""


class StoredEvidence(Inventory, Evidence, Protocol):
    """What rediagnosis reads: the job, its attempts, their detections and verdicts."""


def diagnose_stored(
    store: StoredEvidence,
    settings: Settings,
    job_id: str,
    *,
    attempt: int | None = None,
    cluster: str | None = None,
) -> StoredDiagnosis:
    """Rediagnose ``job_id``'s attempt from the store (see the module docstring).

    Raises ``InputError`` for an unknown job, an unknown attempt or one without detections.
    """
    name = ClusterName(cluster or settings.scheduler.cluster)
    job = store.get_job(name, JobId(job_id))
    if job is None:
        candidates = [j for j in store.list_jobs() if j.id == job_id]
        if cluster is None and len(candidates) == 1:
            job, name = candidates[0], candidates[0].cluster
        else:
            raise InputError(f"job {job_id}", f"no such job in cluster {name}")
    stored = store.list_detections(name, job.id)
    numbers = {d.attempt for d in stored} | {a.number for a in store.list_attempts(name, job.id)}
    known = ", ".join(str(n) for n in sorted(numbers)) or "none"
    number = attempt if attempt is not None else max((d.attempt for d in stored), default=None)
    if number is None:
        raise InputError(f"job {job_id}", "no stored evidence for any attempt")
    if number not in numbers:
        raise InputError(f"job {job_id}", f"no attempt {number} (attempts: {known})")
    detections = [d for d in stored if d.attempt == number]
    if not detections:
        raise InputError(f"job {job_id} attempt {number}", "no detections stored for it")
    now = max(d.last_seen or d.time for d in detections)
    verdict = attribute(
        job, number, detections, now=now, deterministic=settings.policy.deterministic_errors
    )
    recorded = [v for v in store.list_verdicts(name, job.id) if v.attempt == number]
    lines = tuple(
        EvidenceLine(d.node, "store", 0, d.signature_id, d.text) for d in verdict.evidence
    )
    diagnosis = Diagnosis(
        path=f"job {job.id} attempt {number} (cluster {name})",
        verdict=verdict,
        node_action=recommended_node_action(
            verdict, node_actions(site_catalogue(settings.detect.extra_signature_files))
        ),
        evidence=lines,
        nodes=job.nodes,
        files=("store",),
        lines=sum(d.count for d in detections),
        detections=len(detections),
    )
    return StoredDiagnosis(diagnosis, recorded[-1] if recorded else None)
