"""Fixtures shared by the store contract modules that run on every engine: ``url`` (a fresh
SQLite file, or the PostgreSQL / MariaDB test database emptied) and ``store`` on it, one per
module and engine. Modules with fixtures of their own (``test_store``) keep them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from contract.test_store import ENGINES, _drop_everything
from medic.store import SqlStore, create_store


@pytest.fixture(scope="module", params=ENGINES)
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('store') / 'medic.db'}"
    url = os.environ[request.param]
    _drop_everything(url)
    return url


@pytest.fixture(scope="module")
def store(url: str) -> Iterator[SqlStore]:
    opened = create_store(url)
    yield opened
    opened.close()
