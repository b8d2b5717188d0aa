"""mideng.db's own contract: one operation, the same answers from every loop on every database.

An operation written once must not care which driver runs it: the sync and the async loop, on
a caller's SQLAlchemy connection (``Site`` / ``AsyncSite``) and on the SQL store's own DB-API
cursors, give the same rowcounts and rows for the same statements. Then the site's ownership
and savepoint rules, and the names and dialects the runtime refuses.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from mideng.db import AsyncSite, Op, Site, Sql, Stmt, check_table, kind_of
from mideng.errors import ConfigurationError
from mideng.stores.record_table.statements import Statements
from mideng.stores.sql import SQLStore
from mideng.stores.sqlite import SQLiteStore
from tests.services import MYSQL_URL, POSTGRES_URL, need

ASYNC = {"postgresql": POSTGRES_URL, "mysql": MYSQL_URL.replace("+pymysql", "+asyncmy")}


def _exercise(table: str) -> Op[list[Any]]:
    """Rowcounts and rows of a few plain statements, in the order they ran."""
    seen: list[Any] = []
    for n in (1, 2, 3):
        res = yield Stmt(Sql(f"INSERT INTO {table} (n, v) VALUES (:n, :v)"), {"n": n, "v": n * 10})
        seen.append(res.rowcount)
    res = yield Stmt(Sql(f"UPDATE {table} SET v = v + 1 WHERE n >= :n"), {"n": 2})
    seen.append(res.rowcount)
    res = yield Stmt(Sql(f"SELECT n, v FROM {table} ORDER BY n"))
    seen.append([tuple(int(x) for x in row) for row in res.rows])
    res = yield Stmt(Sql(f"DELETE FROM {table} WHERE n = :n"), {"n": 1})
    seen.append(res.rowcount)
    return seen


EXPECTED = [1, 1, 1, 2, [(1, 10), (2, 21), (3, 31)], 1]


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(sync URL, async URL) of one database."""
    if request.param == "sqlite":
        path = tmp_path / "db.sqlite"
        yield f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
        return
    need(request.param)
    url = POSTGRES_URL if request.param == "postgresql" else MYSQL_URL
    yield url, ASYNC[request.param]


@pytest.fixture
def table(urls: tuple[str, str]) -> Iterator[str]:
    name = f"mideng_db_{uuid.uuid4().hex[:10]}"
    engine = create_engine(urls[0])
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {name} (n INTEGER PRIMARY KEY, v INTEGER NOT NULL)"))
    yield name
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {name}"))
    engine.dispose()


