"""Stragglers and dead processes from what real jobs print (issue 12, rule 6).

Per-rank reports name a node only when they say which rank is behind:

- **Megatron-LM's straggler detector** (``| MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 4468.20ms/0 |``):
  the rank with the longest round-trip time of the traced kernels is the slow one when its time
  exceeds the fastest rank's by more than :data:`SLOW_RATIO`, or when it is also the report's
  lowest-clocked GPU at least :data:`CLOCK_DROP` below the fastest clock (``MnClk/Rnk:
  1395MHz/21``: a throttled GPU), in at least :data:`MIN_REPORTS` reports (most of them, with
  that same rank).
- **NVRx straggler detection** (``Rank=3 Node=node002 Score=0.41``): a rank whose relative or
  individual score is below :data:`SCORE_THRESHOLD` (NVRx's own default) is slow; its node is
  named when the slow ranks sit on a strict minority of the reported nodes.
- **Megatron-LM's GPU sniff test** (``GEMM throughput (...) [TFLOP/s/GPU]: median=...`` then
  ``OUTLIER rank 11 (dgx-b07): 588.12 (-20.7%)``): every metric is a throughput, so a rank below
  the median is slow and one above it is ahead (healthy). A node whose ranks are slow outliers in
  at least :data:`MIN_REPORTS` metric lines is named, when such nodes are a strict minority of the
  job's: slow in a GEMM, its GPU (hardware); slow only in a bus bandwidth, its link (network).
- **NCCL RAS, mismatch** (``30 ranks have launched up to operation 640`` / ``2 ranks have
  launched up to operation 641`` / ``Rank 12 -- GPU 4 managed by process ... on node H``): the
  listed ranks belong to the count line above them. They are behind only when that count is the
  lowest of the report; ranks listed as *ahead* are healthy, and name nobody.
- **NCCL RAS, dead process** (``Process 3487984 on node 172.16.64.213 managing GPU 5``): the
  process RAS cannot reach ran on that node (address -> host by the bootstrap lines): a
  confirmation that implicates it, unless the node raised an application error itself.

A slow node becomes ``medic.straggler.slow_node`` (a non-fatal root, as the live tracker's own
finding: the policy excludes the node at the next restart). A job-level slowdown names nobody.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from medic.attribute.topology import address_map, host_node
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity
from medic.domain.ids import NodeName, SignatureId

__all__ = [
    "CLOCK_DROP",
    "DEAD_PROCESS_SIGNATURE_ID",
    "MIN_REPORTS",
    "SCORE_THRESHOLD",
    "SLOW_NODE_SIGNATURE_ID",
    "SLOW_RATIO",
    "apply_report_rules",
]

SLOW_NODE_SIGNATURE_ID = SignatureId("medic.straggler.slow_node")
DEAD_PROCESS_SIGNATURE_ID = SignatureId("medic.ras.dead_process")
SLOW_RATIO = 1.2
"""Slowest over fastest rank time above which Megatron's report names a straggler."""
MIN_REPORTS = 2
"""Reports that must name the same slow rank."""
SCORE_THRESHOLD = 0.7
"""NVRx's default relative/individual performance threshold."""
CLOCK_DROP = 0.1
"""How far below the fastest GPU's clock the slowest rank's must be to call it throttled."""

_MEGATRON = "megatron.straggler_report"
_NVRX = "nvrx.rank_score"
_SNIFF_METRIC = "megatron.sniff_metric"
_SNIFF_OUTLIER = "megatron.sniff_outlier"
_RAS_COUNT = "nccl.ras_operation_count"
_RAS_RANK = "nccl.ras_rank"
_RAS_DEAD = "nccl.ras_dead_process"
_RTT = re.compile(r"MnRtt/Rnk: (?P<mn>[0-9.]{1,15})ms/(?P<mnr>\d{1,7}) \| MxRtt/Rnk: "
                  r"(?P<mx>[0-9.]{1,15})ms/(?P<mxr>\d{1,7})")  # fmt: skip
