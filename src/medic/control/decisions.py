"""Deciding one job attempt: the verdict from its evidence, then the advice the policy gives.

:class:`Decisions` is the last step of a job's evaluation (:mod:`medic.control.evaluation`): once
the attempt's evidence has settled it asks ``attribute`` for a verdict and ``policy`` for advice,
adds the nodes a requeue must avoid (a straggler found earlier, node repair's exclusions), and
stores and audits both. An attempt decided before (by an earlier pass, or a medic before a
restart) is never decided again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from medic.attribute.blame import attribute
from medic.config.settings import PolicySettings
from medic.control import records
from medic.control.external import SecondOpinion
from medic.control.stores import EvaluationStore
from medic.control.watch import JobWatch, of_attempt
from medic.domain.advice import AdviceAction, AdviceRequest
from medic.domain.cluster import Job
from medic.domain.ids import ClusterName, NodeName
from medic.policy.recovery import decide
from medic.ports import Metrics

__all__ = ["Decisions"]


class Decisions:
    """Verdicts and advice of one cluster's job attempts."""

    def __init__(
        self,
        *,
        cluster: ClusterName,
        store: EvaluationStore,
        metrics: Metrics,
        policy: PolicySettings,
        counts: defaultdict[str, int],
        placement_exclusions: Callable[[], frozenset[NodeName]] | None,
        second_opinion: SecondOpinion | None,
    ) -> None:
        self._cluster = cluster
        self._store = store
        self._metrics = metrics
        self._policy = policy
        self._counts = counts
        self._placement_exclusions = placement_exclusions
        self._second_opinion = second_opinion

    def decide(self, job: Job, watch: JobWatch, now: datetime) -> None:
        """Decide the watch's attempt, once: verdict, then advice (none when the policy says
        nothing should happen); each stored and audited."""
        existing = self._store.advice_for_job(self._cluster, job.id)
        if (
            existing is not None
            and existing.attempt >= watch.attempt
            and (existing.action is not AdviceAction.EXCLUDE_NEXT or watch.first_fatal_at is None)
        ):
            # Decided before (by an earlier pass or a medic before a restart): no repeat. A
            # straggler's exclusion is not the attempt's last word: a fatal fault after it is
            # decided on its own evidence.
            if existing.action is AdviceAction.EXCLUDE_NEXT:
                watch.exclusion_advised = True
            else:
                watch.decided = True
            return
        progress = [of_attempt(d, watch.attempt) for d in watch.recent_progress]
        evidence = [*progress, *watch.evidence]
        deterministic = self._policy.deterministic_errors
        verdict = attribute(job, watch.attempt, evidence, now=now, deterministic=deterministic)
        attempts = self._store.list_attempts(self._cluster, job.id)
        request = decide(
            verdict,
            job,
            attempts,
            mode=watch.mode,
            settings=self._policy,
            max_attempts_without_progress=watch.max_attempts_without_progress,
        )
        if request.action is AdviceAction.NONE:
            return
        if existing is not None and existing.action is AdviceAction.EXCLUDE_NEXT:
            # A straggler found earlier in this job joins the exclusions of its next restart.
            request = _with_exclusions(request, existing.exclude_nodes)
        if request.action is AdviceAction.REQUEUE and self._placement_exclusions is not None:
            # Never back onto a node under repair, out of service or with a critical alert.
            request = _with_exclusions(request, self._placement_exclusions())
        self._store.add_verdict(self._cluster, verdict)
        self._counts["verdicts"] += 1
        self._store.append_audit(records.verdict_event(self._cluster, verdict, watch.mode, now))
        advice = self._store.publish_advice(request, now)
        self._metrics.advice(self._cluster, advice.action.value)
        self._store.append_audit(records.advice_event(advice, verdict, now))
        if self._second_opinion is not None:
            self._second_opinion.ask(job, verdict, evidence)
        watch.decided = request.action is not AdviceAction.EXCLUDE_NEXT
        watch.exclusion_advised = not watch.decided


def _with_exclusions(request: AdviceRequest, extra: frozenset[NodeName]) -> AdviceRequest:
    return replace(request, exclude_nodes=request.exclude_nodes | extra)
