"""Where a primitive runs: a Session and an AsyncSession, an engine in AUTOCOMMIT isolation;
and what a failing statement leaves behind — the primitive's own transaction rolled back in
autocommit use, the caller's transaction left to the caller."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mideng.state import (
    Applied,
    Existing,
    Inserted,
    Insufficient,
    ainsert_once,
    decrement,
    insert_once,
)
from tests.state.conftest import new_key, seed_stock
from tests.state.sides import Db, Side


def test_a_session_and_its_transaction(db: Db) -> None:
    orders, key = db.tables["orders"], new_key()
    with Session(db.engine) as session:
        assert isinstance(
            insert_once(session, orders, {"order_no": key, "amount": 1}, unique="order_no"),
            Inserted,
        )
        assert not session.in_transaction()  # autocommit use: committed already
        session.begin()
        again = insert_once(session, orders, {"order_no": key, "amount": 2}, unique="order_no")
        assert isinstance(again, Existing)
        session.execute(orders.update().where(orders.c.order_no == key).values(note="s"))
        session.commit()
    assert [r["note"] for r in db.rows(orders, order_no=key)] == ["s"]


def test_an_async_session_and_its_transaction(db: Db) -> None:
    orders, key = db.tables["orders"], new_key()

    async def scenario() -> None:
        engine = create_async_engine(db.aurl)
        try:
            async with AsyncSession(engine) as session:
                first = await ainsert_once(
                    session, orders, {"order_no": key, "amount": 1}, unique="order_no"
                )
                assert isinstance(first, Inserted)
                await session.begin()
                again = await ainsert_once(
                    session, orders, {"order_no": key, "amount": 2}, unique="order_no"
                )
                assert isinstance(again, Existing)
                await session.execute(
                    orders.update().where(orders.c.order_no == key).values(note="a")
                )
                await session.commit()
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert [r["note"] for r in db.rows(orders, order_no=key)] == ["a"]


def test_an_engine_in_autocommit_isolation(db: Db) -> None:
    stock, sku = db.tables["stock"], f"sku-{uuid.uuid4().hex[:12]}"
    seed_stock(db, sku, 2)
    engine = create_engine(db.url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            assert decrement(conn, stock, {"sku": sku}, "qty", 2) == Applied()
            assert decrement(conn, stock, {"sku": sku}, "qty", 1) == Insufficient(0)
    finally:
        engine.dispose()
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [0]


class Failing:
    """Makes the n-th statement sent on an engine fail before it reaches the server."""

    def __init__(self, engine: Any, nth: int) -> None:
        self.engine, self.nth, self.seen = engine, nth, 0
        event.listen(engine, "before_cursor_execute", self)

    def __call__(self, *args: Any) -> None:
        self.seen += 1
        if self.seen == self.nth:
            raise OperationalError("injected", {}, Exception("the connection failed"))

    def remove(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self)


@pytest.mark.parametrize("nth", [1, 2])
def test_a_failing_statement_in_autocommit_use_rolls_back_and_loses_nothing(
    db: Db, side: Side, nth: int
) -> None:
    """The insert (1) or the read of the duplicate (2) fails: the error reaches the caller,
    the primitive's own transaction is rolled back, and a retry answers as if it never ran."""
    orders, key = db.tables["orders"], new_key()
    conn = side.connect()
    if nth == 2:
        side.insert_once(conn, orders, {"order_no": key, "amount": 1}, unique="order_no")
    failing = Failing(side._sync_engine(), nth)
    try:
        with pytest.raises(OperationalError, match="injected"):
            side.insert_once(conn, orders, {"order_no": key, "amount": 1}, unique="order_no")
    finally:
        failing.remove()
    assert not conn.in_transaction()
    again = side.insert_once(conn, orders, {"order_no": key, "amount": 1}, unique="order_no")
    assert isinstance(again, Inserted if nth == 1 else Existing)
    side.release(conn)
    assert len(db.rows(orders, order_no=key)) == 1


