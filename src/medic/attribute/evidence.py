"""Wording and evidence of a verdict: one-line descriptions and the detections kept as evidence.

Pure: no I/O. Summaries are single lines (no newline ever reaches a summary).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from medic.attribute.grouping import AttemptEvents
from medic.attribute.xid import recovery_action, xid_code
from medic.domain.diagnosis import Detection
from medic.domain.ids import NodeName

__all__ = [
    "MAX_CASCADE_EVIDENCE",
    "MAX_IMPLICATING_EVIDENCE",
    "describe",
    "node_list",
    "notes",
    "select_evidence",
]

MAX_IMPLICATING_EVIDENCE = 8
MAX_CASCADE_EVIDENCE = 3


def _snippet(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def describe(d: Detection, *, node: bool = True) -> str:
    """``signature on node rank R: "line"`` (the node left out when the caller already said it)."""
    where = f" on {d.node}" if node and d.node else ""
    where += f" rank {d.rank}" if d.rank is not None else ""
    return f"{d.signature_id}{where}" + (f': "{_snippet(d.text)}"' if d.text else "")


def node_list(nodes: Iterable[NodeName]) -> str:
    return ", ".join(sorted(nodes))


def select_evidence(
    primary: Sequence[Detection], run: AttemptEvents, implicated: frozenset[NodeName]
) -> tuple[Detection, ...]:
    """The deciding detections, then the direct evidence against the implicated nodes, then the
    first few cascades (so a reader sees what followed)."""
    chosen: list[Detection] = list(primary)
    seen = {id(d) for d in chosen}
    extra = [d for d in run.implicating if d.node in implicated and id(d) not in seen]
    chosen.extend(extra[:MAX_IMPLICATING_EVIDENCE])
    chosen.extend(run.cascades[:MAX_CASCADE_EVIDENCE])
    return tuple(chosen)


def notes(run: AttemptEvents, implicated: frozenset[NodeName]) -> str:
    """Clauses the Xid rules add to a summary: the driver's printed recovery action (Xid 154), a
    pending row remap (Xid 48 with 63/64) and repeated GPU exceptions (Xid 13/31)."""
    clauses: list[str] = []
    seen: set[str] = set()
    for d in run.implicating:
        if d.node not in implicated:
            continue
        rule = d.fields.get("xid_rule")
        action = recovery_action(d) if xid_code(d) == 154 else None
        if action is not None:
            clause = f"driver recovery action on {d.node}: {action} (Xid 154)"
        elif rule == "row_remap":
            clause = f"row remap pending on {d.node} (Xid 48 with 63/64): drain, then reset the GPU"
        elif rule == "repeated":
            occurrences = d.fields.get("occurrences", "several")
            clause = f"Xid {xid_code(d)} repeated {occurrences}x on one GPU of {d.node}"
        else:
            continue
        if clause not in seen:
            seen.add(clause)
            clauses.append(clause)
    return "".join(f"; {clause}" for clause in clauses)
