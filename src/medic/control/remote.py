"""The remote controller process (``medic controller``): polls the advice feed of a medic API,
reconciles act-mode advice with :class:`~medic.control.executor.Controller` on this cluster's
scheduler while it holds the cluster's controller lease (taken through the API, so two
controllers for one cluster take turns, never act together), and runs the fail-open watchdog
on every poll, lease or not.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Protocol

from medic.config.settings import ControllerSettings
from medic.control.executor import Controller
from medic.control.journal import Journal
from medic.control.leases import LeaseKeeper
from medic.control.watchdog import Watchdog
from medic.domain.advice import Advice, AdviceAction
from medic.domain.cluster import Mode
from medic.domain.ids import AdviceId, ClusterName
from medic.domain.leases import controller_lease
from medic.errors import MedicError
from medic.ports import Clock, ControllerLedger, LeaseStore, Scheduler

__all__ = ["AdvisorApi", "run_controller"]

logger = logging.getLogger(__name__)


class AdvisorApi(ControllerLedger, LeaseStore, Protocol):
    """What ``medic controller`` needs from the control plane: the ledger, the advice feed and
    the cluster's controller lease."""

    def list_active_advice(self, cluster: ClusterName) -> list[Advice]:
        """The cluster's advice that still has to be reconciled."""
        ...

    def get_advice(self, advice_id: AdviceId) -> Advice | None: ...


def run_controller(
    *,
    scheduler: Scheduler,
    ledger: AdvisorApi,
    clock: Clock,
    stop: threading.Event,
    settings: ControllerSettings,
    mode: Mode,
    journal_path: Path,
    once: bool = False,
) -> None:
    """The remote controller process: every ``settings.poll_seconds``, deliver what the watchdog
    queued, reconcile the cluster's act-mode advice (``mode`` act) or log it (observe), then run
    the watchdog.

    Returns once ``stop`` is set, after the advice in flight (never between two steps of one), or
    after a single pass with ``once``. A failed pass is logged and retried at the next poll; with
    ``once`` its error escapes to the caller.
    """
    with Journal.open(journal_path) as journal:
        watchdog = Watchdog(
            scheduler=scheduler,
            api=ledger,
            journal=journal,
            clock=clock,
            timeout_seconds=settings.watchdog_timeout_seconds,
            mode=mode,
        )
        lease = LeaseKeeper(
            ledger,
            controller_lease(scheduler.cluster),
            clock=clock,
            ttl_seconds=settings.lease_seconds,
        )
        controller = Controller(
            scheduler=scheduler,
            ledger=ledger,
            clock=clock,
            before_hold=watchdog.record_hold,
            lease=lease,
        )
        remote = _RemoteController(
            scheduler.cluster, ledger, controller, watchdog, mode, stop, lease
        )
        while True:
            try:
                remote.run_pass()
            except Exception:
                if once:
                    raise
                # Never exit on a bad pass: a held job still needs the watchdog's next poll.
                logger.exception("controller pass failed")
            if once or stop.is_set():
                lease.release()
                return
            stop.wait(settings.poll_seconds)


class _RemoteController:
    """One pass of :func:`run_controller`, with what it remembers between passes."""

    def __init__(
        self,
        cluster: ClusterName,
        ledger: AdvisorApi,
        controller: Controller,
        watchdog: Watchdog,
        mode: Mode,
        stop: threading.Event,
        lease: LeaseKeeper,
    ) -> None:
        self._cluster = cluster
        self._ledger = ledger
        self._controller = controller
        self._watchdog = watchdog
        self._mode = mode
        self._stop = stop
        self._announced: set[tuple[AdviceId, int]] = set()
        self._lease = lease
        """The cluster's controller lease: advice is carried out only while it is held."""

    def run_pass(self) -> None:
        self._watchdog.flush()
        try:
            feed = self._ledger.list_active_advice(self._cluster)
        except MedicError as exc:
            logger.warning("cannot read the advice feed, will retry: %s", exc)
            feed = []
        # The watchdog runs whether or not this controller holds the lease: the jobs it held
        # must be released even when another controller (or nobody) acts now.
        acting = self._mode is Mode.OBSERVE or self._lease.hold() is not None
        for advice in feed if acting else []:
            if self._stop.is_set():
                break
            if self._wants(advice):
                self._reconcile(advice)
        self._watchdog.check()
        self._watchdog.flush()

    def _wants(self, advice: Advice) -> bool:
        if advice.mode is not Mode.ACT:
            return False
        if advice.action not in (AdviceAction.REQUEUE, AdviceAction.STOP):
            return False  # EXCLUDE_NEXT waits for the job's next restart; NONE needs nothing
        # The watchdog released this generation's job: its plan no longer matches the scheduler.
        return not self._watchdog.is_released(advice)

    def _reconcile(self, advice: Advice) -> None:
        if self._mode is Mode.OBSERVE:
            if (advice.id, advice.generation) not in self._announced:
                self._announced.add((advice.id, advice.generation))
                logger.warning(
                    "observe mode: would %s job %s (advice %s g%s, exclude %s)",
                    advice.action.value,
                    advice.job_id,
                    advice.id,
                    advice.generation,
                    sorted(advice.exclude_nodes),
                )
            return
        try:
            outcome = self._controller.reconcile(advice)
        except MedicError as exc:
            logger.warning("job %s: reconcile failed, will retry: %s", advice.job_id, exc)
            return
        logger.info(
            "job %s: advice %s %s (%s)", advice.job_id, advice.id, outcome.status, outcome.reason
        )
