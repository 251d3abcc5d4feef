"""Attribution: an attempt's detections into a verdict (domain, action, implicated nodes).

Pure: no I/O, no clock reads. Modules by responsibility: :mod:`~medic.attribute.grouping` (the
attempt's detections, placed on nodes by rank), :mod:`~medic.attribute.xid` (Xid context rules and
node repair actions), :mod:`~medic.attribute.blame` (the verdict rules) and
:mod:`~medic.attribute.evidence` (wording and evidence of a verdict).
"""

from medic.attribute.blame import (
    DEFAULT_WINDOW_SECONDS,
    NODE_FAIL_SIGNATURE_ID,
    attribute,
    fan_out_kernel,
    is_fatal,
    node_failures,
)
from medic.attribute.grouping import DEFAULT_GPUS_PER_NODE, node_of_rank
from medic.attribute.xid import XID_REPEATED_SIGNATURE_ID, recommended_node_action

__all__ = [
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_WINDOW_SECONDS",
    "NODE_FAIL_SIGNATURE_ID",
    "XID_REPEATED_SIGNATURE_ID",
    "attribute",
    "fan_out_kernel",
    "is_fatal",
    "node_failures",
    "node_of_rank",
    "recommended_node_action",
]
