"""What the decision core is handed: the diagnoser, an external attribution service, and the
metrics it reports to.

Part of :mod:`medic.ports` (see its docstring); import the ports from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from medic.domain.cluster import Job
from medic.domain.diagnosis import Detection, Verdict
from medic.domain.ids import ClusterName
from medic.domain.logs import LogLine

__all__ = ["AttributionProvider", "Diagnoser", "Metrics"]


class Diagnoser(Protocol):
    """Turns log lines into detections. The diagnosis engine (issue 3) replaces the first one.

    Pure: no I/O, no clock reads. Never raises on any input text.
    """

    def scan(self, lines: Sequence[LogLine]) -> list[Detection]:
        """Detections for the lines that match a signature, in input order.

        ``attempt`` on each detection is -1: the caller knows the job's current attempt.
        """
        ...


class AttributionProvider(Protocol):
    """An external attribution service (HTTP) whose verdict is recorded beside medic's own.

    Advisory only: medic's decision never waits on it for longer than its timeout and never
    depends on its answer. Raises ``TransientError`` when the service cannot be reached.
    """

    @property
    def name(self) -> str: ...

    def attribute(self, job: Job, attempt: int, detections: Sequence[Detection]) -> Verdict: ...


class Metrics(Protocol):
    """Where the loop reports counters and latencies (Prometheus in production)."""

    def detection(self, cluster: ClusterName, signature_id: str) -> None: ...

    def detection_latency(self, seconds: float) -> None:
        """Seconds from a line being emitted to its detection being stored."""
        ...

    def action_latency(self, seconds: float) -> None:
        """Seconds from the deciding detection being stored to the scheduler action done."""
        ...

    def advice(self, cluster: ClusterName, action: str) -> None: ...

    def loop_pass(self, seconds: float) -> None:
        """Duration of one control-loop pass."""
        ...

    def lease_renewal(self, lease: str, seconds: float, held: bool) -> None:
        """One take-or-renew of a lease: its latency, and whether this process holds it after."""
        ...

    def lease_failover(self, lease: str) -> None:
        """This process took a lease over from another holder whose lease ran out."""
        ...

    def loop_error(self, stage: str) -> None:
        """A pass stage (observe, evaluate, act) failed."""
        ...

    def alert_fired(self, cluster: ClusterName, key: str, mapped: bool) -> None:
        """A node alert started firing (``mapped``: a repair action exists for it)."""
        ...

    def repair_state(self, cluster: ClusterName, action: str, state: str) -> None:
        """A repair entered ``state``, whoever moved it (the engine, a person, a detector)."""
        ...

    def recommendation_latency(self, seconds: float) -> None:
        """Seconds from an alert firing to the repair recommended for it."""
        ...
