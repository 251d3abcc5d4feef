"""The cluster side: the clock, the scheduler, log sources, the machines below the scheduler,
and the simulator's fault injector and workload.

Part of :mod:`medic.ports` (see its docstring); import the ports from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from medic.domain.cluster import Job, JobSpec, Node
from medic.domain.faults import FaultKind, FaultRecord
from medic.domain.ids import ClusterName, JobId, NodeName
from medic.domain.logs import LogLine
from medic.domain.repairs import (
    RepairAction,
)

__all__ = ["Clock", "FaultInjector", "LogSource", "NodeProvider", "Scheduler", "Workload"]


@runtime_checkable
class Clock(Protocol):
    """Source of the current time (UTC, timezone-aware). Tests inject a fake one."""

    def now(self) -> datetime: ...


class Scheduler(Protocol):
    """One cluster's workload manager (sim, Slurm; Kubernetes later).

    Mutating calls are idempotent at the level of state: holding a held job, releasing a running
    job or draining a drained node is not an error. Every method may raise ``TransientError``
    (scheduler unreachable, busy) and the mutating ones ``NotFoundError`` for an unknown id.
    """

    @property
    def cluster(self) -> ClusterName: ...

    def list_nodes(self) -> Sequence[Node]:
        """All nodes with their current state."""
        ...

    def list_jobs(self) -> Sequence[Job]:
        """Jobs medic should watch: pending, running and recently ended ones."""
        ...

    def get_job(self, job_id: JobId) -> Job:
        """Fresh state of one job. Raises ``NotFoundError`` when the scheduler forgot it."""
        ...

    def requeue_hold(self, job_id: JobId) -> None:
        """Stop the job's current attempt and put it back in the queue, held.

        The job's restart count grows by one; it will not start until :meth:`release`.
        """
        ...

    def set_admin_comment(self, job_id: JobId, text: str) -> None:
        """Replace the job's admin comment (Slurm's ``AdminComment``), where medic marks a job
        it holds for the fail-open watchdog (:mod:`medic.domain.holds`)."""
        ...

    def set_excluded_nodes(self, job_id: JobId, nodes: frozenset[NodeName]) -> None:
        """Replace the set of nodes the job must not run on (only while pending)."""
        ...

    def release(self, job_id: JobId) -> None:
        """Let a held job be scheduled again."""
        ...

    def cancel(self, job_id: JobId, reason: str) -> None:
        """Stop the job for good."""
        ...

    def drain_node(self, node: NodeName, reason: str) -> None:
        """Stop new work on a node. ``reason`` starts with ``medic:`` when medic drains."""
        ...

    def resume_node(self, node: NodeName, reason: str) -> None:
        """Return a node drained by medic to service. Never used on others' drains."""
        ...


class LogSource(Protocol):
    """New log lines since the previous call: job output and node kernel logs.

    The source keeps its own cursor (and may persist it through the store) so a line is returned
    once. It never raises on malformed content: undecodable bytes are replaced, not dropped.
    """

    def read_new(self, jobs: Sequence[Job]) -> Sequence[LogLine]:
        """Lines since the last call; ``jobs`` tells a tailing source what to follow."""
        ...


class NodeProvider(Protocol):
    """Machine-level operations below the scheduler (reboot, power-cycle, reprovision).

    Node repair drives it through two calls: :meth:`execute` starts (or runs) one repair action
    on a node the scheduler already drained, and :meth:`rejoined` tells when the node is back.
    ``TransientError``: try again later; ``PermanentError``: this provider cannot do that here
    (e.g. no hook configured for the action); ``NotFoundError``: unknown node.
    """

    def reboot(self, node: NodeName, reason: str) -> None: ...

    def can(self, action: RepairAction) -> bool:
        """True when this provider can carry ``action`` out here (Slurm alone reboots; the other
        actions need an operator hook). Asked before a node is touched, so that a repair nobody
        can execute never drains a node."""
        ...

    def boot_id(self, node: NodeName) -> str:
        """An id that changes at every boot; guards power-cycles against double execution."""
        ...

    def execute(self, node: NodeName, action: RepairAction, repair_id: int) -> None:
        """Carry out ``action`` on ``node`` for repair ``repair_id``. May return once the action
        is under way (a reboot) or once it is done (an operator hook command). Asking again while
        it is under way does not start it twice."""
        ...

    def rejoined(self, node: NodeName, action: RepairAction, boot_id_before: str | None) -> bool:
        """True once ``node`` answers again after ``action`` and has no reboot pending; for an
        action that restarts the machine also booted since (boot id differs from
        ``boot_id_before``; None: not known, only responsiveness counts). False while it is on
        its way back; raises ``TransientError`` when that cannot be told now."""
        ...

    def in_flight(self, node: NodeName, action: RepairAction) -> bool | None:
        """Whether ``action`` is under way on ``node``, as far as this provider can see from the
        node itself: True (a reboot asked for and not finished), False (nothing under way: it
        never started, or it ended), None (it cannot tell: an operator hook that another medic
        process ran, a node that does not answer). Asked by an engine that took over an
        execution whose outcome was never recorded (its engine stopped mid-step), to decide
        between waiting and issuing the action again."""
        ...


class FaultInjector(Protocol):
    """Injects faults into a cluster and reports what it injected (simulator, test harness)."""

    def inject(
        self, kind: FaultKind, job_id: JobId | None = None, node: NodeName | None = None
    ) -> FaultRecord:
        """Inject ``kind`` into a running job (any one when None) on ``node`` (one of the job's
        nodes when None). Raises ``PermanentError`` when no running job can take the fault."""
        ...

    def faults(self) -> list[FaultRecord]:
        """Every fault injected so far, oldest first."""
        ...


class Workload(Protocol):
    """Submits training jobs (simulator, or sbatch on a real cluster)."""

    def submit(self, spec: JobSpec) -> JobId: ...
