"""Policy: a verdict and the job's history into advice; per-job options from the job comment.

Pure: no I/O, no clock reads. See :mod:`medic.policy.recovery` for the rules.
"""

from medic.policy.options import JobOptions, parse_job_options
from medic.policy.recovery import decide, effective_mode, stalled_attempts

__all__ = ["JobOptions", "decide", "effective_mode", "parse_job_options", "stalled_attempts"]
