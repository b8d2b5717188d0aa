"""Transactional mode checks scope and key like every guarded call: a reserved namespace or a
lone surrogate is InvalidKeyError before the block sends a statement, sync and async; a
result the codec refuses rolls the block back instead of committing its writes unrecorded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from mideng.errors import CodecError, InvalidKeyError
from tests.guard.test_transaction import Db, db, pay

__all__ = ["db"]  # the fixture, used by name

pytestmark = pytest.mark.slow

REFUSED = [
    ("token:pay", "o-1", "reserved for anti-resubmit tokens"),
    ("hit:pay", "o-1", "reserved for debounce windows"),
    ("pay", "o-\ud800", "lone surrogate"),
    ("pay\udcff", "o-1", "lone surrogate"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


@pytest.mark.parametrize(("scope", "key", "why"), REFUSED)
def test_a_refused_scope_or_key_sends_nothing(db: Db, scope: str, key: str, why: str) -> None:
    with db.engine.connect() as conn, statements(db.engine) as seen:
        with pytest.raises(InvalidKeyError, match=why), db.guard.transaction(conn, scope, key):
            pytest.fail("must not run")
        assert not conn.in_transaction()
        assert seen == []
        with db.guard.transaction(conn, "pay", "o-1") as tx:
            tx.set_result(1)  # the same connection takes a good key, and the listener sees it
        assert seen
    assert db.guard.get("pay", "o-1") is not None


@pytest.mark.anyio
async def test_async_a_refused_scope_or_key_sends_nothing(db: Db) -> None:
    engine = create_async_engine(db.aurl)
    try:
        with statements(engine.sync_engine) as seen:
            async with engine.connect() as conn:
                for scope, key, why in REFUSED:
                    with pytest.raises(InvalidKeyError, match=why):
                        async with db.guard.atransaction(conn, scope, key):
                            pytest.fail("must not run")
                    assert not conn.in_transaction()
                assert seen == []
                async with db.guard.atransaction(conn, "pay", "o-1") as tx:
                    tx.set_result(1)
                assert seen
    finally:
        await engine.dispose()


# -- a result the codec refuses ---------------------------------------------------------------
def test_an_unencodable_result_rolls_back_the_block(db: Db) -> None:
    def block(conn: Connection) -> None:
        with db.guard.transaction(conn, "pay", "o-9") as tx:
            pay(conn, db, "o-9", 5)
            tx.set_result(object())

    with db.engine.connect() as conn:
        with pytest.raises(CodecError):
            block(conn)
        assert not conn.in_transaction()
    assert db.orders_for("o-9") == []  # the business write went with the record
    assert db.guard.get("pay", "o-9") is None  # and the key is free for the retry
    with db.engine.connect() as conn, db.guard.transaction(conn, "pay", "o-9") as tx:
        assert not tx.replayed
        tx.set_result(pay(conn, db, "o-9", 5))
    assert len(db.orders_for("o-9")) == 1


@pytest.mark.anyio
async def test_async_an_unencodable_result_rolls_back_the_block(db: Db) -> None:
    insert = text(f"INSERT INTO {db.orders} (id, order_key, amount) VALUES ('a', 'o-8', 5)")

    async def block(conn: AsyncConnection) -> None:
        async with db.guard.atransaction(conn, "pay", "o-8") as tx:
            await conn.execute(insert)
            tx.set_result(object())

    engine = create_async_engine(db.aurl)
    try:
        async with engine.connect() as conn:
            with pytest.raises(CodecError):
                await block(conn)
            assert not conn.in_transaction()
    finally:
        await engine.dispose()
    assert db.orders_for("o-8") == []
    assert db.guard.get("pay", "o-8") is None
