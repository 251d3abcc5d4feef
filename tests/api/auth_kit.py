"""API tokens for tests: a token of a role, put straight into the store (no ``token-created`` audit
event, so the audit trails the tests look at hold only what they are about), and the header that
carries it. Shared by the API, agent and integration tests (``from api.auth_kit import ...``)."""

from __future__ import annotations

from typing import Any

from medic.domain.auth import Role, Token, hash_secret, new_secret
from medic.testing import FakeClock

__all__ = ["bearer", "grant"]

_T0 = FakeClock().now()


def grant(store: Any, role: Role, name: str | None = None) -> str:
    """Create a token of ``role`` named ``name`` (default: the role's name) in ``store`` (a
    ``TokenStore``) and return its secret."""
    secret = new_secret()
    store.create_token(
        Token(
            name=name or role.value,
            role=role,
            secret_hash=hash_secret(secret),
            created_at=_T0,
            created_by="test",
        )
    )
    return secret


def bearer(secret: str) -> dict[str, str]:
    """The ``Authorization`` header for ``secret``."""
    return {"Authorization": f"Bearer {secret}"}
