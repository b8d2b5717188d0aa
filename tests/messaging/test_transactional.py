"""The transactional consumer on SQLite, PostgreSQL and MariaDB, with an Engine and an
AsyncEngine: the handler's writes and the dedup record commit together; a handler error rolls
both back and is counted; a copy after the commit is acked without running."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.ext.asyncio import create_async_engine

from mideng import Guard, open_store
from mideng.core.record import Status
from mideng.errors import ConfigurationError
from mideng.messaging import Ack, DeadLetter, IdempotentConsumer, Message, Retry
from mideng.stores.memory import MemoryStore
from tests.services import MYSQL_URL, POSTGRES_URL, need


@dataclass
class Db:
    url: str
    aurl: str
    guard: Guard
    orders: str
    engine: Any

    def stock_moves(self) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(text(f"SELECT order_key FROM {self.orders} ORDER BY id"))
            return [r[0] for r in rows]


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    name = str(request.param)
    suffix = uuid.uuid4().hex[:10]
    if name == "sqlite":
        path = tmp_path / "shop.db"
        url, aurl = f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
    else:
        need(name)
        url = POSTGRES_URL if name == "postgresql" else MYSQL_URL
        aurl = url if name == "postgresql" else url.replace("+pymysql", "+asyncmy")
    table, orders = f"mideng_ctx_{suffix}", f"stock_moves_{suffix}"
    store = open_store(url, table=table)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE {orders} (id INTEGER PRIMARY KEY "
                + ("AUTO_INCREMENT" if name == "mysql" else "")
                + (" GENERATED ALWAYS AS IDENTITY" if name == "postgresql" else "")
                + ", order_key VARCHAR(64) NOT NULL)"
            )
        )
    yield Db(url, aurl, Guard(store, lease=30), orders, engine)
    store.close()
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE {orders}"))
        if name != "sqlite":
            conn.execute(text(f"DROP TABLE {table}"))
    engine.dispose()


def msg(key: str) -> Message:
    return Message(b"{}", {"idempotency-key": key}, id=f"m-{key}")


def test_the_write_and_the_record_commit_together(db: Db) -> None:
    def deduct(message: Message, conn: Any) -> None:
        key = message.headers["idempotency-key"]
        conn.execute(text(f"INSERT INTO {db.orders} (order_key) VALUES (:k)"), {"k": key})

    c = IdempotentConsumer(db.guard, "stock", deduct, engine=db.engine)
    assert asyncio.run(c.handle(msg("order:1"))) == Ack(ran=True)
    assert asyncio.run(c.handle(msg("order:1"))) == Ack(ran=False)
    assert db.stock_moves() == ["order:1"]
    record = db.guard.get("stock", "order:1")
    assert record is not None
    assert record.status is Status.SUCCEEDED


def test_a_handler_error_rolls_back_and_counts_until_the_dead_letter(db: Db) -> None:
    runs: list[int] = []

    def deduct(message: Message, conn: Any) -> None:
        runs.append(1)
        conn.execute(text(f"INSERT INTO {db.orders} (order_key) VALUES ('x')"))
        raise LookupError("no such product")

    c = IdempotentConsumer(
        db.guard, "stock", deduct, engine=db.engine, max_attempts=3, retry_delay=0.05
    )
    verdicts = []
    for _ in range(3):
        verdict = asyncio.run(c.handle(msg("order:1")))
        verdicts.append(verdict)
        if isinstance(verdict, Retry):
            time.sleep(verdict.delay + 0.05)
    assert [type(v) for v in verdicts] == [Retry, Retry, DeadLetter]
    assert "3 time(s)" in verdicts[-1].reason  # type: ignore[union-attr]
    assert db.stock_moves() == []  # every attempt's write rolled back
    record = db.guard.get("stock", "order:1")
    assert record is not None
    assert record.status is Status.FAILED
    assert record.attempts == 3
    later = asyncio.run(c.handle(msg("order:1")))
    assert isinstance(later, DeadLetter)
    assert len(runs) == 3


def test_an_async_engine_awaits_an_async_handler_in_the_transaction(db: Db) -> None:
    async def deduct(message: Message, conn: Any) -> None:
        key = message.headers["idempotency-key"]
        await conn.execute(text(f"INSERT INTO {db.orders} (order_key) VALUES (:k)"), {"k": key})
        if key == "order:bad":
            raise ValueError("refused")

    async def scenario() -> list[Any]:
        engine = create_async_engine(db.aurl)
        try:
            c = IdempotentConsumer(db.guard, "stock", deduct, engine=engine, retry_delay=0.05)
            return [
                await c.handle(msg("order:1")),
                await c.handle(msg("order:1")),
                await c.handle(msg("order:bad")),
            ]
        finally:
            await engine.dispose()

    first, copy, bad = asyncio.run(scenario())
    assert first == Ack(ran=True)
    assert copy == Ack(ran=False)
    assert isinstance(bad, Retry)
    assert db.stock_moves() == ["order:1"]


def test_a_copy_while_the_first_transaction_is_open_waits_for_it_and_is_acked(db: Db) -> None:
    if db.url.startswith("sqlite"):
        pytest.skip("SQLite serializes writers: the copy waits on the file lock instead")
    started = asyncio.Event()
    runs: list[str] = []

    def deduct(message: Message, conn: Any) -> None:
        runs.append(message.id or "")
        conn.execute(text(f"INSERT INTO {db.orders} (order_key) VALUES ('order:1')"))
        loop.call_soon_threadsafe(started.set)
        time.sleep(0.3)

    c = IdempotentConsumer(db.guard, "stock", deduct, engine=db.engine)

    async def scenario() -> tuple[Any, Any]:
        first = asyncio.ensure_future(c.handle(msg("order:1")))
        await started.wait()
        copy = await c.handle(Message(b"{}", {"idempotency-key": "order:1"}, id="copy"))
        return await first, copy

    loop = asyncio.new_event_loop()
    try:
        first, copy = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert first == Ack(ran=True)
    assert copy == Ack(ran=False)
    assert runs == ["m-order:1"]
    assert db.stock_moves() == ["order:1"]


def test_mismatched_setups_are_refused_at_construction(db: Db) -> None:
    async def coro(message: Message, conn: Any) -> None: ...

    def plain(message: Message, conn: Any) -> None: ...

    with pytest.raises(ConfigurationError, match="SQL"):
        IdempotentConsumer(Guard(MemoryStore()), "stock", plain, engine=db.engine)
    with pytest.raises(ConfigurationError, match="def handler"):
        IdempotentConsumer(db.guard, "stock", coro, engine=db.engine)
    engine = create_async_engine(db.aurl)
    with pytest.raises(ConfigurationError, match="async def"):
        IdempotentConsumer(db.guard, "stock", plain, engine=engine)
    asyncio.run(engine.dispose())


def test_a_failed_commit_sends_the_message_back_and_leaves_nothing(db: Db) -> None:
    def deduct(message: Message, conn: Any) -> None:
        conn.execute(text(f"INSERT INTO {db.orders} (order_key) VALUES ('order:1')"))

    failures = [OSError("connection lost at commit")]

    def commit(conn: Any) -> None:
        if failures:
            raise failures.pop()

    event.listen(db.engine, "commit", commit)
    try:
        c = IdempotentConsumer(db.guard, "stock", deduct, engine=db.engine)
        first = asyncio.run(c.handle(msg("order:1")))
        assert isinstance(first, Retry)
        assert "transaction failed" in first.reason
        assert db.stock_moves() == []
        assert db.guard.get("stock", "order:1") is None  # the record rolled back with it
        assert asyncio.run(c.handle(msg("order:1"))) == Ack(ran=True)
        assert db.stock_moves() == ["order:1"]
    finally:
        event.remove(db.engine, "commit", commit)
