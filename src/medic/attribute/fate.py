"""Fate sharing has a first domain (issue 12, rule 7).

When a multi-node NVLink domain (a GB200/NVL72 rack) fails, every GPU of it reports errors
within seconds, and the other domains of the job fail with it (their peers are gone). Where the
logs say which NVLink domain each node is in (NCCL's MNNVL line, :mod:`medic.attribute.topology`)
and the implicating evidence spans several domains, the domain whose first implicating line is
earliest is the root; the other domains' nodes are victims and are not implicated. A node whose
domain is not known is its own domain.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from medic.attribute.topology import nvlink_domains
from medic.domain.diagnosis import Detection
from medic.domain.ids import NodeName

__all__ = ["fate_victims"]


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
        key = domains.get(d.node, f"node:{d.node}")
        when = (d.time.timestamp(), d.seq)
        if key not in first or when < first[key]:
            first[key] = when
        members.setdefault(key, set()).add(d.node)
    if len(members) < 2:
        return frozenset()
    root = min(first, key=lambda k: first[k])
    return frozenset(n for k, nodes in members.items() if k != root for n in nodes)
