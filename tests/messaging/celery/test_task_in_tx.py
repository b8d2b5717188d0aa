"""``idempotent_task(..., engine=)`` in process: the body takes the connection first and the
key is over the business arguments only; engines it cannot use are refused by name; the body's
write (or an ORM Session's on its connection) rolls back with the dedup record on a body error,
on SQLite, PostgreSQL and MariaDB (their commit together: the Celery suite's); a copy that
meets an open transaction past the database's lock wait, or a key running elsewhere, becomes a
retry; an Engine made before a fork gets a fresh pool in the child."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Column, Connection, String, Table
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.pool import QueuePool

from mideng import Guard
from mideng.core.record import Status
from mideng.errors import (
    ConfigurationError,
    InvalidKeyError,
    KeyMissingError,
    PayloadMismatchError,
)
from mideng.messaging.celery import idempotent_task
from mideng.stores.memory import MemoryStore
from tests.messaging.celery.conftest import Db


def test_the_key_is_over_the_business_arguments_never_the_connection(app: Any, sqlite: Db) -> None:
    task = idempotent_task(app, sqlite.guard, "stock", key="order:{order_id}", engine=sqlite.engine)
    with pytest.raises(KeyMissingError, match="'conn', the connection"):

        @idempotent_task(app, sqlite.guard, "stock", key="{conn}", engine=sqlite.engine)
        def by_conn(conn: Connection, order_id: str) -> None: ...

    with pytest.raises(KeyMissingError, match="'conn', the connection"):

        @idempotent_task(
            app, sqlite.guard, "stock", key=lambda conn, order_id: order_id, engine=sqlite.engine
        )
        def by_callable(conn: Connection, order_id: str) -> None: ...

    with pytest.raises(InvalidKeyError, match="scope"):

        @idempotent_task(app, sqlite.guard, "", key="{order_id}", engine=sqlite.engine)
        def no_scope(conn: Connection, order_id: str) -> None: ...

    with pytest.raises(ConfigurationError, match="takes the connection first"):

        @task
        def no_conn() -> None: ...

    with pytest.raises(ConfigurationError, match="the body is a def"):

        @task
        async def coroutine(conn: Connection, order_id: str) -> None: ...

    seen: list[tuple[Any, ...]] = []

    @idempotent_task(
        app, sqlite.guard, "stock", key=lambda order_id: f"order:{order_id}", engine=sqlite.engine
    )
    def deduct(conn: Connection, order_id: str, quantity: int = 1) -> int:
        seen.append((type(conn), order_id, quantity))
        return quantity

    # A sender passes the business arguments only; Celery checks them against those at send.
    with pytest.raises(TypeError, match="positional arguments but 4 were given"):
        deduct.delay("1001", 2, 3)
    with pytest.raises(TypeError, match="order_id"):
        deduct.delay(quantity=2)
    assert deduct.delay("1001", quantity=2).get() == 2
    assert deduct.delay(order_id="1001").get() == 2  # the same key: the stored result
    assert seen == [(Connection, "1001", 2)]
    record = sqlite.guard.get("stock", "order:1001")
    assert record is not None
    assert record.status is Status.SUCCEEDED


def test_engines_it_cannot_use_are_refused_by_name(app: Any, sqlite: Db) -> None:
    aengine = create_async_engine("sqlite+aiosqlite:///:memory:")
    with pytest.raises(ConfigurationError, match="not an AsyncEngine"):
        idempotent_task(app, sqlite.guard, "stock", key="{order_id}", engine=aengine)
    with pytest.raises(ConfigurationError, match="takes a SQLAlchemy Engine or a callable"):
        idempotent_task(app, sqlite.guard, "stock", key="{order_id}", engine=sqlite.url)
    with pytest.raises(ConfigurationError, match="SQL or SQLite store"):
        idempotent_task(app, Guard(MemoryStore()), "stock", key="{order_id}", engine=sqlite.engine)
    with pytest.raises(ConfigurationError, match="leave on_error unset"):
        idempotent_task(
            app,
            sqlite.guard,
            "stock",
            key="{order_id}",
            engine=sqlite.engine,
            policy={"on_error": "record"},
        )

    # A factory's engine is checked when a worker calls it, before anything runs.
    runs: list[str] = []

    @idempotent_task(app, sqlite.guard, "stock", key="{order_id}", engine=lambda: aengine)
    def deduct(conn: Connection, order_id: str) -> None:
        runs.append(order_id)

    with pytest.raises(ConfigurationError, match="not an AsyncEngine"):
        deduct.delay("1001").get()
    assert runs == []


def test_a_body_error_rolls_back_the_write_and_the_record(app: Any, db: Db) -> None:
    runs: list[str] = []

    @idempotent_task(app, db.guard, "stock", key="order:{order_id}", engine=db.engine)
    def deduct_stock(conn: Connection, order_id: str) -> str:
        runs.append(order_id)
        db.insert(conn, f"order:{order_id}")
        if len(runs) == 1:
            raise LookupError("no such product")
        return "deducted"

    with pytest.raises(LookupError, match="no such product"):
        deduct_stock.delay("1001").get()
    assert db.stock_moves() == []  # the insert rolled back ...
    assert db.guard.get("stock", "order:1001") is None  # ... with the dedup record
    assert deduct_stock.delay("1001").get() == "deducted"  # so the next delivery runs it
    assert deduct_stock.delay("1001").get() == "deducted"
    assert runs == ["1001", "1001"]
    assert db.stock_moves() == ["order:1001"]


def test_an_orm_session_on_the_connection_joins_its_transaction(app: Any, db: Db) -> None:
    class Base(DeclarativeBase):
        pass

    class StockMove(Base):
        __table__ = Table(
            db.moves, Base.metadata, Column("order_key", String(64), primary_key=True)
        )

    @idempotent_task(app, db.guard, "stock", key="order:{order_id}", engine=db.engine)
    def deduct_stock(conn: Connection, order_id: str, fail: bool = False) -> str:
        with Session(bind=conn) as session:
            session.add(StockMove(order_key=f"order:{order_id}"))
            session.commit()  # the Session's part: the task's transaction commits after the body
        if fail:
            raise LookupError("no such product")
        return "deducted"

    with pytest.raises(LookupError):
        deduct_stock.delay("1001", fail=True).get()
    assert db.stock_moves() == []  # the Session's commit did not commit the task's transaction
    assert db.guard.get("stock", "order:1001") is None
    assert deduct_stock.delay("1001").get() == deduct_stock.delay("1001").get() == "deducted"
    assert db.stock_moves() == ["order:1001"]


def test_a_reused_key_with_other_data_is_refused_without_running(app: Any, sqlite: Db) -> None:
    runs: list[int] = []

    @idempotent_task(
        app,
        sqlite.guard,
        "stock",
        key="order:{order_id}",
        payload=lambda quantity: {"quantity": quantity},
        engine=sqlite.engine,
    )
    def deduct_stock(conn: Connection, order_id: str, quantity: int) -> int:
        runs.append(quantity)
        return quantity

    assert deduct_stock.delay("1001", 2).get() == 2
    assert deduct_stock.delay("1001", 2).get() == 2
    with pytest.raises(PayloadMismatchError):
        deduct_stock.delay("1001", 5).get()
    assert runs == [2]


class Retried(Exception):
    pass


def _retries(task: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``task.retry`` is asked, each time; it raises Retried instead of retrying."""
    asked: list[dict[str, Any]] = []

    def retry(**options: Any) -> Exception:
        asked.append(options)
        return Retried()

    monkeypatch.setattr(task, "retry", retry)
    return asked


