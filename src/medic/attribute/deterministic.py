"""Deterministic errors stop after one attempt (issue 12, rule 4).

Code and configuration errors of the user's program fail the same way on every retry:
``TypeError``, ``NameError``, ``AttributeError``, ``ImportError``, ``SyntaxError``, a checkpoint
or config path that does not exist, NCCL bound to the loopback interface of a multi-node job, an
invalid NCCL configuration. The list (``policy.deterministic_errors``) names Python exception
classes (matched against the exception a traceback ended with) and signature ids.

An attempt stops on such an error even when only one rank raised it before the others were torn
down, provided nothing else explains the failure first: no root with evidence against a node in
the failure window, and no infrastructure root before the error. A message a retry can cure (an
I/O errno, a NaN) is never deterministic, whatever its class. A *confirmation* in the list (NCCL
on the loopback interface) counts only in a failing job of two or more nodes: on one node it is
harmless (:func:`listed_errors`).

An error not in the list is *established* as deterministic when it is a CUDA OOM (a signature
whose action is stop) or when two distinct ranks raised the same exception (same signature, same
message with numbers masked) at the same step, unless a retry can cure it
(:func:`established_errors`).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from medic.attribute.grouping import AttemptEvents, order, strength
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role

__all__ = [
    "CURABLE",
    "MAX_DECISIVE",
    "deterministic_errors",
    "established_errors",
    "is_curable",
    "listed_errors",
]

MAX_DECISIVE = 8
"""Deciding detections kept as a stop verdict's evidence."""
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")

CURABLE = re.compile(
    r"\[Errno (?:3|5|32|103|104|107|108|110|111|112|113|116|121)\]|\b(?:nan|inf)\b|non-finite"
    r"|\b(?:DEADLINE_EXCEEDED|UNAVAILABLE)\b|\btimed? ?out\b|\bTimeout(?:Error)?\b",
    re.IGNORECASE,
)
"""Messages a retry can cure even when every rank prints them: errnos of a torn-down peer (ESRCH,
EPIPE), I/O errnos of a shared filesystem or the network (EIO, ECONNABORTED, ECONNRESET,
ENOTCONN, ESHUTDOWN, ETIMEDOUT, ECONNREFUSED, EHOSTDOWN, EHOSTUNREACH, ESTALE, EREMOTEIO),
non-finite values (NVRx category 27), and timeouts: gRPC's ``DEADLINE_EXCEEDED`` and
``UNAVAILABLE`` (JAX's coordination service raises them as an ``XlaRuntimeError`` when a peer
process is missing or gone), anything that "timed out"."""


def is_curable(d: Detection) -> bool:
    text = f"{d.fields.get('exception', '')}: {d.fields.get('message', '')}"
    return CURABLE.search(text) is not None


def _listed(d: Detection, names: Collection[str]) -> bool:
    exception = d.fields.get("exception", "").rsplit(".", 1)[-1]
    return d.signature_id in names or (bool(exception) and exception in names)


def deterministic_errors(
    roots: Sequence[Detection],
    confirmations: Sequence[Detection],
    names: Collection[str],
    *,
    multi_node: bool,
) -> list[Detection]:
    """The attempt's listed application errors (roots first, then listed confirmations of a
    multi-node job), in order; empty when there are none."""
    found = [
        d
        for d in roots
        if d.domain is FaultDomain.APPLICATION and _listed(d, names) and not is_curable(d)
    ]
    if multi_node:
        found += [
            d
            for d in confirmations
            if d.role is Role.CONFIRMATION
            and d.domain is FaultDomain.APPLICATION
            and _listed(d, names)
        ]
    return found


def established_errors(
    app_roots: Sequence[Detection], run: AttemptEvents
) -> list[Detection] | None:
    """The deciding detections of a deterministic application error, or None.

    A CUDA OOM (a root whose signature says stop) is established on its own; an exception is
    established when two distinct ranks raised the same one at the same step, unless its message
    is curable by a retry.
    """
    stops = [d for d in app_roots if d.action is JobAction.STOP]
    if stops:
        return [d for d in stops if d.signature_id == stops[0].signature_id]
    groups: dict[tuple[str, str, int | None], list[Detection]] = {}
    for d in app_roots:
        if "exception" not in d.fields:
            continue
        text = f"{d.fields['exception']}: {d.fields.get('message', '')}"
        if is_curable(d):
            continue
        key = (d.signature_id, _NUMBERS.sub("N", text), run.step_at(d.time))
        groups.setdefault(key, []).append(d)
    for members in groups.values():  # insertion order: the group seen first wins
        ranks = {(d.rank, None) if d.rank is not None else (None, d.node) for d in members}
        if len(ranks) >= 2:
            return members
    return None


def listed_errors(
    run: AttemptEvents, in_window: Sequence[Detection], names: Collection[str]
) -> list[Detection]:
    """The listed deterministic errors that decide the attempt (rule 4, see
    :mod:`medic.attribute.deterministic`): none when a root with evidence against a node is in
    the window, or an infrastructure root came before the error."""
    listed = deterministic_errors(
        run.roots, run.confirmations, names, multi_node=len(set(run.nodes)) >= 2
    )
    if not listed or any(strength(d) == 3 for d in in_window):
        return []
    head = min(listed, key=order)
    if any(strength(d) == 2 and order(d) < order(head) for d in run.roots):
        return []
    return [d for d in listed if d.signature_id == head.signature_id][:MAX_DECISIVE] or [head]
