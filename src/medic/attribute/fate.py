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
- **The application's view of another node's link fault.** CUDA's uncorrectable NVLink error
  (:data:`CUDA_NVLINK`) is what a process sees of a link its traffic crosses, its own or, in a
  multi-node NVLink domain, another tray's. On a node whose own driver logged no link event and
  lost no GPU, it is a cascade of the link event (Xid 74, 144-150) or GPU loss another node's
  driver logged at most :data:`LINK_FOLLOW_SECONDS` before it, unless the two nodes' domains are
  known and differ: NVLink traffic between nodes exists only inside a shared domain, so the same
  error on two nodes at once says they share one even without an MNNVL line.

Pure: no I/O; detections are replaced, never mutated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from medic.attribute.topology import nvlink_domains
from medic.domain.diagnosis import Detection, Role
from medic.domain.ids import NodeName

__all__ = [
    "CUDA_NVLINK",
    "GPU_LOSS",
    "LINK_FOLLOW_SECONDS",
    "NVLINK_ERRORS",
    "fate_victims",
    "link_victims",
]

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
CUDA_NVLINK = "cuda.nvlink_uncorrectable"
"""The one of them a process reports (the others are the driver's, in the node's kernel log)."""
LINK_FOLLOW_SECONDS = 60.0
"""How long after a GPU loss its domain-mates' NVLink errors are still its cascade."""


def link_victims(detections: Sequence[Detection]) -> list[Detection]:
    """The detections with domain-mates' NVLink errors after a GPU loss, and processes' NVLink
    errors after another node's driver-logged link fault, made cascades of it (see the module
    docstring); the others unchanged, in order."""
    domains = nvlink_domains(detections)
    losses: dict[str, list[tuple[float, NodeName]]] = {}
    driver: list[tuple[float, NodeName]] = []
    for d in detections:
        if d.node is None or not d.implicates_node:
            continue
        if d.signature_id in GPU_LOSS and d.node in domains:
            losses.setdefault(domains[d.node], []).append((d.time.timestamp(), d.node))
        if d.signature_id in GPU_LOSS or (
            d.signature_id in NVLINK_ERRORS and d.signature_id != CUDA_NVLINK
        ):
            driver.append((d.time.timestamp(), d.node))
    if not losses and not driver:
        return list(detections)
    own = {node for _, node in driver}
    result = []
    for d in detections:
        domain = domains.get(d.node) if d.node is not None else None
        if d.signature_id in NVLINK_ERRORS and d.implicates_node and d.node is not None:
            when = d.time.timestamp()
            lost = [
                node
                for at, node in sorted(losses.get(domain, []) if domain is not None else [])
                if node != d.node and at <= when <= at + LINK_FOLLOW_SECONDS
            ]
            if not lost and d.signature_id == CUDA_NVLINK and d.node not in own:
                lost = [
                    node
                    for at, node in sorted(driver)
                    if node != d.node
                    and at <= when <= at + LINK_FOLLOW_SECONDS
                    and (domain is None or domains.get(node, domain) == domain)
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