@contextmanager
def _held(hold: Any) -> Iterator[threading.Event]:
    """Run ``hold(holding, release)`` in a thread until the caller is done with it."""
    holding, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold, args=(holding, release))
    holder.start()
    try:
        assert holding.wait(10)
        yield release
    finally:
        release.set()
        holder.join(10)


def test_a_copy_that_outwaits_the_lock_wait_of_an_open_transaction_is_retried(
    app: Any, db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    @idempotent_task(
        app, db.guard, "stock", key="order:{order_id}", engine=db.engine, in_flight_delay=0.5
    )
    def deduct_stock(conn: Connection, order_id: str) -> str:
        runs.append(order_id)
        db.insert(conn, f"order:{order_id}")
        return "deducted"

    def hold(holding: threading.Event, release: threading.Event) -> None:
        # The key's first transaction, open (its record row inserted, uncommitted).
        with db.engine.connect() as conn, db.guard.transaction(conn, "stock", "order:1001") as tx:
            db.insert(conn, "order:1001")
            holding.set()
            release.wait(10)
            tx.set_result("deducted by the holder")

    asked = _retries(deduct_stock, monkeypatch)
    with _held(hold), pytest.raises(Retried):
        deduct_stock.apply(args=["1001"], throw=True)
    assert runs == []  # never run beside the open transaction
    assert [(a["countdown"], type(a["exc"]).__name__) for a in asked] == [(0.5, "InProgressError")]
    assert asked[0]["max_retries"] == 1  # always one more: this retry never exhausts
    monkeypatch.undo()
    assert deduct_stock.delay("1001").get() == "deducted by the holder"
    assert runs == []
    assert db.stock_moves() == ["order:1001"]


def test_a_key_running_elsewhere_is_retried(
    app: Any, db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    @idempotent_task(
        app, db.guard, "stock", key="order:{order_id}", engine=db.engine, in_flight_delay=0.5
    )
    def deduct_stock(conn: Connection, order_id: str) -> str:
        runs.append(order_id)
        return "deducted"

    def hold(holding: threading.Event, release: threading.Event) -> None:
        # A guarded run outside any transaction: a committed claim with a live 30 s lease.
        def body() -> str:
            holding.set()
            release.wait(10)
            return "deducted elsewhere"

        db.guard.run("stock", "order:1001", body)

    asked = _retries(deduct_stock, monkeypatch)
    with _held(hold), pytest.raises(Retried):
        deduct_stock.apply(args=["1001"], throw=True)
    assert runs == []
    assert [(a["countdown"], type(a["exc"]).__name__) for a in asked] == [(0.5, "InProgressError")]
    monkeypatch.undo()
    assert deduct_stock.delay("1001").get() == "deducted elsewhere"
    assert runs == []


def test_an_engine_made_before_a_fork_gets_a_fresh_pool_in_the_child(
    app: Any, sqlite: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools: list[Any] = []

    @idempotent_task(app, sqlite.guard, "stock", key="order:{order_id}", engine=sqlite.engine)
    def deduct_stock(conn: Connection, order_id: str) -> None:
        pools.append(sqlite.engine.pool)

    deduct_stock.delay("1").get()
    deduct_stock.delay("2").get()
    parent = sqlite.engine.pool
    assert isinstance(parent, QueuePool)
    assert pools == [parent, parent]
    assert parent.checkedin() == 1  # the parent's pooled connection, which a child inherits
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as a forked pool child sees it
    deduct_stock.delay("3").get()
    deduct_stock.delay("4").get()
    assert pools[2] is not parent  # the child's own pool, made once
    assert pools[3] is pools[2]
    assert parent.checkedin() == 1  # left to the parent, not closed under it
