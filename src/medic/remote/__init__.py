"""medic.remote: adapters that reach a medic control plane over HTTP.

:class:`MedicApiClient` is the advice API's client: the remote controller's
``ControllerLedger`` and advice feed.
"""

from medic.remote.client import MedicApiClient

__all__ = ["MedicApiClient"]
