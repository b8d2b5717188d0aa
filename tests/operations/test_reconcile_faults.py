"""Reconcile under faults: a store error in one pass, or at one operation, never stops the
reconciling of the others; and an operation is run again under the key it was stored under,
whatever key its rebuilt arguments would render."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mideng import Guard, Status
from mideng.operations import areconcile_forever, reconcile_forever
from mideng.stores.memory import MemoryStore
from tests.backends import Ctx, Opened
from tests.operations.processes import failing_once, open_backend, until


class Down(Exception):
    pass


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def some(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend(request.param, ctx)


def _unfinished(guard: Guard, scope: str) -> tuple[Any, list[str]]:
    """A sync operation whose step failed once: released, left for reconcile."""
    runs: list[str] = []
    down = [True]

    @guard.step("ship")
    def ship(order: str) -> str:
        runs.append(order)
        if down[0]:
            raise Down("carrier down")
        return f"shipped {order}"

    @guard.operation(scope, key="{order}")
    def deliver(order: str) -> str:
        return ship(order)

    with pytest.raises(Down):
        deliver("o1")
    down[0] = False
    return deliver, runs


def test_reconcile_forever_outlives_a_failed_pass() -> None:
    store = MemoryStore()
    guard, scope = Guard(store, lease=30), f"deliver-{uuid.uuid4().hex[:6]}"
    _, runs = _unfinished(guard, scope)
    failed = failing_once(store, "operations")
    stop = threading.Event()
    worker = threading.Thread(
        target=reconcile_forever, args=(guard, 0.01), kwargs={"stop": stop, "min_age": 0}
    )
    worker.start()
    try:
        until(lambda: len(failed) >= 1, 10)  # the worker's first pass met the failure
        until(lambda: guard.pending() == [] or not worker.is_alive(), 10)
        assert worker.is_alive()  # the worker goes on after the pass that failed
        assert guard.pending() == []
        assert len(failed) >= 2
        assert runs == ["o1", "o1"]
    finally:
        stop.set()
        worker.join(10)


def test_areconcile_forever_outlives_a_failed_pass() -> None:
    store = MemoryStore()
    guard, scope = Guard(store, lease=30), f"deliver-{uuid.uuid4().hex[:6]}"
    _, runs = _unfinished(guard, scope)
    failed = failing_once(store, "aoperations")

    async def scenario() -> None:
        loop = asyncio.create_task(areconcile_forever(guard, 0.01, min_age=0))
        try:
            for _ in range(1000):
                # The task's first pass meets the failure; the pending() here comes after.
                if failed and (guard.pending() == [] or loop.done()):
                    break
                await asyncio.sleep(0.01)
            assert not loop.done()  # the task goes on after the pass that failed
            assert guard.pending() == []
        finally:
            loop.cancel()
            with pytest.raises(asyncio.CancelledError):
                await loop

    asyncio.run(scenario())
    assert len(failed) >= 2
    assert runs == ["o1", "o1"]


def _boxed(some: Opened) -> tuple[Any, Guard, list[str]]:
    """An operation left released (deliver's o1) and one completed whose kept steps stayed
    behind (box's b1: the drop failed once); the store, the guard and deliver's runs."""
    store: Any = some.store
    guard, scope = Guard(store, lease=30), f"deliver-{uuid.uuid4().hex[:6]}"
    _, runs = _unfinished(guard, scope)

    @guard.step("pack")
    def pack(order: str) -> str:
        return f"packed {order}"

    @guard.operation(f"{scope}-b", key="{order}")
    def box(order: str) -> str:
        return pack(order)

    failing_once(store, "clear_steps")
    assert box("b1") == "packed b1"
    return store, guard, runs


def test_a_failed_clear_leaves_the_other_operations_reconciled(some: Opened) -> None:
    store, guard, runs = _boxed(some)
    # box completes but its kept steps stay behind (the drop failed), then the next drop fails
    # again in reconcile's pass: deliver's reconciling must not be lost to it.
    failing_once(store, "clear_steps")
    report = {r.key: r.outcome for r in guard.reconcile(min_age=0)}
    assert report == {"b1": "failed", "o1": "finished"}
    assert runs == ["o1", "o1"]
    assert [(r.key, r.outcome) for r in guard.reconcile(min_age=0)] == [("b1", "cleared")]
    assert guard.pending() == []


def test_areconcile_twin_of_a_failed_clear(some: Opened) -> None:
    store, guard, runs = _boxed(some)

    async def scenario() -> dict[str, str]:
        failing_once(store, "aclear_steps")
        try:
            return {r.key: r.outcome for r in await guard.areconcile(min_age=0)}
        finally:
            await store.aclose()

    assert asyncio.run(scenario()) == {"b1": "failed", "o1": "finished"}
    assert runs == ["o1", "o1"]


def test_reconcile_runs_an_operation_under_its_stored_key(some: Opened) -> None:
    guard, scope = Guard(some.store, lease=30), f"refund-{uuid.uuid4().hex[:6]}"
    runs: list[str] = []
    down = [True]

    @guard.step("credit")
    def credit(order: str, amount: float) -> float:
        runs.append(f"credit {order} {amount}")
        return amount

    @guard.step("notify")
    def notify(order: str) -> str:
        runs.append(f"notify {order}")
        if down[0]:
            raise Down("sms down")
        return "sent"

    # An int where a float is declared: its key is "o1:10"; the stored argument comes back
    # as the declared float, whose key would be "o1:10.0", another operation.
    @guard.operation(scope, key="{order}:{amount}")
    def refund(order: str, amount: float) -> str:
        credit(order, amount)
        return notify(order)

    with pytest.raises(Down):
        refund("o1", 10)
    down[0] = False
    assert [(r.key, r.outcome) for r in guard.reconcile(min_age=0)] == [("o1:10", "finished")]
    assert runs == ["credit o1 10", "notify o1", "notify o1"]  # credited once
    record = guard.get(scope, "o1:10")
    assert record is not None
    assert record.status is Status.SUCCEEDED
    assert guard.get(scope, "o1:10.0") is None
    assert guard.pending() == []
