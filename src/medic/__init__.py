"""medic: a control plane that keeps distributed GPU training running.

The stable public surface is re-exported here; everything else is internal.
"""

from medic.errors import (
    AdapterError,
    ConfigError,
    ConflictError,
    InputError,
    MedicError,
    NotFoundError,
    PermanentError,
    PolicyViolation,
    SafetyBudgetExceeded,
    StoreError,
    TransientError,
    UnauthorizedError,
)

__version__ = "0.1.0"

__all__ = [
    "AdapterError",
    "ConfigError",
    "ConflictError",
    "InputError",
    "MedicError",
    "NotFoundError",
    "PermanentError",
    "PolicyViolation",
    "SafetyBudgetExceeded",
    "StoreError",
    "TransientError",
    "UnauthorizedError",
    "__version__",
]