_CLK = re.compile(r"MnClk/Rnk: (?P<mn>\d{1,6})MHz/(?P<mnr>\d{1,7}) \| MxClk/Rnk: "
                  r"(?P<mx>\d{1,6})MHz/")  # fmt: skip
_COUNT = re.compile(r"(?P<n>\d{1,7}) ranks? ha(?:s|ve) launched up to operation (?P<op>\d{1,15})")


def _slow(first: Detection, node: NodeName, text: str) -> Detection:
    return replace(
        first,
        signature_id=SLOW_NODE_SIGNATURE_ID,
        domain=FaultDomain.HARDWARE,
        role=Role.ROOT,
        severity=Severity.WARNING,
        action=JobAction.NONE,
        node=node,
        rank=None,
        implicates_node=True,
        fields={**first.fields, "report": text},
    )


def _throttled(text: str, rank: int) -> bool:
    """True when the report's slowest rank is also its lowest-clocked GPU, clocked at least
    :data:`CLOCK_DROP` below the fastest (a throttled GPU: slow, whatever the time ratio)."""
    m = _CLK.search(text)
    if m is None or int(m.group("mnr")) != rank:
        return False
    return int(m.group("mn")) <= (1.0 - CLOCK_DROP) * int(m.group("mx"))


def _megatron(
    detections: Sequence[Detection], rank_node: Callable[[int], NodeName | None]
) -> list[Detection]:
    reports = [(d, m) for d in detections if d.signature_id == _MEGATRON
               if (m := _RTT.search(d.text))]  # fmt: skip
    if len(reports) < MIN_REPORTS:
        return []
    slow: Counter[int] = Counter()
    first: dict[int, Detection] = {}
    for d, m in reports:
        mn, mx = float(m.group("mn")), float(m.group("mx"))
        if (mn > 0 and mx / mn >= SLOW_RATIO) or _throttled(d.text, int(m.group("mxr"))):
            rank = int(m.group("mxr"))
            slow[rank] += 1
            first.setdefault(rank, d)
    if not slow:
        return []
    rank, count = slow.most_common(1)[0]
    node = rank_node(rank)
    if count < MIN_REPORTS or count * 2 <= len(reports) or node is None:
        return []
    return [_slow(first[rank], node, f"rank {rank} slowest in {count} of {len(reports)} reports")]


def _reported_node(
    d: Detection,
    nodes: Sequence[NodeName],
    addresses: dict[str, NodeName],
    rank_node: Callable[[int], NodeName | None],
) -> NodeName | None:
    """The node a per-rank report line names: its host (or address), else its rank's node."""
    node = host_node(d.fields.get("node", ""), nodes, addresses)
    if node is None and d.fields.get("rank", "").isdigit():
        node = rank_node(int(d.fields["rank"]))
    return node


def _nvrx(
    detections: Sequence[Detection],
    nodes: Sequence[NodeName],
    addresses: dict[str, NodeName],
    rank_node: Callable[[int], NodeName | None],
) -> list[Detection]:
    scored: dict[NodeName, list[tuple[float, Detection]]] = {}
    for d in detections:
        if d.signature_id != _NVRX:
            continue
        try:
            score = float(d.fields.get("score", ""))
        except ValueError:
            continue
        node = _reported_node(d, nodes, addresses, rank_node)
        if node is not None:
            scored.setdefault(node, []).append((score, d))
    slow = {n: [d for s, d in v if s < SCORE_THRESHOLD] for n, v in scored.items()}
    slow = {n: v for n, v in slow.items() if v}
    if not slow or len(slow) * 2 >= len(scored):
        return []
    return [_slow(v[0], n, "NVRx score below threshold") for n, v in sorted(slow.items())]


