"""A consumer's task cancelled mid-message or mid-batch (a consumer stopped, a service shutting
down): no message is lost, and no handler runs twice for a key when the broker redelivers.

The store stops at a chosen await (tests/guard/gates.py) or the handler waits on an event, and
the task deciding the message is cancelled there; then the messages are delivered again.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from mideng import Guard
from mideng.core.record import Status
from mideng.messaging import Ack, IdempotentConsumer, Message, Retry
from mideng.stores.base import Store
from tests.backends import Ctx, opened_store
from tests.guard.gates import cancel_at, gate, run_closing


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


def msg(key: str) -> Message:
    return Message(b"{}", {"idempotency-key": key}, id=f"m-{key}")


class Handler:
    """An async handler counting the runs that finished, per key; ``hold``: keys whose run
    waits (``inside`` is set) until ``go`` is set."""

    def __init__(self, *hold: str) -> None:
        self.finished: dict[str, int] = {}
        self.hold = set(hold)
        self.inside = asyncio.Event()
        self.go = asyncio.Event()

    async def __call__(self, message: Message) -> None:
        key = message.headers["idempotency-key"]
        if key in self.hold:
            self.inside.set()
            await self.go.wait()
        self.finished[key] = self.finished.get(key, 0) + 1


async def _status(guard: Guard, key: str) -> Status | None:
    record = await guard.aget("stock", key)
    return None if record is None else record.status


def test_cancelled_at_the_completion_the_redelivery_is_acked_unrun(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        handler = Handler()
        consumer = IdempotentConsumer(guard, "stock", handler)
        stop = gate(store, "acomplete")
        await cancel_at(asyncio.create_task(consumer.handle(msg("order:1"))), stop)
        assert await _status(guard, "order:1") is Status.SUCCEEDED
        assert await consumer.handle(msg("order:1")) == Ack(ran=False)
        assert handler.finished == {"order:1": 1}

    run_closing(store, scenario)


def test_cancelled_after_its_claim_landed_the_key_is_given_back(store: Store) -> None:
    """The claim landed and its answer was cut short by the cancellation: the key is given
    back at once (not left held for the lease), and the redelivery runs the handler."""

    async def scenario() -> None:
        guard = Guard(store, lease=60)
        handler = Handler()
        consumer = IdempotentConsumer(guard, "stock", handler)
        stop = gate(store, "aclaim", before=False)
        await cancel_at(asyncio.create_task(consumer.handle(msg("order:1"))), stop)
        assert await _status(guard, "order:1") is None
        assert handler.finished == {}
        assert await consumer.handle(msg("order:1")) == Ack(ran=True)
        assert handler.finished == {"order:1": 1}

    run_closing(store, scenario)


def test_cancelled_at_a_batch_completion_the_redeliveries_are_acked_unrun(store: Store) -> None:
    async def scenario() -> None:
        guard = Guard(store, lease=60)
        handler = Handler()
        consumer = IdempotentConsumer(guard, "stock", handler)
        stop = gate(store, "acomplete_many")
        batch = [msg("order:1"), msg("order:2"), msg("order:3")]
        await cancel_at(asyncio.create_task(consumer.handle_batch(batch)), stop)
        for n in (1, 2, 3):
            assert await _status(guard, f"order:{n}") is Status.SUCCEEDED
        assert await consumer.handle_batch(batch) == [Ack(ran=False)] * 3
        assert handler.finished == {"order:1": 1, "order:2": 1, "order:3": 1}

    run_closing(store, scenario)


def test_a_batch_cancelled_mid_way_completes_what_ran(store: Store) -> None:
    """Cancelled in its second handler: the first ran, and is completed; the second and the
    third are given back, so their redeliveries run them at once."""

    async def scenario() -> None:
        guard = Guard(store, lease=60)
        handler = Handler("order:2")
        consumer = IdempotentConsumer(guard, "stock", handler)
        batch = [msg("order:1"), msg("order:2"), msg("order:3")]
        task = asyncio.create_task(consumer.handle_batch(batch))
        await handler.inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _status(guard, "order:1") is Status.SUCCEEDED
        assert await _status(guard, "order:2") is None
        assert await _status(guard, "order:3") is None
        handler.hold.clear()
        assert await consumer.handle_batch(batch) == [Ack(ran=False), Ack(ran=True), Ack(ran=True)]
        assert handler.finished == {"order:1": 1, "order:2": 1, "order:3": 1}

    run_closing(store, scenario)


class Blocking:
    """A ``def`` handler (run in a thread) whose first run waits on a threading event."""

    def __init__(self) -> None:
        self.runs = self.finished = 0
        self.started = threading.Event()
        self.go = threading.Event()

    def __call__(self, message: Message) -> None:
        self.runs += 1
        if self.runs == 1:
            self.started.set()
            assert self.go.wait(30)
        self.finished += 1


@pytest.mark.parametrize("batched", [False, True])
def test_a_def_handler_cancelled_in_its_thread_is_not_run_beside_itself(
    store: Store, batched: bool
) -> None:
    """A thread can't be cancelled: the handler runs on. Released while it did, the key would
    let the redelivery run the handler a second time, beside the first."""

    async def scenario() -> None:
        guard = Guard(store, lease=60)
        handler = Blocking()
        consumer = IdempotentConsumer(guard, "stock", handler, in_flight_delay=0.05)
        batch = [msg("order:1"), msg("order:2")]
        task: asyncio.Task[Any] = asyncio.create_task(
            consumer.handle_batch(batch) if batched else consumer.handle(batch[0])
        )
        await asyncio.to_thread(handler.started.wait, 30)
        task.cancel()
        # The task waits for its thread (a consumer that let go of the key here would be done
        # at once): bounded, since without the wait it ends within a round trip.
        await asyncio.wait({task}, timeout=0.5)
        copy = await consumer.handle(msg("order:1"))  # redelivered while the thread runs
        assert isinstance(copy, Retry)  # in flight: not run a second time
        handler.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert handler.finished == 1
        assert await _status(guard, "order:1") is Status.SUCCEEDED
        assert await consumer.handle(msg("order:1")) == Ack(ran=False)
        if batched:  # not started: given back, runs at once
            assert await _status(guard, "order:2") is None
        assert handler.finished == 1

    run_closing(store, scenario)
