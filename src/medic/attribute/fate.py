"""Fate sharing has a first domain (issue 12, rule 7).

When a multi-node NVLink domain (a GB200/NVL72 rack) fails, every GPU of it reports errors
within seconds, and the other domains of the job fail with it (their peers are gone). Where the
logs say which NVLink domain each node is in (NCCL's MNNVL line, :mod:`medic.attribute.topology`):

- **The first domain is the root.** When the implicating evidence spans several domains, the
  domain whose first implicating line is earliest is the root; the other domains' nodes are
  victims and are not implicated. The nodes whose domain is not known count as one domain (a
  domain whose fabric failed at init may print no MNNVL line at all): they are never victims of
  one another.
- **The healthy ends of a lost GPU's links.** When a node loses a GPU (it falls off the bus, its
  GSP stops answering: :data:`GPU_LOSS`), the NVLink links to it go down, and its domain-mates'
  drivers report their ends (Xid 74, the NVLink5 Xids 144-150, CUDA's uncorrectable NVLink
  error): "the *healthy* end of a link whose peer failed may be the one that reports it"
  (shared/reference/xid-catalog.md, Xid 74). A domain-mate's NVLink error at or after the loss
  (within :data:`LINK_FOLLOW_SECONDS`) is the lost GPU's cascade, not evidence against the
  domain-mate. Only across nodes whose domain is known and shared: without MNNVL lines an NVLink
  error is the node's own (its NVSwitch links stay inside the node).

Pure: no I/O; detections are replaced, never mutated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from medic.attribute.topology import nvlink_domains
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import NodeName

__all__ = ["GPU_LOSS", "LINK_FOLLOW_SECONDS", "NVLINK_ERRORS", "fate_victims", "link_victims"]

GPU_LOSS = frozenset(
    {
        "xid.fallen_off_bus",
        "gpu.fallen_off_bus",
        "gpu.fallen_off_bus_not_responding",
        "xid.62",
        "xid.119",
        "xid.120",
    }
)
"""Signatures of a GPU lost to its node: off the bus, its micro-controller or GSP gone."""
NVLINK_ERRORS = frozenset(
    {"xid.74", *(f"xid.{code}" for code in range(144, 151)), "cuda.nvlink_uncorrectable"}
)
"""Signatures of an NVLink link error, which either end of the link may report."""
LINK_FOLLOW_SECONDS = 60.0
"""How long after a GPU loss its domain-mates' NVLink errors are still its cascade."""


def link_victims(detections: Sequence[Detection]) -> list[Detection]:
    """The detections with domain-mates' NVLink errors after a GPU loss made cascades of it (see
    the module docstring); the others unchanged, in order."""
    domains = nvlink_domains(detections)
    losses: dict[str, list[tuple[float, NodeName]]] = {}
    for d in detections:
        if d.signature_id in GPU_LOSS and d.node in domains and d.implicates_node:
            losses.setdefault(domains[d.node], []).append((d.time.timestamp(), d.node))
    if not losses:
        return list(detections)
    result = []
    for d in detections:
        domain = domains.get(d.node) if d.node is not None else None
        if d.signature_id in NVLINK_ERRORS and domain in losses and d.implicates_node:
            when = d.time.timestamp()
            lost = [
                node
                for at, node in sorted(losses[domain])
                if node != d.node and at <= when <= at + LINK_FOLLOW_SECONDS
            ]
            if lost:
                d = replace(
                    d, role=Role.CASCADE, implicates_node=False,
                    fields={**d.fields, "victim_of": str(lost[0])},
                )  # fmt: skip
        result.append(d)
    return result


_UNKNOWN = "unknown"
"""The nodes that printed no MNNVL line, together: a domain whose fabric failed before NCCL
could describe it prints none, and its nodes' faults must not make victims of each other."""


def fate_victims(
    detections: Sequence[Detection], implicating: Sequence[Detection]
) -> frozenset[NodeName]:
    """Implicated nodes outside the first NVLink domain to fail (empty without MNNVL lines)."""
    domains = nvlink_domains(detections)
    if not domains:
        return frozenset()
    first: dict[str, tuple[float, int]] = {}
    members: dict[str, set[NodeName]] = {}
    for d in implicating:
        if d.node is None:
            continue
        key = domains.get(d.node, _UNKNOWN)
        when = (d.time.timestamp(), d.seq)
        if key not in first or when < first[key]:
            first[key] = when
        members.setdefault(key, set()).add(d.node)
    if len(members) < 2:
        return frozenset()
    root = min(first, key=lambda k: first[k])
    return frozenset(n for k, nodes in members.items() if k != root for n in nodes)
