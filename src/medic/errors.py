"""The single exception tree of medic.

Every error medic raises on purpose derives from :class:`MedicError`. Retry semantics live in the
type, so callers never parse messages to decide whether to try again::

    MedicError
    ├── ConfigError                 bad setting, file or value; permanent; CLI exits with code 2
    ├── InputError                  malformed external input (log line, job comment, API body)
    ├── AdapterError                a call to an external system failed
    │   ├── TransientError          retry later (``retry_after`` seconds, may be None)
    │   ├── PermanentError          retrying will not help; escalate
    │   │   └── NotFoundError       the job/node/record does not exist (any more)
    │   └── UnauthorizedError       credentials were refused
    ├── StoreError                  the database failed
    │   └── ConflictError           a compare-and-set lost a race; re-read and decide again
    │       └── FencedError         a write carried a fencing token its lease no longer has
    ├── PolicyViolation             the decision core refused an action (act on an observed job)
    └── SafetyBudgetExceeded        a guardrail (budget, breaker) stopped an action

Adapters translate foreign exceptions at their boundary with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = [
    "AdapterError",
    "ConfigError",
    "ConflictError",
    "FencedError",
    "InputError",
    "MedicError",
    "NotFoundError",
    "PermanentError",
    "PolicyViolation",
    "SafetyBudgetExceeded",
    "StoreError",
    "TransientError",
    "UnauthorizedError",
    "is_retryable",
]


class MedicError(Exception):
    """Root of every error medic raises deliberately."""


class ConfigError(MedicError):
    """A setting, configuration file or value is invalid. Never retryable."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


class InputError(MedicError):
    """External input (a log line, a job comment, an API body) is malformed.

    ``where`` names the place (file:line, job id, JSON pointer) so the message says what to fix.
    """

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


class AdapterError(MedicError):
    """A call to an external system (scheduler, log source, node provider) failed."""


class TransientError(AdapterError):
    """The call may succeed if retried; ``retry_after`` is a hint in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(AdapterError):
    """Retrying the same call will not help."""


class NotFoundError(PermanentError):
    """The addressed object does not exist (any more)."""


class UnauthorizedError(AdapterError):
    """The external system refused our credentials."""


class StoreError(MedicError):
    """The database failed; treated as transient by the control loop."""


class ConflictError(StoreError):
    """A compare-and-set update lost a race; the caller must re-read and decide again."""


class FencedError(ConflictError):
    """A step was recorded under a lease this process no longer holds (its fencing token is not
    the lease's, or the lease ran out): another process may act now, so this one must not."""


class PolicyViolation(MedicError):
    """The decision core refused an action, e.g. acting on a job in observe mode."""


class SafetyBudgetExceeded(MedicError):
    """A guardrail (concurrency budget, circuit breaker) stopped an action."""


def is_retryable(exc: BaseException) -> bool:
    """Tell whether the loop should try the failed step again on a later pass.

    Unknown exceptions count as retryable: the level-triggered loop re-evaluates them anyway, and a
    bug must not silently turn into a permanent decision.
    """
    if isinstance(exc, TransientError | StoreError):
        return True
    return not isinstance(exc, MedicError)
