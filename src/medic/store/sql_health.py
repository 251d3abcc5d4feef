"""The node-health read model (``node_health``): written by the repair engine, read by all.

:func:`put_node_health` makes the stored set equal to the one given in one transaction, touching
only what changed (a node that stays degraded keeps its row and its ``since``); a node without a
row is healthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from medic.domain.ids import ClusterName, NodeName
from medic.domain.repairs import NodeHealth, NodeHealthEntry
from medic.store.db import Database
from medic.store.tables import node_health

__all__ = ["list_node_health", "put_node_health"]


def put_node_health(
    db: Database, cluster: ClusterName, health: Mapping[NodeName, NodeHealth], now: datetime
) -> None:
    wanted = {n: h for n, h in health.items() if h is not NodeHealth.HEALTHY}

    def work(conn: Connection) -> None:
        query = sa.select(node_health.c.node, node_health.c.health).where(
            node_health.c.cluster == cluster
        )
        stored = {NodeName(r.node): r.health for r in conn.execute(query)}
        gone = [n for n in stored if n not in wanted]
        changed = [n for n, h in wanted.items() if n in stored and stored[n] != h.value]
        new = [n for n in wanted if n not in stored]
        if gone or changed:
            conn.execute(
                sa.delete(node_health).where(
                    node_health.c.cluster == cluster, node_health.c.node.in_(gone + changed)
                )
            )
        rows = [
            {"cluster": cluster, "node": n, "health": wanted[n].value, "since": now}
            for n in sorted(changed + new)
        ]
        if rows:
            conn.execute(sa.insert(node_health), rows)

    db.write(work)


def list_node_health(db: Database, cluster: ClusterName | None) -> list[NodeHealthEntry]:
    query = sa.select(node_health).order_by(node_health.c.cluster, node_health.c.node)
    if cluster is not None:
        query = query.where(node_health.c.cluster == cluster)
    rows = db.read(lambda conn: conn.execute(query).all())
    return [
        NodeHealthEntry(
            cluster=ClusterName(r.cluster),
            node=NodeName(r.node),
            health=NodeHealth(r.health),
            since=r.since,
        )
        for r in rows
    ]
