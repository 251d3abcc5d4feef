"""Network faults name their node when the evidence does (issue 12, rule 3).

Two context rules over an attempt's placed detections, applied before attribution:

- **Peers point at one node.** NCCL's completion errors (``NET/IB : Got completion from peer
  10.0.2.10<54862> with status=12``) and failed socket connects name the remote address. Mapped to
  hosts with the attempt's own bootstrap lines (:mod:`medic.attribute.topology`), the errors of
  every reporting node but one point at that one node T: T is behind them, and a derived root
  (:data:`PEER_ADDRESS_SIGNATURE_ID`, network, implicating T, quoting the first such report) is
  added. At least two reporters are needed (one, in a job where T itself reported nothing), and
  T must not have crashed itself (an application error, or a hardware or system-software root
  that does not implicate it, such as a contained Xid 94: a dead process also fails its peers'
  queue pairs, so that is a cascade of T's own crash, not T's network), nor have evidence of its
  own (then that evidence names it, and says more). A reporter with a port or link event of its
  own (a network root against it) is not counted: its completion errors come from its own link.
- **Peers of a node with its own fault are its victims.** When peers' completion errors point at
  a node T that has hardware, system-software or scheduler evidence of its own (an Xid, a GPU
  off the bus, Slurm's node failure) or crashed on its own (an application error, a contained
  Xid 94), those errors are T's cascade, not roots: they neither make the verdict a network
  one nor implicate the peers. NCCL's WARN lines carry no time of their own (they take the last
  stamp before them in their file, often the launch's), so time alone cannot order them after
  T's kernel line.
- **The same fault on many nodes is systemic.** When network or system-software evidence that
  implicates its node (a port error, a link down, a read-only remount, an unmounted GPFS) comes
  from :data:`SYSTEMIC_NODES` nodes or more, or from more than half of the job's nodes (two at
  least), it is a switch, fabric or storage fault, not theirs: the lines stay, but no longer
  implicate their nodes (restart without excluding them all).

Pure: no I/O; detections are replaced, never mutated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from medic.attribute.topology import address_map, address_of
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import NodeName, SignatureId

__all__ = [
    "PEER_ADDRESS_SIGNATURE_ID",
    "SYSTEMIC_NODES",
    "apply_network_rules",
    "systemic_nodes",
]

PEER_ADDRESS_SIGNATURE_ID = SignatureId("medic.network.peers_point_at_node")
"""The finding derived when every peer's completion errors point at one node."""
SYSTEMIC_NODES = 6
"""Nodes reporting the same class of fault at once from which it is the fabric's, not theirs."""

_PEER_ERRORS = frozenset(
    {
        "nccl.ib_completion_error",
        "nccl.ofi_completion_error",
        "nccl.socket_unreachable",
        "ucx.transport_retry_exceeded",
        "ucx.ib_completion_error",
    }
)
_SYSTEMIC_DOMAINS = frozenset({FaultDomain.NETWORK, FaultDomain.SYSTEM_SOFTWARE})
_OWN_CRASH_DOMAINS = frozenset(
    {FaultDomain.APPLICATION, FaultDomain.HARDWARE, FaultDomain.SYSTEM_SOFTWARE}
)


def systemic_nodes(
    detections: Sequence[Detection], nodes: Sequence[NodeName]
) -> frozenset[NodeName]:
    """Nodes whose implicating network/system-software evidence is the fabric's (see above)."""
    hit = {
        d.node
        for d in detections
        if d.implicates_node and d.node is not None and d.domain in _SYSTEMIC_DOMAINS
    }
    known = len(set(nodes)) or len(hit)
    if len(hit) >= SYSTEMIC_NODES or (len(hit) >= 2 and len(hit) * 2 > known):
        return frozenset(n for n in hit if n is not None)
    return frozenset()


