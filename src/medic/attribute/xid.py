"""Xid context rules: what a kernel Xid means depends on the other Xids of the same attempt.

The catalogue classifies one line at a time; these rules look at every Xid of the attempt at once
(see ``shared/reference/xid-catalog.md`` §5, §6) and rewrite the detections before attribution:

- **13 / 31** (graphics exception, MMU fault): application-side, never evidence against the node,
  unless the same code repeats on the same GPU (or the same node when the line names no GPU) in
  :data:`REPEAT_THRESHOLD` or more *occurrences* within the attempt: then it is a hardware root
  that implicates the node. An occurrence is one faulting process (one pid): the driver prints
  several lines per event (warp, global and ESR lines), and a process with a sticky CUDA error
  cannot fault again, so only restarts (torchrun's in-job restarts) make new occurrences.
  Lines without a pid count as one occurrence per distinct second.
- **43** (GPU stopped processing, induced by the application): application-side, never implicating.
- **45** (preemptive cleanup): teardown collateral, ignored (never a root, never counted).
- **48** (double-bit ECC): a hardware root that implicates the node, solo or not (node action
  ``reset_gpu``). With **63/64** (row remap event or failure) on the same GPU it takes the
  row-remap path (catalog §6.2, ``WORKFLOW_XID_48``): still implicating, node action
  ``drain_reset`` (let the node's other jobs finish, then reset the GPU to activate the remap);
  the 63/64 lines become its confirmations.
- **94** (contained ECC error, the application restarted): the driver contained the error to
  the faulting application; restart the job without excluding the node (not implicating), unless
  it recurs on that node (:data:`CONTAINED_REPEAT` occurrences within the attempt; across attempts
  the repair ladder sees it in the node's own kernel log).
- **154** (recovery action changed): the driver's own recommendation. Its printed action
  (``GPU Reset Required``, ``Node Reboot Required``, ...) is kept in ``fields["recovery_action"]``
  and carried into the verdict; ``None`` is no finding. It confirms another Xid root of its node.
  Alone, a reset or reboot is a hardware root (the GPU is unusable until then); a drain (``Drain
  P2P``, ``Drain and Reset``) is a non-fatal finding: the node is named, running jobs may finish.

:func:`recommended_node_action` reads a verdict's evidence for the node repair it calls for
(vocabulary of ``docs/signatures.md``: ``reset_gpu``, ``drain_reset``, ``reboot``, ``escalate``
...), preferring Xid 154's printed action over the static table, as the catalog advises.

Pure: no I/O; detections are replaced, never mutated.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Severity, Verdict
from medic.domain.ids import NodeName, SignatureId

__all__ = [
    "CONTAINED_REPEAT",
    "NODE_ACTIONS",
    "REPEAT_THRESHOLD",
    "ROW_REMAP_NODE_ACTION",
    "XID_REPEATED_SIGNATURE_ID",
    "apply_xid_rules",
    "recommended_node_action",
    "recovery_action",
    "xid_code",
]

ROW_REMAP_NODE_ACTION = "drain_reset"
"""Node action of the row-remap path (Xid 48 with 63/64 on the same GPU)."""
REPEAT_THRESHOLD = 3
"""Occurrences of Xid 13 (or 31) on one GPU within an attempt that make it a hardware fault."""
XID_REPEATED_SIGNATURE_ID = SignatureId("medic.xid.repeated_gpu_exception")
"""The finding an application-side Xid becomes when it repeats on the same GPU."""

NODE_ACTIONS = (
    "none",
    "restart_app",
    "reset_gpu",
    "drain_reset",
    "reboot",
    "power_cycle",
    "reprovision",
    "update_firmware",
    "escalate",
)
"""Node repair actions, lightest first (the heaviest one called for wins)."""

_REPEATABLE = frozenset({13, 31})
_CONTAINED = 94
CONTAINED_REPEAT = 2
_CONTAINED_REPORTS = frozenset({"cuda.ecc_uncorrectable"})
"""Occurrences of a contained Xid 94 on one node within an attempt that make it the node's."""
_APPLICATION = frozenset({13, 31, 43})
_COLLATERAL = frozenset({45})
_ECC_DBE = 48
_ROW_REMAP = frozenset({63, 64})
_RECOVERY = 154

