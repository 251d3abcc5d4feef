"""The scheduler's node states as alerts, examined only where something changed.

:meth:`AlertSources.observe` given the nodes that changed since the previous pass must leave the
store exactly as examining every node does: the same alerts firing after every pass, through
drains, failures, returns to service, repairs holding nodes and people resolving alerts.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from medic.domain.cluster import Node, NodeState
from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import AlertState
from medic.repair import alerts as alerts_module
from medic.repair.alerts import AlertSources, NullRepairMetrics
from medic.store import SqlStore, create_store
from medic.testing import FakeClock

C = ClusterName("c")
NAMES = [NodeName(f"n{i:02d}") for i in range(30)]
STATES = [
    (NodeState.IDLE, None),
    (NodeState.ALLOCATED, None),
    (NodeState.DRAINED, "bad fan (ops)"),
    (NodeState.DOWN, "Not responding"),
    (NodeState.DOWN, "hardware replaced"),
]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SqlStore, SqlStore]]:
    pair = (
        create_store(f"sqlite:///{tmp_path / 'a.db'}"),
        create_store(f"sqlite:///{tmp_path / 'b.db'}"),
    )
    yield pair
    for store in pair:
        store.close()


def _node(name: NodeName, state: NodeState, reason: str | None) -> Node:
    return Node(name=name, state=state, partitions=("p0",), gpus=8, reason=reason)


def _firing(store: SqlStore) -> dict[tuple[str, str], int]:
    return {
        (a.node, a.key): a.count
        for a in store.list_alerts(cluster=C, state=AlertState.FIRING)
        if a.source.value == "scheduler"
    }


def _observe(
    sources: AlertSources,
    store: SqlStore,
    nodes: list[Node],
    now: FakeClock,
    changed: frozenset[NodeName] | None,
) -> tuple[int, int]:
    index = {(a.node, a.key): a for a in store.list_alerts(cluster=C, state=AlertState.FIRING)}
    return sources.observe(nodes, index, [], now.now(), changed)


def test_examining_what_changed_fires_and_resolves_exactly_what_examining_all_does(
    stores: tuple[SqlStore, SqlStore],
) -> None:
    full_store, changed_store = stores
    full = AlertSources(full_store, C, NullRepairMetrics(), {})
    incremental = AlertSources(changed_store, C, NullRepairMetrics(), {})
    clock = FakeClock()
    rng = random.Random(5)
    nodes = {n: _node(n, NodeState.IDLE, None) for n in NAMES}
    changed = frozenset(NAMES)
    for _ in range(60):
        clock.advance(1.0)
        listing = list(nodes.values())
        assert _observe(full, full_store, listing, clock, None) == _observe(
            incremental, changed_store, listing, clock, changed
        )
        assert _firing(full_store) == _firing(changed_store)
        changed = frozenset()
        for name in rng.sample(NAMES, rng.randrange(4)):
            nodes[name] = _node(name, *rng.choice(STATES))
            changed |= {name}
        if rng.random() < 0.3:  # a person resolves a scheduler alert: it fires again
            for store in (full_store, changed_store):
                firing = sorted(
                    (a for a in store.list_alerts(cluster=C, state=AlertState.FIRING)),
                    key=lambda a: (a.node, a.key),
                )
                if firing:
                    store.resolve_alert(firing[0].id or 0, clock.now())
    assert _firing(full_store), "the scenario ends with alerts firing"


def test_an_unchanged_cluster_examines_only_the_nodes_with_alerts(
    stores: tuple[SqlStore, SqlStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = stores
    sources = AlertSources(store, C, NullRepairMetrics(), {})
    clock = FakeClock()
    nodes = [_node(n, NodeState.IDLE, None) for n in NAMES]
    nodes[3] = _node(NAMES[3], NodeState.DRAINED, "bad fan (ops)")
    assert _observe(sources, store, nodes, clock, frozenset(NAMES)) == (1, 0)
    examined: list[str] = []
    real = alerts_module.scheduler_alert

    def counting(node: Node, cluster: ClusterName, now: object) -> object:
        examined.append(node.name)
        return real(node, cluster, now)  # type: ignore[arg-type]

    monkeypatch.setattr(alerts_module, "scheduler_alert", counting)
    clock.advance(1.0)
    assert _observe(sources, store, nodes, clock, frozenset()) == (0, 0)
    assert examined == [NAMES[3]]
    # A person resolves it while the node stays drained: the next pass fires it again.
    [alert] = store.list_alerts(cluster=C, state=AlertState.FIRING)
    store.resolve_alert(alert.id or 0, clock.now())
    assert _observe(sources, store, nodes, clock, frozenset()) == (1, 0)
    # The node returns to service: resolved.
    nodes[3] = _node(NAMES[3], NodeState.IDLE, None)
    assert _observe(sources, store, nodes, clock, frozenset({NAMES[3]})) == (0, 1)
