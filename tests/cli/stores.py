"""The SQL stores the command tests run on: SQLite in the test's directory, and MariaDB on a
table of the test's own (dropped afterwards with its steps table)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import MYSQL_URL, need

SQL_KINDS = ["sqlite", "mysql"]


def sql_url(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'cli.db'}"
        return
    need(kind)
    table = f"cli_{uuid.uuid4().hex[:10]}"
    yield f"{MYSQL_URL}?table={table}"
    import sqlalchemy

    engine = sqlalchemy.create_engine(MYSQL_URL)
    with engine.begin() as conn:
        for name in (f"{table}_steps", table):
            conn.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {name}"))
    engine.dispose()


@pytest.fixture(params=SQL_KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from sql_url(str(request.param), tmp_path)
