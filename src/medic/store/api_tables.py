"""The HTTP API's tables: tokens, console sessions, run-time modes (see
:mod:`medic.store.tables`)."""

from __future__ import annotations

import sqlalchemy as sa

from medic.store.columns import UtcDateTime
from medic.store.schema import CLUSTER, MYSQL_TABLE_ARGS, NAME, SHORT, metadata

HASH = 64
"""A SHA-256 hex digest."""
TOKEN_NAME = 128

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("name", sa.String(TOKEN_NAME), primary_key=True),
    sa.Column("role", sa.String(SHORT), nullable=False),
    # Only the hash of the secret: a stolen database gives no usable token.
    sa.Column("secret_hash", sa.String(HASH), nullable=False, unique=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("created_by", sa.String(NAME), nullable=False),
    sa.Column("revoked_at", UtcDateTime(), nullable=True),
    **MYSQL_TABLE_ARGS,
)

api_sessions = sa.Table(
    "api_sessions",
    metadata,
    # The hash of the cookie's session id, never the id itself.
    sa.Column("id_hash", sa.String(HASH), primary_key=True),
    sa.Column("token_name", sa.String(TOKEN_NAME), nullable=False),
    sa.Column("csrf_token", sa.String(HASH), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
    sa.Index(None, "token_name"),
    sa.Index(None, "expires_at"),
    **MYSQL_TABLE_ARGS,
)

modes = sa.Table(
    "modes",
    metadata,
    sa.Column("cluster", sa.String(CLUSTER), primary_key=True),
    # "" is the whole cluster; any other value names a partition.
    sa.Column("partition", sa.String(NAME), primary_key=True),
    sa.Column("mode", sa.String(SHORT), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("updated_by", sa.String(NAME), nullable=False),
    **MYSQL_TABLE_ARGS,
)
