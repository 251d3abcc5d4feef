"""Detection: log lines into detections, and per-attempt progress into derived findings.

Pure: no I/O, no clock reads, no logging. ``SignatureDiagnoser`` implements the ``Diagnoser``
port; ``ProgressTracker`` follows one attempt's progress and reports hangs and stragglers.
"""

from medic.detect.catalogue import default_catalogue, load_catalogue
from medic.detect.matcher import SignatureDiagnoser
from medic.detect.progress import ProgressTracker
from medic.detect.signatures import (
    HANG_SIGNATURE_ID,
    SLOW_JOB_SIGNATURE_ID,
    SLOW_NODE_SIGNATURE_ID,
    Signature,
)

__all__ = [
    "HANG_SIGNATURE_ID",
    "SLOW_JOB_SIGNATURE_ID",
    "SLOW_NODE_SIGNATURE_ID",
    "ProgressTracker",
    "Signature",
    "SignatureDiagnoser",
    "default_catalogue",
    "load_catalogue",
]
