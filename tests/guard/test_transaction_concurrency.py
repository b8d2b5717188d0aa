"""Transactional mode under concurrency, and its async side: many callers of one key, in
threads, processes and tasks, commit one business write; the rest replay it."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine

from mideng import Guard, open_store
from mideng.errors import PayloadMismatchError
from tests.guard.test_transaction import Db, charge, db

__all__ = ["db"]  # the fixture, used by name

pytestmark = pytest.mark.slow


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- concurrent duplicates ----------------------------------------------------------------
def test_16_threads_one_key_one_business_write(db: Db) -> None:
    barrier = threading.Barrier(16)
    answers: list[tuple[bool, Any]] = []
    lock = threading.Lock()

    def caller() -> None:
        barrier.wait()
        answer = charge(db, "hot")
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    orders = db.orders_for("hot")
    assert len(orders) == 1
    assert sorted(replayed for replayed, _ in answers) == [False] + [True] * 15
    assert {r["order"] for _, r in answers} == {orders[0][0]}


def _process(url: str, store_url: str, table: str, orders: str, barrier: Any, out: Any) -> None:
    store = open_store(store_url, table=table)
    engine = create_engine(url)
    db = Db("worker", url, url, store_url, table, orders, engine, Guard(store, lease=30))
    barrier.wait()
    out.put(charge(db, "hot"))
    engine.dispose()
    store.close()


def test_4_processes_one_key_one_business_write(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = multiprocessing.get_context("spawn")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=_process, args=(db.url, db.store_url, db.table, db.orders, barrier, out))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    answers = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    orders = db.orders_for("hot")
    assert len(orders) == 1
    assert sorted(replayed for replayed, _ in answers) == [False, True, True, True]
    assert {r["order"] for _, r in answers} == {orders[0][0]}


# -- async --------------------------------------------------------------------------------
async def acharge(db: Db, conn: AsyncConnection, key: str, fail: bool = False) -> Any:
    async with db.guard.atransaction(conn, "pay", key, payload={"amount": 10}) as tx:
        if tx.replayed:
            return ("replayed", tx.result)
        order = uuid.uuid4().hex
        await conn.execute(
            text(f"INSERT INTO {db.orders} (id, order_key, amount) VALUES (:i, :k, 10)"),
            {"i": order, "k": key},
        )
        if fail:
            raise RuntimeError("declined")
        tx.set_result(order)
    return ("ran", order)


@pytest.mark.anyio
async def test_async_commit_rollback_and_replay(db: Db) -> None:
    engine = create_async_engine(db.aurl)
    try:
        async with engine.connect() as conn:
            with pytest.raises(RuntimeError):
                await acharge(db, conn, "a-1", fail=True)
            assert db.orders_for("a-1") == []
            assert await db.guard.aget("pay", "a-1") is None
            ran = await acharge(db, conn, "a-1")
            assert ran[0] == "ran"
            assert await acharge(db, conn, "a-1") == ("replayed", ran[1])
        async with engine.connect() as conn:
            await conn.begin()
            with pytest.raises(PayloadMismatchError):
                async with db.guard.atransaction(conn, "pay", "a-1", payload={"amount": 1}):
                    pytest.fail("must not run")
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
            await conn.rollback()
        async with AsyncSession(engine) as session:
            async with db.guard.atransaction(session, "pay", "a-2") as tx:
                await session.execute(text(f"INSERT INTO {db.orders} VALUES ('s', 'a-2', 1)"))
                tx.set_result("s")
            assert not session.in_transaction()
        assert db.orders_for("a-1") == [(ran[1], 10)]
        assert db.orders_for("a-2") == [("s", 1)]
    finally:
        await engine.dispose()
        await db.guard.store.aclose()


@pytest.mark.anyio
async def test_async_concurrent_duplicates_one_business_write(db: Db) -> None:
    engine = create_async_engine(db.aurl, pool_size=8, max_overflow=8)
    try:

        async def one() -> Any:
            async with engine.connect() as conn:
                return await acharge(db, conn, "a-hot")

        answers = await asyncio.gather(*(one() for _ in range(12)))
        orders = db.orders_for("a-hot")
        assert len(orders) == 1
        assert sorted(kind for kind, _ in answers) == ["ran"] + ["replayed"] * 11
        assert {order for _, order in answers} == {orders[0][0]}
    finally:
        await engine.dispose()
        await db.guard.store.aclose()
