"""medic's mark on a job it holds, kept on the job itself for the fail-open watchdog.

Right before a requeue-hold the controller writes a mark into the job's admin comment (Slurm's
``AdminComment``, which only administrators set): the advice and attempt it holds the job for,
when, and the job's excluded nodes as they were. The mark lets ``medic watchdog``, a process
beside the scheduler that needs nothing but the scheduler's CLI, release a job medic left held,
with its original constraints, whatever became of the medic process that held it
(:mod:`medic.control.fail_open`). The mark is appended to what the admin comment held; that text
is kept, and given back when the mark is taken off (once the recovery converged, or the watchdog
released the job).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from medic.domain.ids import AdviceId, NodeName

__all__ = ["HoldMark", "read_mark", "with_mark", "without_mark"]

_MARK = re.compile(r"\s*\[medic-hold ([^\]]*)\]")
_FIELD = re.compile(r"(\w+)=(\S+)")


@dataclass(frozen=True, slots=True)
class HoldMark:
    """What a hold of medic's was for, and what to put back if it never converges."""

    advice_id: AdviceId
    generation: int
    attempt: int
    """The attempt medic requeued: the hold is medic's while the job's restart count is above."""
    held_at: datetime
    excluded: frozenset[NodeName]
    """The job's excluded nodes before medic added any."""

    def render(self) -> str:
        nodes = ",".join(sorted(self.excluded)) or "-"
        return (
            f"[medic-hold advice={self.advice_id} generation={self.generation} "
            f"attempt={self.attempt} held_at={int(self.held_at.timestamp())} excluded={nodes}]"
        )


def read_mark(admin_comment: str | None) -> HoldMark | None:
    """medic's mark in ``admin_comment``; None when there is none, or it does not parse (a
    hand-edited one: the watchdog leaves that job to a person)."""
    found = _MARK.search(admin_comment or "")
    if found is None:
        return None
    fields = dict(_FIELD.findall(found.group(1)))
    try:
        excluded = fields["excluded"]
        return HoldMark(
            advice_id=AdviceId(int(fields["advice"])),
            generation=int(fields["generation"]),
            attempt=int(fields["attempt"]),
            held_at=datetime.fromtimestamp(int(fields["held_at"]), tz=UTC),
            excluded=frozenset()
            if excluded == "-"
            else frozenset(NodeName(n) for n in excluded.split(",") if n),
        )
    except (KeyError, ValueError, OverflowError, OSError):
        return None


def with_mark(admin_comment: str | None, mark: HoldMark) -> str:
    """``admin_comment`` carrying ``mark`` (in place of any earlier one)."""
    kept = without_mark(admin_comment)
    return f"{kept} {mark.render()}" if kept else mark.render()


def without_mark(admin_comment: str | None) -> str:
    """``admin_comment`` as it was before medic marked it."""
    return _MARK.sub("", admin_comment or "").strip()
