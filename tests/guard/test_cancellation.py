"""An async guarded call cancelled at each of its awaits: the body never runs twice for a key.

The task is cancelled (``Task.cancel()``, or an ``asyncio.timeout`` running out) while it waits
at a store gated in tests/guard/gates.py: at the claim, in the body, at the completion, at the
settling of a failure. What the record says afterwards, and what the next call does, is
checked on the memory store and on Redis and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from mideng import Guard
from mideng.core.record import Status
from mideng.errors import InProgressError
from mideng.guard.heartbeat import tasks as heartbeat_tasks
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from tests.backends import Ctx, by_name, opened_store
from tests.guard.gates import cancel_at, gate, gate_class, run_closing
from tests.services import need


@pytest.fixture(params=["memory", "redis", "postgresql"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


class Body:
    """An async body counting its runs; ``hold`` set: each run waits until it is let go."""

    def __init__(self, result: Any = "done", error: Exception | None = None) -> None:
        self.runs = 0
        self.result, self.error = result, error
        self.hold: asyncio.Event | None = None
        self.inside = asyncio.Event()

    async def __call__(self) -> Any:
        self.runs += 1
        self.inside.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.error is not None:
            raise self.error
        return self.result


def _beats() -> int:
    return len(heartbeat_tasks._loop_beats().beats)


def test_cancelled_at_the_completion_the_result_is_stored(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body()
        stop = gate(store, "acomplete")
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        record = await guard.aget("s", "k")
        assert record is not None
        assert record.status is Status.SUCCEEDED
        assert await guard.arun("s", "k", body) == "done"  # replayed
        assert body.runs == 1
        assert _beats() == 0

    run_closing(store, scenario)


def test_cancelled_in_flight_at_the_completion_the_result_is_stored(store: Store) -> None:
    """The completion landed, its answer was cut off: done again, it changes nothing."""

    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body()
        stop = gate(store, "acomplete", before=False)
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        assert await guard.arun("s", "k", body) == "done"
        assert body.runs == 1

    run_closing(store, scenario)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11's")
def test_a_timeout_at_the_completion_stores_the_result_and_is_a_timeout(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body()
        stop = gate(store, "acomplete")
        if sys.version_info >= (3, 11):  # (for mypy, which checks against 3.10)
            timeouts: list[asyncio.Timeout] = []

            async def caller() -> None:
                async with asyncio.timeout(None) as timeout:
                    timeouts.append(timeout)
                    await guard.arun("s", "k", body)

            task = asyncio.create_task(caller())
            await stop.reached.wait()
            timeouts[0].reschedule(asyncio.get_running_loop().time())
            with pytest.raises(TimeoutError):
                await task
        assert await guard.arun("s", "k", body) == "done"
        assert body.runs == 1

    run_closing(store, scenario)


def test_cancelled_again_while_the_completion_is_done_again_it_still_lands() -> None:
    store = MemoryStore()

    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body()
        stop = gate(store, "acomplete", times=2)
        task = asyncio.create_task(guard.arun("s", "k", body))
        await stop.reached.wait()
        task.cancel()
        await asyncio.sleep(0)  # the cancellation arrives; the completion is asked again
        for _ in range(100):
            if stop.calls == 2:
                break
            await asyncio.sleep(0)
        assert stop.calls == 2, "the completion was not asked again"
        for _ in range(3):
            task.cancel()
            await asyncio.sleep(0)
        assert not task.done()  # waits for its completion, however often it is cancelled
        stop.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await guard.arun("s", "k", body) == "done"
        assert body.runs == 1

    run_closing(store, scenario)


def test_after_a_cancelled_completion_no_take_over_runs_the_body_again() -> None:
    """Left processing, the record would be taken over once the lease ran out."""
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])

    async def scenario() -> None:
        guard = Guard(store, lease=10, heartbeat=False)
        body = Body()
        stop = gate(store, "acomplete")
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        now[0] += 60
        assert await guard.arun("s", "k", body) == "done"
        assert body.runs == 1

    run_closing(store, scenario)


def test_cancelled_in_the_body_the_key_is_released_and_its_beat_stopped(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body()
        body.hold = asyncio.Event()
        task = asyncio.create_task(guard.arun("s", "k", body))
        await body.inside.wait()
        assert _beats() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _beats() == 0
        assert await guard.aget("s", "k") is None  # released: the documented rule
        body.hold = None
        assert await guard.arun("s", "k", body) == "done"
        assert body.runs == 2

    run_closing(store, scenario)


def test_cancelled_again_during_the_release_the_key_is_still_released(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body()
        body.hold = asyncio.Event()
        stop = gate(store, "arelease")
        task = asyncio.create_task(guard.arun("s", "k", body))
        await body.inside.wait()
        task.cancel()
        await cancel_at(task, stop)
        assert await guard.aget("s", "k") is None
        assert _beats() == 0

    run_closing(store, scenario)


def test_cancelled_while_a_failure_is_recorded_it_is_recorded(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60, on_error="record")
        body = Body(error=ValueError("declined"))
        stop = gate(store, "afail")
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        record = await guard.aget("s", "k")
        assert record is not None
        assert record.status is Status.FAILED
        with pytest.raises(ValueError, match="declined"):
            await guard.arun("s", "k", body)
        assert body.runs == 1

    run_closing(store, scenario)


def test_cancelled_while_an_unstorable_result_is_recorded_it_is_recorded(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body(result=object())
        stop = gate(store, "afail")
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        record = await guard.aget("s", "k")
        assert record is not None
        assert record.status is Status.FAILED
        assert body.runs == 1

    run_closing(store, scenario)


def test_cancelled_before_the_claim_is_asked_nothing_is_held(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        body = Body()
        stop = gate(store, "aclaim")
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        assert await guard.aget("s", "k") is None
        assert body.runs == 0
        assert _beats() == 0

    run_closing(store, scenario)


def test_a_claim_cut_short_after_it_landed_is_given_back(store: Store) -> None:
    """Under ``on_expiry="unknown"`` a claim left behind would never expire: the next call
    would find it held, then (its lease run out) UNKNOWN, though the body never ran."""

    async def scenario() -> None:
        guard = Guard(store, lease=60, on_expiry="unknown")
        body = Body()
        stop = gate(store, "aclaim", before=False)
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        assert body.runs == 0
        assert await guard.aget("s", "k") is None
        assert await guard.arun("s", "k", body) == "done"
        assert body.runs == 1

    run_closing(store, scenario)


def test_a_claim_cut_short_gives_back_only_its_own() -> None:
    """Another caller's claim, live when the cancelled one's answer came, stays its own."""
    store = MemoryStore()

    async def scenario() -> None:
        guard = Guard(store, lease=60)
        first = Body()
        first.hold = asyncio.Event()
        holder = asyncio.create_task(guard.arun("s", "k", first))
        await first.inside.wait()
        stop = gate(store, "aclaim", before=False)
        await cancel_at(asyncio.create_task(guard.arun("s", "k", Body())), stop)
        with pytest.raises(InProgressError):
            await guard.arun("s", "k", Body())
        first.hold.set()
        assert await holder == "done"

    run_closing(store, scenario)


@pytest.mark.parametrize("where", ["acomplete", "aclaim", "afail"])
def test_with_metrics_on_a_cancelled_call_settles_alike(
    where: str, ctx: Ctx, registry: Any
) -> None:
    """Metrics on, the call's store operations go through the counted store: cancelled at
    each of them, the call ends as it does with metrics off."""
    need("redis")
    store = by_name("redis").make(ctx).store
    stop = gate_class(store, where, before=where != "aclaim")

    async def scenario() -> None:
        guard = Guard(store, lease=60, on_error="record")
        body = Body(error=ValueError("declined") if where == "afail" else None)
        await cancel_at(asyncio.create_task(guard.arun("s", "k", body)), stop)
        record = await guard.aget("s", "k")
        if where == "aclaim":
            assert record is None
            assert body.runs == 0
            return
        assert record is not None
        assert record.status is (Status.FAILED if where == "afail" else Status.SUCCEEDED)
        assert body.runs == 1

    try:
        run_closing(store, scenario)
    finally:
        store.close()