# Static node actions by code (catalog §3, §4): the immediate bucket reduced to the ladder above.
_RESET_GPU = (46, 48, 62, 63, 64, 74, 92, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158)
_CODE_ACTIONS: dict[int, str] = {
    79: "reboot",
    167: "reboot",
    **dict.fromkeys(_RESET_GPU, "reset_gpu"),
}
_RECOVERY_ACTIONS = (
    ("none", "none"),
    ("drain p2p", "drain_reset"),
    ("drain and reset", "drain_reset"),
    ("reset", "reset_gpu"),  # "GPU Reset Required", "PF FLR"-style resets
    ("flr", "reset_gpu"),
    ("reboot", "reboot"),
)

_XID_TEXT = re.compile(r"\bXid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]{1,20})\): (?P<xid>\d{1,4})\b")
_RECOVERY_TEXT = re.compile(r"\bto 0x[0-9A-Fa-f]{1,8} \((?P<action>[^)]{1,60})\)")
_PID = re.compile(r"^'?<?(?P<pid>\d{1,10})>?'?$")


def xid_code(detection: Detection) -> int | None:
    """The Xid code of a kernel Xid detection (its ``xid`` field, else read from its text)."""
    value = detection.fields.get("xid")
    if value is None:
        match = _XID_TEXT.search(detection.text[:400]) if "Xid" in detection.text else None
        value = match.group("xid") if match else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _gpu(detection: Detection) -> str | None:
    pci = detection.fields.get("pci")
    if pci is None:
        match = _XID_TEXT.search(detection.text[:400])
        pci = match.group("pci") if match else None
    # 0000:3b:00 and 0000:3b:00.0 name the same GPU; case is not significant.
    return pci.lower().removesuffix(".0") if pci else None


def recovery_action(detection: Detection) -> str | None:
    """The action an Xid 154 line prints (``"Node Reboot Required"``), or None."""
    value = detection.fields.get("recovery_action")
    if value is None:
        match = _RECOVERY_TEXT.search(detection.text[:600])
        value = match.group("action") if match else None
    return value.strip() if value else None


def _recovery_node_action(action: str) -> str:
    lowered = action.lower()
    for needle, node_action in _RECOVERY_ACTIONS:
        if lowered == needle or (needle != "none" and needle in lowered):
            return node_action
    return "escalate"


def _occurrence(detection: Detection) -> str:
    match = _PID.match(detection.fields.get("pid", "").strip())
    if match is not None:
        return f"pid:{match.group('pid')}"
    return f"t:{int(detection.time.timestamp())}"


def _with(detection: Detection, **fields: str) -> dict[str, str]:
    return {**detection.fields, **fields}


def _noise(detection: Detection) -> Detection:
    return replace(
        detection,
        domain=FaultDomain.NONE,
        role=Role.NOISE,
        action=JobAction.NONE,
        implicates_node=False,
    )


def _hardware(detection: Detection, role: Role, **fields: str) -> Detection:
    return replace(
        detection,
        domain=FaultDomain.HARDWARE,
        role=role,
        severity=Severity.CRITICAL if role is Role.ROOT else detection.severity,
        action=JobAction.RESTART if role is Role.ROOT else detection.action,
        implicates_node=detection.node is not None,
        fields=_with(detection, **fields),
    )


def apply_xid_rules(detections: Sequence[Detection]) -> list[Detection]:
    """The attempt's detections with its Xids reinterpreted in context (see the module docstring).

    Detections that are not Xids pass through unchanged, in order; the result has the same length.
    """
    codes = [xid_code(d) for d in detections]
    per_gpu: dict[tuple[NodeName | None, str | None], set[int]] = defaultdict(set)
    occurrences: dict[tuple[NodeName | None, str | None, int], set[str]] = defaultdict(set)
    xid_roots: set[NodeName | None] = set()
    for d, code in zip(detections, codes, strict=True):
        if code is None or code in _COLLATERAL:
            continue
        per_gpu[(d.node, _gpu(d))].add(code)
        if code in _REPEATABLE:
            occurrences[(d.node, _gpu(d), code)].add(_occurrence(d))
        if code == _CONTAINED:
            occurrences[(d.node, None, code)].add(_occurrence(d))
        if code != _RECOVERY and d.role is Role.ROOT:
            xid_roots.add(d.node)
    result: list[Detection] = []
    for d, code in zip(detections, codes, strict=True):
        result.append(d if code is None else _rewrite(d, code, per_gpu, occurrences, xid_roots))
    return _contained_only(result, codes)


def _contained_only(result: list[Detection], codes: Sequence[int | None]) -> list[Detection]:
    """The application's own report of a contained error (``CUDA error: uncorrectable ECC error
    encountered``) on a node whose only Xid is a contained 94 does not implicate it either."""
    contained = {d.node for d in result if d.fields.get("xid_rule") == "contained"}
    other = {
        d.node
        for d, code in zip(result, codes, strict=True)
        if code is not None and d.implicates_node and d.role is Role.ROOT
    }
    quiet = contained - other
    if not quiet:
        return result
    return [
        replace(d, implicates_node=False, fields=_with(d, xid_rule="contained"))
        if d.node in quiet and d.signature_id in _CONTAINED_REPORTS and d.implicates_node
        else d
        for d in result
    ]