@pytest.mark.parametrize("nth", [1, 2])
def test_a_failing_statement_leaves_the_callers_transaction_to_the_caller(
    db: Db, side: Side, nth: int
) -> None:
    """In the caller's transaction the primitive rolls nothing back: the caller sees the
    error and decides; here it rolls back, and neither its write nor the decrement stays."""
    stock, sku = db.tables["stock"], f"sku-{uuid.uuid4().hex[:12]}"
    seed_stock(db, sku, 1)
    conn = side.connect()
    side.begin(conn)
    side.execute(conn, f"UPDATE {stock.name} SET qty = 5 WHERE sku = :s", {"s": sku})
    amount = 3 if nth == 1 else 9  # 9: a miss, so the read-back is the second statement
    failing = Failing(side._sync_engine(), nth)
    try:
        with pytest.raises(OperationalError, match="injected"):
            side.decrement(conn, stock, {"sku": sku}, "qty", amount)
    finally:
        failing.remove()
    assert conn.in_transaction()
    side.rollback(conn)
    side.release(conn)
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [1]


class Order:
    """An ORM class over the orders table, mapped per test database."""

    order_no: str
    amount: int
    status: str


def test_a_sessions_pending_rows_are_flushed_first(db: Db) -> None:
    """An order added through the ORM and not flushed yet is seen by advance, as
    Session.execute would see it; the session's transaction is then the caller's to commit."""
    from sqlalchemy.orm import registry

    from mideng.state import AlreadyThere, StateMachine

    mapper = registry()
    cls = type("Order", (Order,), {})
    mapper.map_imperatively(cls, db.tables["orders"])
    flow = StateMachine({"NEW": ["PAID"]})
    key = new_key()
    with Session(db.engine) as session:
        order: Any = cls()
        order.order_no, order.amount, order.status = key, 5, "NEW"
        session.add(order)
        assert flow.advance(session, db.tables["orders"], {"order_no": key}, "PAID") == Applied()
        assert session.in_transaction()
        session.commit()
        assert flow.advance(session, db.tables["orders"], {"order_no": key}, "PAID") == (
            AlreadyThere()
        )
    mapper.dispose()
    assert [r["status"] for r in db.rows(db.tables["orders"], order_no=key)] == ["PAID"]


def test_what_is_not_a_core_table_is_refused(db: Db) -> None:
    from mideng.errors import ConfigurationError

    class Mapped:
        __table__ = db.tables["orders"]

    with db.engine.connect() as conn:
        with pytest.raises(ConfigurationError, match="__table__"):
            insert_once(conn, Mapped, {"order_no": "x"}, unique="order_no")
        with pytest.raises(ConfigurationError, match="expected a SQLAlchemy Table"):
            decrement(conn, "stock", {"sku": "x"}, "qty", 1)


def test_an_async_sessions_pending_rows_are_flushed_first(db: Db) -> None:
    from sqlalchemy.orm import registry

    from mideng.state import StateMachine

    mapper = registry()
    cls = type("Order", (Order,), {})
    mapper.map_imperatively(cls, db.tables["orders"])
    flow = StateMachine({"NEW": ["PAID"]})
    key = new_key()

    async def scenario() -> None:
        engine = create_async_engine(db.aurl)
        try:
            async with AsyncSession(engine) as session:
                order: Any = cls()
                order.order_no, order.amount, order.status = key, 5, "NEW"
                session.add(order)
                where = {"order_no": key}
                assert await flow.aadvance(session, db.tables["orders"], where, "PAID") == (
                    Applied()
                )
                assert session.in_transaction()
                await session.commit()
        finally:
            await engine.dispose()

    try:
        asyncio.run(scenario())
    finally:
        mapper.dispose()
    assert [r["status"] for r in db.rows(db.tables["orders"], order_no=key)] == ["PAID"]
