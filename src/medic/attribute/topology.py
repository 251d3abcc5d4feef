"""Where things are: the host behind an address, the node of a printed host name, the NVLink
domain of a node (issue 12, rules 3, 6 and 7).

Read from the attempt's own lines: NCCL's bootstrap line (``NCCL INFO Bootstrap : Using
ib0:10.0.1.10<0>``) says which address a node's NCCL uses; its MNNVL line (``NCCL INFO MNNVL busId
0xb0000 fabric UUID 7a4a....c4fe... cliqueId 0x7ffe``) which multi-node NVLink domain a GPU is in
(fabric UUID ``0.0``: none).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from medic.domain.diagnosis import Detection
from medic.domain.ids import NodeName

__all__ = [
    "BOOTSTRAP_ADDRESS_ID",
    "MNNVL_CLIQUE_ID",
    "address_map",
    "address_of",
    "host_node",
    "nvlink_domains",
]

BOOTSTRAP_ADDRESS_ID = "nccl.bootstrap_address"
MNNVL_CLIQUE_ID = "nccl.mnnvl_clique"
_NO_FABRIC = frozenset({"0.0", "0", ""})
_PORT = re.compile(r"<\d{1,6}>$")
_V4_MAPPED = "::ffff:"


def address_of(peer: str) -> str:
    """``10.0.2.10<54862>`` -> ``10.0.2.10``; ``fe80::1%ib0<5>`` -> ``fe80::1``."""
    text = _PORT.sub("", peer.strip())
    text = text.split("%", 1)[0]
    return text.removeprefix(_V4_MAPPED).lower()


def address_map(detections: Iterable[Detection]) -> dict[str, NodeName]:
    """Address -> node, from the bootstrap lines of nodes that printed them. An address claimed by
    two nodes (containers sharing 172.17.0.2, say) says nothing and is left out."""
    found: dict[str, set[NodeName]] = {}
    for d in detections:
        if d.signature_id != BOOTSTRAP_ADDRESS_ID or d.node is None:
            continue
        address = d.fields.get("address")
        if address:
            found.setdefault(address_of(address), set()).add(d.node)
    return {a: next(iter(nodes)) for a, nodes in found.items() if len(nodes) == 1}


def host_node(
    name: str, nodes: Sequence[NodeName], addresses: dict[str, NodeName]
) -> NodeName | None:
    """The job node a printed host (a name, a FQDN or an address) is, or None."""
    text = name.strip()
    if not text:
        return None
    if text in nodes:
        return NodeName(text)
    short = text.split(".", 1)[0]
    if short in nodes and not text.replace(".", "").isdigit():
        return NodeName(short)
    return addresses.get(address_of(text))


def nvlink_domains(detections: Iterable[Detection]) -> dict[NodeName, str]:
    """Node -> its multi-node NVLink domain (fabric UUID and clique), where NCCL printed one."""
    domains: dict[NodeName, str] = {}
    for d in detections:
        if d.signature_id != MNNVL_CLIQUE_ID or d.node is None:
            continue
        fabric = d.fields.get("fabric", "")
        if fabric in _NO_FABRIC:
            continue
        domains.setdefault(d.node, f"{fabric}/{d.fields.get('clique', '')}")
    return domains
