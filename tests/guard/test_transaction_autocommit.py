"""Transactional mode on a connection in AUTOCOMMIT isolation: each statement would commit on
its own, so the record would be durable before the block's writes and survive their rollback
(the key then stuck in progress, the work undone). Such a connection is refused before any
statement is sent, sync and async, Connection and Session, and left as it was."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mideng import Guard, open_store
from mideng.errors import ConfigurationError
from tests.services import MYSQL_URL, POSTGRES_URL, need

pytestmark = pytest.mark.slow


def _urls(name: str, tmp: Path) -> tuple[str, str, str]:
    if name == "postgresql":
        return POSTGRES_URL, POSTGRES_URL, POSTGRES_URL
    if name == "mysql":
        return MYSQL_URL, MYSQL_URL.replace("+pymysql", "+asyncmy"), MYSQL_URL
    path = tmp / "autocommit.db"
    return f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}", f"sqlite:///{path}"


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Guard, str, str]]:
    name = str(request.param)
    if name != "sqlite":
        need(name)
    url, aurl, store_url = _urls(name, tmp_path)
    table = f"mideng_ac_{uuid.uuid4().hex[:10]}"
    store = open_store(store_url, table=table)
    yield Guard(store, lease=30), url, aurl
    store.close()
    if name != "sqlite":
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


class Boom(Exception):
    pass


@pytest.mark.parametrize("how", ["connection", "session", "open statement"])
def test_an_autocommit_connection_is_refused_and_nothing_is_recorded(
    setup: tuple[Guard, str, str], how: str
) -> None:
    guard, url, _ = setup
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    sent: list[str] = []
    try:
        with engine.connect() as conn:
            if how == "open statement":
                conn.execute(text("SELECT 1"))  # SQLAlchemy now counts a transaction as begun
            target: Any = Session(bind=conn) if how == "session" else conn
            event.listen(engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
            with (
                pytest.raises(ConfigurationError, match="AUTOCOMMIT"),
                guard.transaction(target, "pay", f"k-{how}"),
            ):
                raise Boom
            assert sent == []
            assert conn.execute(text("SELECT 1")).scalar() == 1  # the connection still works
    finally:
        engine.dispose()
    assert guard.get("pay", f"k-{how}") is None


def test_an_engine_made_for_transactions_still_commits_with_the_block(
    setup: tuple[Guard, str, str],
) -> None:
    guard, url, _ = setup
    engine = create_engine(url)
    try:
        with engine.connect() as conn, guard.transaction(conn, "pay", "k-ok") as tx:
            tx.set_result(1)
        with engine.connect() as conn:
            autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
            with (
                pytest.raises(ConfigurationError, match="AUTOCOMMIT"),
                guard.transaction(autocommit, "pay", "k-opt"),
            ):
                raise Boom
    finally:
        engine.dispose()
    record = guard.get("pay", "k-ok")
    assert record is not None
    assert record.status.value == "succeeded"
    assert guard.get("pay", "k-opt") is None


@pytest.mark.parametrize("how", ["connection", "session"])
def test_async_an_autocommit_connection_is_refused(setup: tuple[Guard, str, str], how: str) -> None:
    guard, _, aurl = setup

    async def scenario() -> None:
        engine = create_async_engine(aurl, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                target: Any = AsyncSession(bind=conn) if how == "session" else conn
                with pytest.raises(ConfigurationError, match="AUTOCOMMIT"):
                    async with guard.atransaction(target, "pay", f"a-{how}"):
                        raise Boom
                assert (await conn.execute(text("SELECT 1"))).scalar() == 1
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert guard.get("pay", f"a-{how}") is None
