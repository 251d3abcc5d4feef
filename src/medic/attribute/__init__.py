"""Attribution: an attempt's detections into a verdict (domain, action, implicated nodes).

Pure: no I/O, no clock reads. See :mod:`medic.attribute.blame` for the rules.
"""

from medic.attribute.blame import (
    DEFAULT_WINDOW_SECONDS,
    NODE_FAIL_SIGNATURE_ID,
    attribute,
    fan_out_kernel,
    is_fatal,
)

__all__ = [
    "DEFAULT_WINDOW_SECONDS",
    "NODE_FAIL_SIGNATURE_ID",
    "attribute",
    "fan_out_kernel",
    "is_fatal",
]
