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
harmless.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from medic.domain.diagnosis import Detection, FaultDomain, Role

__all__ = ["CURABLE", "deterministic_errors", "is_curable"]

CURABLE = re.compile(
    r"\[Errno (?:5|103|104|107|108|110|111|112|113|116|121)\]|\b(?:nan|inf)\b|non-finite"
    r"|\b(?:DEADLINE_EXCEEDED|UNAVAILABLE)\b|\btimed? ?out\b|\bTimeout(?:Error)?\b",
    re.IGNORECASE,
)
"""Messages a retry can cure even when every rank prints them: I/O errnos of a shared filesystem or
the network (EIO, ECONNABORTED, ECONNRESET, ENOTCONN, ESHUTDOWN, ETIMEDOUT, ECONNREFUSED,
EHOSTDOWN, EHOSTUNREACH, ESTALE, EREMOTEIO), non-finite values (NVRx category 27), and timeouts:
gRPC's ``DEADLINE_EXCEEDED`` and ``UNAVAILABLE`` (JAX's coordination service raises them as an
``XlaRuntimeError`` when a peer process is missing or gone), anything that "timed out"."""


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
