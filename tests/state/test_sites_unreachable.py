"""A primitive in autocommit use on a Session whose database cannot be reached: the site
begins the Session's transaction and only then asks it for a connection, which fails. The
primitive raises the driver's error and leaves the Session as it found it, with no
transaction of mideng's still open in it (the caller's next ``session.begin()`` would
otherwise be refused long after the database is back)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mideng.state import StateMachine, ainsert_once, decrement, insert_once

metadata = MetaData()
stock = Table(
    "stock_unreachable",
    metadata,
    Column("sku", String(40), primary_key=True),
    Column("qty", Integer, nullable=False),
    Column("status", String(20)),
)
flow = StateMachine({"NEW": ["PAID"]})


def _nowhere(tmp_path: Path) -> str:
    return str(tmp_path / "no-such-dir" / "state.db")  # sqlite cannot open a file there


@pytest.mark.parametrize("call", ["insert_once", "decrement", "advance"])
def test_a_session_that_cannot_connect_is_left_without_a_transaction(
    tmp_path: Path, call: str
) -> None:
    engine = create_engine(f"sqlite:///{_nowhere(tmp_path)}")
    try:
        with Session(engine) as session:
            calls: dict[str, Callable[[], object]] = {
                "insert_once": lambda: insert_once(
                    session, stock, {"sku": "a", "qty": 1}, unique="sku"
                ),
                "decrement": lambda: decrement(session, stock, {"sku": "a"}, "qty", 1),
                "advance": lambda: flow.advance(session, stock, {"sku": "a"}, "PAID"),
            }
            with pytest.raises(OperationalError):
                calls[call]()
            assert not session.in_transaction()
            session.begin()  # the caller's own transaction can still begin
            session.rollback()
    finally:
        engine.dispose()


def test_an_async_session_that_cannot_connect_is_left_without_a_transaction() -> None:
    async def scenario() -> None:
        # Nothing listens on port 1: refused at once (aiosqlite's failed open would leave its
        # worker thread posting to a loop already closed).
        engine = create_async_engine("postgresql+psycopg://postgres@127.0.0.1:1/test")
        try:
            async with AsyncSession(engine) as session:
                with pytest.raises(OperationalError):
                    await ainsert_once(session, stock, {"sku": "a", "qty": 1}, unique="sku")
                assert not session.in_transaction()
                await session.begin()
                await session.rollback()
        finally:
            await engine.dispose()

    asyncio.run(scenario())