def _sniff(
    detections: Sequence[Detection],
    nodes: Sequence[NodeName],
    addresses: dict[str, NodeName],
    rank_node: Callable[[int], NodeName | None],
) -> list[Detection]:
    ordered = sorted(
        (d for d in detections if d.signature_id in (_SNIFF_METRIC, _SNIFF_OUTLIER)),
        key=lambda d: d.seq,
    )
    metric: Detection | None = None
    # node -> the metric lines it was slow in (by seq), whether one was a GEMM, its first line
    slow: dict[NodeName, tuple[set[int], bool, Detection]] = {}
    for d in ordered:
        if d.signature_id == _SNIFF_METRIC:
            metric = d
            continue
        try:
            deviation = float(d.fields.get("deviation", ""))
        except ValueError:
            continue
        if metric is None or deviation >= 0.0:
            continue  # ahead of the median: healthy
        node = _reported_node(d, nodes, addresses, rank_node)
        if node is None:
            continue
        lines, gemm, first = slow.get(node, (set(), False, d))
        slow[node] = (lines | {metric.seq}, gemm or "GEMM" in metric.text, first)
    named = {n: v for n, v in slow.items() if len(v[0]) >= MIN_REPORTS}
    if not named or len(named) * 2 >= max(len(nodes), len(named) + 1):
        return []
    return [
        replace(
            _slow(first, n, f"GPU sniff test: slow outlier in {len(lines)} metrics"),
            domain=FaultDomain.HARDWARE if gemm else FaultDomain.NETWORK,
        )
        for n, (lines, gemm, first) in sorted(named.items())
    ]


def _ras_mismatch(
    detections: Sequence[Detection], nodes: Sequence[NodeName], addresses: dict[str, NodeName]
) -> list[Detection]:
    ordered = sorted(
        (d for d in detections if d.signature_id in (_RAS_COUNT, _RAS_RANK)), key=lambda d: d.seq
    )
    counts: list[int] = []
    groups: list[tuple[int, list[Detection]]] = []
    for d in ordered:
        if d.signature_id == _RAS_COUNT:
            if (m := _COUNT.search(d.text)) is not None:
                counts.append(int(m.group("op")))
                groups.append((int(m.group("op")), []))
        elif groups:
            groups[-1][1].append(d)
    if len(set(counts)) < 2:
        return []
    lowest = min(counts)
    found: dict[NodeName, Detection] = {}
    for op, listed in groups:
        if op != lowest:
            continue  # ranks listed as ahead of the others are not the stragglers
        for d in listed:
            node = host_node(d.fields.get("address", ""), nodes, addresses)
            if node is not None:
                found.setdefault(node, d)
    if not found or len(found) * 2 >= max(len(nodes), 1):
        return []
    return [_slow(d, n, "NCCL RAS: behind the other ranks") for n, d in sorted(found.items())]


def _ras_dead(
    detections: Sequence[Detection], nodes: Sequence[NodeName], addresses: dict[str, NodeName]
) -> list[Detection]:
    crashed = {
        d.node
        for d in detections
        if d.role is Role.ROOT and d.domain is FaultDomain.APPLICATION and d.node is not None
    }
    result: list[Detection] = []
    seen: set[NodeName] = set()
    for d in detections:
        if d.signature_id != _RAS_DEAD:
            continue
        node = host_node(d.fields.get("address", ""), nodes, addresses)
        if node is None or node in seen or node in crashed:
            continue
        seen.add(node)
        result.append(
            replace(
                d,
                signature_id=DEAD_PROCESS_SIGNATURE_ID,
                role=Role.CONFIRMATION,
                node=node,
                implicates_node=True,
                fields={**d.fields, "node_action": "escalate"},
            )
        )
    if len(result) * 2 >= max(len(nodes), 2):
        return []  # most of the job unreachable: the network's, not theirs
    return result


def apply_report_rules(
    detections: Sequence[Detection],
    nodes: Sequence[NodeName],
    rank_node: Callable[[int], NodeName | None],
) -> list[Detection]:
    """The detections plus the findings the reports above support (appended)."""
    addresses = address_map(detections)
    derived = [
        *_megatron(detections, rank_node),
        *_nvrx(detections, nodes, addresses, rank_node),
        *_sniff(detections, nodes, addresses, rank_node),
        *_ras_mismatch(detections, nodes, addresses),
        *_ras_dead(detections, nodes, addresses),
    ]
    return [*detections, *derived]
