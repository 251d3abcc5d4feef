"""Supervised background thread for the control loop, with a graceful stop.

``medic serve`` and ``medic demo`` run the loop next to the HTTP API or the live view; the thread
logs an unexpected exit the moment it happens, and ``stop()`` waits (bounded) for the pass in
flight to finish so no action is left half-recorded.
"""

from __future__ import annotations

import logging
import threading

from medic.control.loop import ControlLoop

__all__ = ["LoopThread"]

logger = logging.getLogger(__name__)


class LoopThread:
    def __init__(self, loop: ControlLoop) -> None:
        self._loop = loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="medic-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the loop to stop after its current pass and wait up to ``timeout`` seconds."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.error("control loop did not stop within %.0f s", timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._loop.run_forever(self._stop)
        except BaseException:
            logger.exception("control loop thread died")
            raise
        finally:
            if not self._stop.is_set():
                logger.error("control loop thread exited without being asked to stop")
