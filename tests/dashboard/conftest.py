"""The dashboard tests' fixtures: ``filled``, a store and outbox seeded on each family the
module names in ``FAMILIES`` (default SQLite) with ``RECORDS`` records; ``site`` and
``acting``, that store served on loopback read-only and with actions on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mideng.dashboard import app
from tests.dashboard.browser import served
from tests.dashboard.data import PAGE_RECORDS, Seeded, seeded


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "family" in metafunc.fixturenames:
        metafunc.parametrize("family", getattr(metafunc.module, "FAMILIES", ("sqlite",)))


@pytest.fixture
def filled(family: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Seeded]:
    s = seeded(family, tmp_path, records=getattr(request.module, "RECORDS", PAGE_RECORDS))
    yield s
    s.close()


def _served(filled: Seeded, actions: bool) -> Iterator[str]:
    dashboard = app(
        filled.store_url, filled.db_url, outbox_table=filled.outbox_table, actions=actions
    )
    with served(dashboard) as url:
        yield url


@pytest.fixture
def site(filled: Seeded) -> Iterator[str]:
    yield from _served(filled, actions=False)


@pytest.fixture
def acting(filled: Seeded) -> Iterator[str]:
    yield from _served(filled, actions=True)