def _peer_target(
    detections: Sequence[Detection], nodes: Sequence[NodeName]
) -> tuple[NodeName, Detection, frozenset[NodeName]] | None:
    addresses = address_map(detections)
    # A node whose own port or link failed sees completion errors from every peer it talks to:
    # its reports say where its traffic went, not who failed.
    own_link = {
        d.node
        for d in detections
        if d.role is Role.ROOT and d.implicates_node and d.domain is FaultDomain.NETWORK
    }
    pairs: list[tuple[NodeName, NodeName, Detection]] = []
    for d in detections:
        if d.signature_id not in _PEER_ERRORS or d.node is None or "peer" not in d.fields:
            continue
        if d.node in own_link:
            continue
        target = addresses.get(address_of(d.fields["peer"]))
        if target is not None and target != d.node:
            pairs.append((d.node, target, d))
    for target in dict.fromkeys(t for _, t, _ in pairs):
        reporters = frozenset(r for r, t, _ in pairs if t == target)
        elsewhere = any(t != target for r, t, _ in pairs if r != target)
        target_reported = any(r == target for r, _, _ in pairs)
        enough = len(reporters) >= 2 or (len(reporters) == 1 and not target_reported)
        if enough and not elsewhere and (len(nodes) < 2 or target in nodes):
            first = next(d for r, t, d in pairs if t == target)
            return target, first, reporters
    return None


_OWN_FAULT_DOMAINS = frozenset(
    {FaultDomain.HARDWARE, FaultDomain.SYSTEM_SOFTWARE, FaultDomain.SCHEDULER}
)


def _victims_of_own_faults(
    detections: Sequence[Detection], nodes: Sequence[NodeName]
) -> list[Detection]:
    """Peers' completion errors pointing at a node with its own root (evidence against it, or a
    crash of its own) rewritten to cascades of it (see the module docstring)."""
    faulty = {
        d.node
        for d in detections
        if d.node is not None
        and d.role is Role.ROOT
        and ((d.implicates_node and d.domain in _OWN_FAULT_DOMAINS) or _is_crash(d))
    }
    if not faulty:
        return list(detections)
    addresses = address_map(detections)
    result = []
    for d in detections:
        if d.signature_id in _PEER_ERRORS and d.node is not None and "peer" in d.fields:
            target = addresses.get(address_of(d.fields["peer"]))
            if target in faulty and target != d.node and (not nodes or target in nodes):
                d = replace(
                    d, role=Role.CASCADE, implicates_node=False,
                    fields={**d.fields, "victim_of": str(target)},
                )  # fmt: skip
        result.append(d)
    return result


def _is_crash(d: Detection) -> bool:
    """A fatal root of the node's own process (not its network)."""
    return (
        d.role is Role.ROOT
        and d.action in (JobAction.RESTART, JobAction.STOP)
        and d.domain in _OWN_CRASH_DOMAINS
    )


def _crashed(detections: Sequence[Detection], node: NodeName) -> bool:
    return any(d.node == node and _is_crash(d) for d in detections)


def apply_network_rules(
    detections: Sequence[Detection], nodes: Sequence[NodeName]
) -> list[Detection]:
    """The attempt's detections with the two rules above applied (same order; a derived root may
    be appended)."""
    result = list(detections)
    found = _peer_target(result, nodes)
    own = {d.node for d in result if d.implicates_node and d.node is not None}
    if found is not None and found[0] not in own and not _crashed(result, found[0]):
        target, first, reporters = found
        result.append(
            replace(
                first,
                signature_id=PEER_ADDRESS_SIGNATURE_ID,
                domain=FaultDomain.NETWORK,
                role=Role.ROOT,
                severity=Severity.ERROR,
                action=JobAction.RESTART,
                node=target,
                rank=None,
                implicates_node=True,
                fields={
                    **first.fields,
                    "reported_by": ",".join(sorted(reporters)),
                    "node_action": "escalate",
                },
            )
        )
    result = _victims_of_own_faults(result, nodes)
    systemic = systemic_nodes(result, nodes)
    if systemic:
        result = [
            replace(d, implicates_node=False, fields={**d.fields, "systemic": "true"})
            if d.node in systemic and d.implicates_node and d.domain in _SYSTEMIC_DOMAINS
            else d
            for d in result
        ]
    return result