def _rewrite(
    d: Detection,
    code: int,
    per_gpu: dict[tuple[NodeName | None, str | None], set[int]],
    occurrences: dict[tuple[NodeName | None, str | None, int], set[str]],
    xid_roots: set[NodeName | None],
) -> Detection:
    gpu = (d.node, _gpu(d))
    if code in _COLLATERAL:
        return _noise(d)
    if code in _REPEATABLE:
        seen = len(occurrences[(*gpu, code)])
        if seen >= REPEAT_THRESHOLD and d.node is not None:
            repeated = _hardware(
                d, Role.ROOT, xid_rule="repeated", occurrences=str(seen), node_action="escalate"
            )
            return replace(repeated, signature_id=XID_REPEATED_SIGNATURE_ID)
    if code in _APPLICATION:
        return replace(d, domain=FaultDomain.APPLICATION, implicates_node=False)
    if code == _CONTAINED:
        seen = len(occurrences[(d.node, None, code)])
        if seen >= CONTAINED_REPEAT and d.node is not None:
            return replace(d, fields=_with(d, xid_rule="contained_repeated", occurrences=str(seen)))
        return replace(d, implicates_node=False, fields=_with(d, xid_rule="contained"))
    if code == _ECC_DBE:
        if per_gpu[gpu] & _ROW_REMAP:
            return _hardware(d, Role.ROOT, node_action=ROW_REMAP_NODE_ACTION, xid_rule="row_remap")
        return _hardware(d, Role.ROOT, node_action="reset_gpu")
    if code in _ROW_REMAP and _ECC_DBE in per_gpu[gpu]:
        return _hardware(
            d, Role.CONFIRMATION, node_action=ROW_REMAP_NODE_ACTION, xid_rule="row_remap"
        )
    if code == _RECOVERY:
        return _recovery(d, xid_roots)
    return d


def _recovery(d: Detection, xid_roots: set[NodeName | None]) -> Detection:
    action = recovery_action(d)
    if action is None or action.lower() == "none":
        return _noise(d)
    node_action = _recovery_node_action(action)
    if d.node in xid_roots:
        return _hardware(d, Role.CONFIRMATION, recovery_action=action, node_action=node_action)
    found = _hardware(d, Role.ROOT, recovery_action=action, node_action=node_action)
    if node_action == "drain_reset":  # running jobs may finish: named, not failing
        return replace(found, action=JobAction.NONE, severity=d.severity)
    return found


def _rank(action: str | None) -> int:
    return NODE_ACTIONS.index(action) if action in NODE_ACTIONS else -1


def recommended_node_action(
    verdict: Verdict, signature_actions: Mapping[str, str] | None = None
) -> str | None:
    """The node repair the verdict calls for on its implicated nodes, or None (nobody implicated).

    Xid 154's printed action wins; otherwise the heaviest action of the implicating evidence (its
    ``node_action`` field where these rules set one, else its signature's ``node_action`` from
    ``signature_actions`` (signature id -> the catalogue's action), else the static table by Xid
    code); ``escalate`` for implicating evidence without a known action.
    """
    if not verdict.implicated_nodes:
        return None
    evidence = [
        d for d in verdict.evidence if d.implicates_node and d.node in verdict.implicated_nodes
    ]
    printed = [_recovery_node_action(a) for a in _recovery_actions(evidence)]
    if printed:
        return max(printed, key=_rank)
    known: list[str] = []
    for d in evidence:
        code = xid_code(d)
        action = (
            d.fields.get("node_action")
            or (signature_actions or {}).get(d.fields.get("cause", d.signature_id))
            or (_CODE_ACTIONS.get(code) if code else None)
        )
        if action is None and code is not None:
            action = "escalate"  # an unknown code: NVSentinel's default too (CONTACT_SUPPORT)
        if action is not None:
            known.append(action)
    if known:
        return max(known, key=_rank)
    return "reboot" if any("fallen off the bus" in d.text for d in evidence) else "escalate"


def _recovery_actions(detections: Iterable[Detection]) -> list[str]:
    return [
        action
        for d in detections
        if xid_code(d) == _RECOVERY
        and (action := recovery_action(d)) is not None
        and action.lower() != "none"
    ]
