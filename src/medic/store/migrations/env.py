"""Alembic environment for medic's schema.

``medic.store.engine.upgrade_schema`` passes an open connection in ``config.attributes``; the
``alembic`` command line (with ``sqlalchemy.url`` set) is supported for operators and for
generating new revisions, online or offline (``--sql``).
"""

from __future__ import annotations

from alembic import context

from medic.store.engine import make_engine
from medic.store.tables import metadata

config = context.config


def _run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("set sqlalchemy.url or pass a connection in config.attributes")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context.configure(connection=conn, target_metadata=metadata)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    _run_offline()
else:
    _run_online()
