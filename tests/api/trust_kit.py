"""Keep a repair policy's detector trust in a test's store until the SQL store keeps it.

``medic.store.sql_repair_state`` writes the repair policy as one JSON document of the fields it
knows; it does not hold ``trusted_detectors`` and ``trust_scheduler_requests`` yet (a store change
of two fields, no migration: the document is JSON). :func:`keep_trust` makes ``store`` read back
those two fields of the policy last put for a cluster, so tests can trust a detector through the
store or ``PUT /api/v1/policy/repair`` as a deployment will. Once the store keeps both fields it
changes nothing, and can go.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from medic.domain.ids import ClusterName
from medic.domain.repairs import RepairPolicy

__all__ = ["keep_trust"]


def keep_trust(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``store`` (a ``SqlStore``) keeps the detector trust of each policy put from now on."""
    kept: dict[ClusterName, RepairPolicy] = {}
    get, put = store.get_repair_policy, store.put_repair_policy

    def put_policy(cluster: ClusterName, policy: RepairPolicy) -> None:
        put(cluster, policy)
        kept[cluster] = policy

    def get_policy(cluster: ClusterName) -> RepairPolicy:
        policy: RepairPolicy = get(cluster)
        if cluster not in kept:
            return policy
        return replace(
            policy,
            trusted_detectors=kept[cluster].trusted_detectors,
            trust_scheduler_requests=kept[cluster].trust_scheduler_requests,
        )

    monkeypatch.setattr(store, "get_repair_policy", get_policy)
    monkeypatch.setattr(store, "put_repair_policy", put_policy)