def _clear(url: str, table: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


def test_one_operation_gives_the_same_answers_sync_and_async(
    urls: tuple[str, str], table: str
) -> None:
    engine = create_engine(urls[0])
    with engine.connect() as conn:
        site = Site(conn)
        site.open(savepoint=True)
        got = site.run(_exercise(table))
        site.commit()
    engine.dispose()
    assert got == EXPECTED
    _clear(urls[0], table)

    async def run_async() -> list[Any]:
        aengine = create_async_engine(urls[1])
        try:
            async with aengine.connect() as conn:
                site = AsyncSite(conn)
                await site.open(savepoint=True)
                answer = await site.run(_exercise(table))
                await site.commit()
                return answer
        finally:
            await aengine.dispose()

    assert asyncio.run(run_async()) == EXPECTED


@pytest.mark.parametrize("urls", ["postgresql", "mysql"], indirect=True)
def test_the_stores_own_cursors_give_the_same_answers(urls: tuple[str, str], table: str) -> None:
    store = SQLStore.from_url(urls[0], create_schema=False)
    # Only its cursors are used here: its record table is never read, so not checked either.
    store.executor.first = store.aexecutor.first = None
    try:
        # The executors hand the operation the store's statements first; this one needs none.
        def op(stmts: Statements) -> Op[list[Any]]:
            return _exercise(table)

        assert store.executor.drive(op) == EXPECTED
        _clear(urls[0], table)

        async def run_async() -> list[Any]:
            try:
                return await store.aexecutor.drive(op)
            finally:
                await store.aclose()

        assert asyncio.run(run_async()) == EXPECTED
    finally:
        store.close()


def _count(url: str, table: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
    engine.dispose()
    return int(found)


def _one(table: str, n: int) -> Op[int]:
    res = yield Stmt(Sql(f"INSERT INTO {table} (n, v) VALUES (:n, 0)"), {"n": n})
    return res.rowcount


def test_site_rules_own_savepoint_and_whole(urls: tuple[str, str], table: str) -> None:
    engine = create_engine(urls[0])
    # No transaction active: the site owns one and commits it.
    with engine.connect() as conn:
        site = Site(conn)
        assert site.owned
        site.open(savepoint=True)
        site.run(_one(table, 1))
        site.commit()
    assert _count(urls[0], table) == 1
    # Inside the caller's transaction, a savepoint: rolling back undoes only the site's work,
    # and the caller's transaction goes on to commit its own.
    with engine.connect() as conn, conn.begin():
        conn.execute(text(f"INSERT INTO {table} (n, v) VALUES (2, 0)"))
        site = Site(conn)
        assert not site.owned
        site.open(savepoint=True)
        site.run(_one(table, 3))
        site.rollback(whole=False)
    assert _count(urls[0], table) == 2
    # Without a savepoint, "whole" rolls back the caller's transaction too; not whole leaves it.
    with engine.connect() as conn:
        conn.begin()
        conn.execute(text(f"INSERT INTO {table} (n, v) VALUES (4, 0)"))
        site = Site(conn)
        site.open(savepoint=False)
        site.run(_one(table, 5))
        site.rollback(whole=False)
        assert conn.in_transaction()
        site.rollback(whole=True)
        assert not conn.in_transaction()
    assert _count(urls[0], table) == 2
    engine.dispose()


def test_sites_refuse_the_wrong_kind_of_connection() -> None:
    with pytest.raises(ConfigurationError, match="Connection or Session"):
        Site(object())
    with pytest.raises(ConfigurationError, match="AsyncConnection or AsyncSession"):
        AsyncSite(object())


class _Dialect:
    def __init__(self, name: str, mariadb: bool = False, version: tuple[int, ...] = ()) -> None:
        self.name = name
        self.is_mariadb = mariadb
        self.server_version_info = version


def test_kinds_of_dialect() -> None:
    assert kind_of(_Dialect("postgresql")) == "postgresql"
    assert kind_of(_Dialect("sqlite")) == "sqlite"
    assert kind_of(_Dialect("mariadb", True, (10, 11))) == "mariadb"
    assert kind_of(_Dialect("mariadb", True, (10, 11)), returning=False) == "mysql"
    assert kind_of(_Dialect("mariadb", True, (10, 4))) == "mysql"
    assert kind_of(_Dialect("mysql", False, (8, 0))) == "mysql"
    # Never another database's SQL for a dialect nobody wrote statements for.
    with pytest.raises(ConfigurationError, match="mssql"):
        kind_of(_Dialect("mssql"))


def test_one_table_name_rule(tmp_path: Path) -> None:
    assert check_table("mideng_records") == "mideng_records"
    for bad in ("", "1abc", "a-b", "a;drop", "x" * 51, "naïve"):
        with pytest.raises(ConfigurationError, match="plain SQL identifier"):
            check_table(bad)
    # Both stores apply it, and the transactional mode's table= does too.
    with pytest.raises(ConfigurationError, match="plain SQL identifier"):
        SQLStore(POSTGRES_URL, table="x" * 51, create_schema=False)
    with pytest.raises(ConfigurationError, match="plain SQL identifier"):
        SQLiteStore(str(tmp_path / "r.db"), table="x" * 51)
