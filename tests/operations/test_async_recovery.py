"""The async twins of the operator views, and a store failure at each of an operation's own
writes: nothing runs twice, and what is left over is finished or cleared by reconcile."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mideng import Guard, Status
from mideng.errors import StoreUnavailableError
from mideng.stores.steps import StepStore
from tests.backends import Ctx, Opened
from tests.operations.processes import failing_once, open_backend


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def some(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend(request.param, ctx)


def test_async_pending_reconcile_and_stale(some: Opened) -> None:
    guard, scope = Guard(some.store, lease=30), f"apay-{uuid.uuid4().hex[:6]}"
    runs: list[str] = []
    down = [True]

    @guard.step("mark_paid")
    async def mark_paid(order: str) -> str:
        runs.append("mark_paid")
        return "paid"

    @guard.step("send_sms")
    async def send_sms(order: str) -> str:
        runs.append("send_sms")
        if down[0]:
            raise RuntimeError("sms gateway down")
        return "sent"

    @guard.operation(scope, key="{order}", steps=("mark_paid", "send_sms"))
    async def pay(order: str) -> list[str]:
        return [await mark_paid(order), await send_sms(order)]

    @guard.step("export")
    def export() -> int:
        runs.append("export")
        if down[0]:
            raise RuntimeError("disk full")
        return 1

    @guard.operation(f"{scope}-sync", key="{name}")
    def nightly(name: str) -> int:  # a sync operation, reconciled from async code
        return export()

    async def scenario() -> None:
        with pytest.raises(RuntimeError):
            await pay("o1")
        with pytest.raises(RuntimeError):
            await asyncio.to_thread(nightly, "n1")
        found = {p.key: p for p in await guard.apending()}
        assert found["o1"].steps_left == ["send_sms"]
        assert found["n1"].state == "released"
        down[0] = False
        report = {r.key: r.outcome for r in await guard.areconcile(min_age=0)}
        assert report == {"o1": "finished", "n1": "finished"}
        assert await guard.apending() == []
        assert await pay("o1") == ["paid", "sent"]
        assert await guard.astale() == []
        await some.store.aclose()

    asyncio.run(scenario())
    assert runs == ["mark_paid", "send_sms", "export", "send_sms", "export"]


def test_a_store_failure_at_each_own_write_never_runs_a_step_twice(some: Opened) -> None:
    assert isinstance(some.store, StepStore)
    store: Any = some.store
    guard, scope = Guard(store, lease=30), f"pay-{uuid.uuid4().hex[:6]}"
    runs: list[str] = []

    @guard.step("mark_paid")
    def mark_paid(order: str) -> str:
        runs.append(f"mark_paid:{order}")
        return "paid"

    @guard.operation(scope, key="{order}")
    def pay(order: str) -> str:
        return mark_paid(order)

    # The arguments and resume read fail: nothing ran, and the retry runs it.
    failing_once(store, "begin_steps")
    with pytest.raises(StoreUnavailableError):
        pay("o1")
    assert runs == []
    assert pay("o1") == "paid"
    # The step's record fails: the step ran, and runs again on the retry. This is the case the
    # step's downstream key is for: the remote side sees the same key twice.
    failing_once(store, "record_step")
    with pytest.raises(StoreUnavailableError):
        pay("o2")
    assert pay("o2") == "paid"
    assert runs == ["mark_paid:o1", "mark_paid:o2", "mark_paid:o2"]
    # The drop of the kept steps fails after the record completed: the caller still gets its
    # result, duplicates replay it, and reconcile clears what was left.
    failing_once(store, "clear_steps")
    assert pay("o3") == "paid"
    assert pay("o3") == "paid"
    assert guard.pending() == []
    # A plan says so and leaves the kept steps where they are.
    assert [(r.key, r.outcome) for r in guard.reconcile(plan=True, min_age=0)] == [
        ("o3", "would_clear")
    ]
    assert len(store.operations()) == 1
    assert [(r.key, r.outcome) for r in guard.reconcile()] == [("o3", "cleared")]
    assert store.operations() == []
    record = guard.get(scope, "o3")
    assert record is not None
    assert record.status is Status.SUCCEEDED
    assert runs.count("mark_paid:o3") == 1


@pytest.fixture
def postgres(ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend("postgresql", ctx)


def test_an_async_transactional_step_commits_with_its_writes(postgres: Opened, ctx: Ctx) -> None:
    store: Any = postgres.store
    engine = create_async_engine(store.config.sqlalchemy_url(), poolclass=NullPool)
    orders = f"orders_{ctx.suffix}"
    guard, scope = Guard(store, lease=30), f"apay-{uuid.uuid4().hex[:6]}"
    fail = [True]

    @guard.step("mark_paid", conn="conn")
    async def mark_paid(conn: Any, order: str) -> str:
        await conn.execute(sa.text(f"INSERT INTO {orders} VALUES (:id)"), {"id": order})
        return "paid"

    @guard.operation(scope, key="{order}")
    async def pay(order: str) -> str:
        async with engine.begin() as conn:
            paid = await mark_paid(conn, order)
            if fail[0]:
                raise RuntimeError("rolled back after the step")
        return paid

    async def scenario() -> int:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"CREATE TABLE {orders} (id text PRIMARY KEY)")
        try:
            with pytest.raises(RuntimeError):
                await pay("o1")
            fail[0] = False
            assert await pay("o1") == "paid"  # the step ran again: its record rolled back
            async with engine.connect() as conn:
                rows = await conn.execute(sa.text(f"SELECT count(*) FROM {orders}"))
                return int(rows.scalar_one())
        finally:
            async with engine.begin() as conn:
                await conn.exec_driver_sql(f"DROP TABLE {orders}")
            await engine.dispose()
            await store.aclose()

    assert asyncio.run(scenario()) == 1


def test_an_async_store_failure_at_each_own_write_never_runs_a_step_twice(some: Opened) -> None:
    store: Any = some.store
    guard, scope = Guard(store, lease=30), f"apay-{uuid.uuid4().hex[:6]}"
    runs: list[str] = []

    @guard.step("mark_paid")
    async def mark_paid(order: str) -> str:
        runs.append(f"mark_paid:{order}")
        return "paid"

    @guard.operation(scope, key="{order}")
    async def pay(order: str) -> str:
        return await mark_paid(order)

    async def scenario() -> None:
        try:
            failing_once(store, "abegin_steps")
            with pytest.raises(StoreUnavailableError):
                await pay("o1")
            assert runs == []
            assert await pay("o1") == "paid"
            failing_once(store, "arecord_step")
            with pytest.raises(StoreUnavailableError):
                await pay("o2")
            assert await pay("o2") == "paid"
            failing_once(store, "aclear_steps")
            assert await pay("o3") == "paid"
            assert await pay("o3") == "paid"
            assert await guard.apending() == []
            planned = await guard.areconcile(plan=True, min_age=0)
            assert [(r.key, r.outcome) for r in planned] == [("o3", "would_clear")]
            assert len(await store.aoperations()) == 1
            assert [(r.key, r.outcome) for r in await guard.areconcile(min_age=0)] == [
                ("o3", "cleared")
            ]
            assert await store.aoperations() == []
        finally:
            await store.aclose()

    asyncio.run(scenario())
    assert runs == ["mark_paid:o1", "mark_paid:o2", "mark_paid:o2", "mark_paid:o3"]
