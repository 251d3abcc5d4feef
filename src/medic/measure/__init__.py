"""Measures of how well the fleet runs: goodput (the share of node time that went into training
progress that was kept) and its badput by cause.

Pure like the rest of the decision core: values in, values out, ``now`` passed in.
"""

from medic.measure.goodput import (
    BADPUT,
    Cause,
    Goodput,
    Interval,
    goodput,
    goodput_series,
    intervals,
    job_intervals,
)

__all__ = [
    "BADPUT",
    "Cause",
    "Goodput",
    "Interval",
    "goodput",
    "goodput_series",
    "intervals",
    "job_intervals",
]
