"""The agent's loop: every check each ``interval``, the kernel log every ``kernel_poll`` seconds,
and the sender after each, until ``stop`` is set.

Nothing a check, the kernel follower or the sender raises stops the loop: checks report
``error`` (:func:`~medic.agent.checks.run_check`), the follower and the sender are logged and
tried again on the next pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from medic.agent.checks import Check, CheckResult, run_check
from medic.agent.kernel import KernelClassifier, LineSource
from medic.agent.sender import AlertSender

__all__ = ["Agent"]

logger = logging.getLogger(__name__)


class Agent:
    """One node's checks, kernel log and sender (each optional but the checks)."""

    def __init__(
        self,
        checks: Sequence[Check],
        *,
        kernel: LineSource | None = None,
        classifier: KernelClassifier | None = None,
        sender: AlertSender | None = None,
        interval: float = 30.0,
        kernel_poll: float = 1.0,
        on_results: Callable[[list[CheckResult]], None] | None = None,
    ) -> None:
        if (kernel is None) != (classifier is None):
            raise ValueError("a kernel log source needs a classifier, and the other way round")
        self.checks = tuple(checks)
        self.kernel = kernel
        self.classifier = classifier
        self.sender = sender
        self.interval = interval
        self.kernel_poll = kernel_poll
        self.on_results = on_results
        self.kernel_errors = 0

    def run_checks(self) -> list[CheckResult]:
        """Every check once; never raises."""
        return [result for check in self.checks for result in run_check(check)]

    def poll_kernel(self) -> list[CheckResult]:
        """Findings from the kernel lines that arrived since the last poll; never raises."""
        if self.kernel is None or self.classifier is None:
            return []
        try:
            lines = self.kernel.read_new()
            return self.classifier.classify(lines) if lines else []
        except Exception as exc:
            self.kernel_errors += 1
            if self.kernel_errors == 1 or self.kernel_errors % 100 == 0:
                logger.warning("kernel log unreadable (%d times): %r", self.kernel_errors, exc)
            return []

    def _report(self, results: list[CheckResult], *, always: bool = False) -> None:
        if self.on_results is not None and (results or always):
            self.on_results(results)
        if self.sender is None:
            return
        try:
            self.sender.process(results)
        except Exception:
            logger.exception("sending alerts failed; they are retried on the next pass")

    def once(self) -> list[CheckResult]:
        """Every check once, reported (and sent) once."""
        results = self.run_checks()
        self._report(results, always=True)
        return results

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set (a signal handler sets it)."""
        next_checks = time.monotonic()
        while not stop.is_set():
            if time.monotonic() >= next_checks:
                self._report(self.run_checks(), always=True)
                next_checks = time.monotonic() + self.interval
            events = self.poll_kernel()
            if events:
                self._report(events)
            wait = max(0.0, next_checks - time.monotonic())
            if self.kernel is not None:
                wait = min(wait, self.kernel_poll)
            stop.wait(wait)

    def close(self) -> None:
        for check in self.checks:
            close = getattr(check, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:
                    logger.debug("closing %s: %r", check.name, exc)
        if self.kernel is not None:
            self.kernel.close()
        if self.sender is not None:
            self.sender.close()
