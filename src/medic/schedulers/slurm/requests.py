"""Repair requests written into a Slurm node's drain reason or comment (sites without the API).

An operator or a detector drains the node with a reason that starts with ``medic-request:``::

    scontrol update nodename=gpu017 state=drain \\
        reason="medic-request: reboot id=ticket-4711 detector=nvsentinel GPU memory test failed"

or a detector, without draining the node, writes the same into its comment (``detector=`` is
then required: a person's request needs the drain as its evidence)::

    scontrol update nodename=gpu017 \\
        comment="medic-request: reset_gpu id=hc-981 detector=nvsentinel ECC DBE on GPU 3"

Format: ``medic-request: <action> [id=<request id>] [detector=<name>] <free text>``. ``<action>``
is a repair action (``reset_gpu``, ``reboot``, ``reprovision``, ``migrate``, ``power_cycle``,
``remove``; ``-`` for ``_`` and any case accepted); the options come in any order before the free
text. With ``detector=`` the request is that detector's; without it the request is a person's
(``slurm-operator``), which waits for approval.

**Not authenticated.** Slurm does not say who wrote a reason or a comment: anyone it lets drain
a node can write ``detector=<any name>``. So every request parsed here is marked
:attr:`~medic.domain.repairs.RequestChannel.SCHEDULER`, and a detector's waits for a person
even when the repair policy trusts that name, unless the policy explicitly trusts requests from
the scheduler (``trust_scheduler_requests``, off by default; see ``medic.repair.intake``). A
detector that should be trusted asks through the API, with its own token.

``alert_keys`` name ``slurm:drain``: the node drained by someone else is the failed check a
person's request answers.

Without ``id=``, the request id is a hash of (node, reason text), so re-reading the same drain
reason every pass never creates a second repair; to ask again for the same node later, change
the text or pass a new ``id=``.

:func:`parse_request` is pure: None for a node whose reason is not a request, ``InputError``
(naming the node and what is wrong) for a malformed one; the engine audits that and leaves the
node alone.
"""

from __future__ import annotations

import hashlib
import re

from medic.domain.cluster import REQUEST_PREFIX, Node
from medic.domain.ids import ClusterName
from medic.domain.repairs import RepairAction, RepairRequest, RequestChannel, RequesterKind
from medic.errors import InputError

__all__ = ["REQUEST_PREFIX", "SLURM_OPERATOR", "parse_request", "request_id_for"]

SLURM_OPERATOR = "slurm-operator"
"""``requested_by`` of a person's request from a drain reason (Slurm does not say who)."""
DRAIN_ALERT_KEY = "slurm:drain"

_OPTION = re.compile(r"^(?P<key>[A-Za-z_][\w-]*)=(?P<value>.*)$")
_VALUE = re.compile(r"^[A-Za-z0-9][\w.:@+-]{0,127}$")
_OPTIONS = ("id", "detector")
_ACTIONS = ", ".join(a.value for a in RepairAction)


def request_id_for(node: str, text: str) -> str:
    """The default request id: a short hash of the node and the reason text."""
    digest = hashlib.sha256(f"{node}\n{' '.join(text.split())}".encode()).hexdigest()
    return f"slurm-{digest[:20]}"


def _action(node: str, word: str | None) -> RepairAction:
    if not word:
        raise InputError(f"node {node}", f"{REQUEST_PREFIX} names no action (one of {_ACTIONS})")
    try:
        return RepairAction(word.lower().replace("-", "_"))
    except ValueError:
        raise InputError(
            f"node {node}", f"{REQUEST_PREFIX} unknown action {word!r} (one of {_ACTIONS})"
        ) from None


def _options(node: str, words: list[str]) -> tuple[dict[str, str], list[str]]:
    """The leading ``key=value`` options and the free text after them."""
    options: dict[str, str] = {}
    rest = list(words)
    while rest and (match := _OPTION.match(rest[0])):
        key, value = match["key"].lower(), match["value"]
        if key not in _OPTIONS:
            raise InputError(
                f"node {node}",
                f"{REQUEST_PREFIX} unknown option {key!r} (options: id=, detector=; put free "
                "text after them)",
            )
        if key in options:
            raise InputError(f"node {node}", f"{REQUEST_PREFIX} option {key}= given twice")
        if not _VALUE.match(value):
            raise InputError(
                f"node {node}",
                f"{REQUEST_PREFIX} {key}={value!r} is not valid (letters, digits and _.:@+-, at "
                "most 128)",
            )
        options[key] = value
        rest.pop(0)
    return options, rest


def parse_request(node: Node, cluster: ClusterName) -> RepairRequest | None:
    """The repair request in ``node``'s drain reason, else in its comment; None when neither
    is one."""
    reason = (node.reason or "").strip()
    if reason.lower().startswith(REQUEST_PREFIX):
        return _request(node, cluster, reason, "drain reason")
    comment = (node.comment or "").strip()
    if comment.lower().startswith(REQUEST_PREFIX):
        return _request(node, cluster, comment, "comment")
    return None


def _request(node: Node, cluster: ClusterName, line: str, where: str) -> RepairRequest:
    words = line[len(REQUEST_PREFIX) :].split()
    action = _action(node.name, words[0] if words else None)
    options, free = _options(node.name, words[1:])
    text = " ".join(free) or f"requested in the Slurm {where} of {node.name}"
    detector = options.get("detector")
    if where == "comment" and detector is None:
        raise InputError(
            f"node {node.name}",
            f"{REQUEST_PREFIX} in a node comment must name detector=<name> (a person asks by "
            "draining the node with the request as its reason)",
        )
    if detector is not None and action.human_only:
        raise InputError(
            f"node {node.name}",
            f"{REQUEST_PREFIX} detector {detector} cannot ask for {action.value}: removal is a "
            "person's decision",
        )
    return RepairRequest(
        cluster=cluster,
        node=node.name,
        action=action,
        requested_by=detector or SLURM_OPERATOR,
        requester_kind=RequesterKind.DETECTOR if detector else RequesterKind.USER,
        reason=text,
        alert_keys=(DRAIN_ALERT_KEY,) if where == "drain reason" else (),
        request_id=options.get("id") or request_id_for(node.name, line),
        evidence={"source": f"slurm-{where.replace(' ', '-')}", where.replace(" ", "_"): line},
        channel=RequestChannel.SCHEDULER,  # Slurm does not say who wrote it: not authenticated
    )
