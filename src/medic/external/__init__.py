"""Adapters to external services medic consults but never depends on.

:class:`~medic.external.attribution_http.HttpAttributionProvider` asks an HTTP attribution service
for its verdict on a failed attempt (the ``AttributionProvider`` port); the loop records it beside
medic's own verdict as an audit event.
"""

from medic.external.attribution_http import HttpAttributionProvider

__all__ = ["HttpAttributionProvider"]
