"""The durable deleted under a live consumer: it is created again, after the ack floor it was
last seen at, and consuming goes on (a deleted durable answers no fetch, and the consumer
used to poll it for good); with its stream deleted too, consume ends with a clear error."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.helpers.storm import wait_for
from tests.messaging.base.broker import until
from tests.messaging.nats.broker import JetStream
from tests.messaging.nats.test_consume import Seen

pytestmark = pytest.mark.slow

FIRST = [f"order:{n}" for n in range(4)]
LATER = [f"order:{n}" for n in range(4, 8)] + ["order:4"]  # one published twice


async def delete_durable(side: JetStream) -> None:
    await side.jetstream_call("delete_consumer", side.names.stream, side.names.durable)


async def publish(side: JetStream, keys: list[str]) -> None:
    await asyncio.to_thread(side.publish, [(key, b"{}") for key in keys])


async def until_acked(side: JetStream) -> None:
    await asyncio.to_thread(wait_for, side.settled, 20, "nothing pending or unacked")


class Runs:
    """A consumer over one store, counting the handler's runs per key."""

    def __init__(self) -> None:
        self.counted: Counter[str] = Counter()
        self.store = MemoryStore()

    def consumer(self) -> Seen:
        return Seen(IdempotentConsumer(Guard(self.store), "stock", self.handler))

    def handler(self, message: Message) -> None:
        self.counted.update([message.headers["idempotency-key"]])


async def consumed_and_stopped(side: JetStream, runs: Runs, keys: list[str]) -> None:
    """Publish ``keys``, consume until they are all acked, stop."""
    stop = asyncio.Event()
    task = asyncio.create_task(side.consume(runs.consumer(), stop))
    await publish(side, keys)
    await until_acked(side)
    stop.set()
    await asyncio.wait_for(task, 10)


def recreations(caplog: pytest.LogCaptureFixture) -> int:
    return sum(
        getattr(r, "mideng_outcome", None) == "durable_created_again" for r in caplog.records
    )


def test_a_durable_deleted_under_a_live_consumer_is_created_again_and_consumed(
    nats_side: JetStream, caplog: pytest.LogCaptureFixture
) -> None:
    runs = Runs()

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(nats_side.consume(runs.consumer(), stop))
        await publish(nats_side, FIRST)
        await until(lambda: len(runs.counted) == 4)
        await until_acked(nats_side)
        await delete_durable(nats_side)
        await publish(nats_side, LATER)
        await until(lambda: len(runs.counted) == 8)
        await until_acked(nats_side)
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, 10)

    with caplog.at_level(logging.WARNING, logger="mideng"):
        asyncio.run(scenario())
    assert runs.counted == Counter(f"order:{n}" for n in range(8))
    assert recreations(caplog) == 1


def test_a_durable_created_again_starts_after_the_ack_floor_it_was_seen_at(
    nats_side: JetStream,
) -> None:
    """From the stream's start, the acked messages were handed out again, and only their
    records (for as long as those last) kept them from running again."""
    runs = Runs()
    restarted = runs.consumer()

    async def scenario() -> None:
        await consumed_and_stopped(nats_side, runs, FIRST)
        # Restarted, the consumer sees the durable's ack floor (past the first four) at once.
        stop = asyncio.Event()
        task = asyncio.create_task(nats_side.consume(restarted, stop))
        await asyncio.to_thread(wait_for, lambda: pulling(nats_side), 20, "a fetch waiting")
        await delete_durable(nats_side)
        await publish(nats_side, LATER)
        await until(lambda: len(runs.counted) == 8)
        await until_acked(nats_side)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert [m.headers["idempotency-key"] for m in restarted.messages] == LATER


def test_a_stream_deleted_and_made_again_has_its_durable_created_from_its_start(
    nats_side: JetStream,
) -> None:
    """The new stream's sequences start over, below the floor the durable was last seen at:
    started after that floor, the durable skipped the new stream's first messages."""
    runs = Runs()
    names = nats_side.names

    async def make_again() -> None:
        await nats_side.jetstream_call("delete_stream", names.stream)
        await nats_side.jetstream_call("add_stream", name=names.stream, subjects=nats_side.subjects)
        await publish(nats_side, LATER)

    def handler(message: Message) -> None:
        runs.handler(message)
        if message.headers["idempotency-key"] == "order:trigger":
            # While the consumer waits for this handler, so it can't look in between.
            asyncio.run(make_again())

    async def scenario() -> None:
        await consumed_and_stopped(nats_side, runs, FIRST)
        # Restarted, the consumer sees the durable's floor past the first four at once.
        await publish(nats_side, ["order:trigger"])
        consumer = IdempotentConsumer(Guard(runs.store), "stock", handler)
        stop = asyncio.Event()
        task = asyncio.create_task(nats_side.consume(consumer, stop))
        await until(lambda: len(runs.counted) == 9)
        await until_acked(nats_side)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert runs.counted == Counter([f"order:{n}" for n in range(8)] + ["order:trigger"])


def pulling(side: JetStream) -> bool:
    info = side.info()
    return info is not None and info.num_waiting > 0


def test_a_stream_deleted_under_a_live_consumer_ends_consume_with_a_clear_error(
    nats_side: JetStream,
) -> None:
    runs = Runs()

    async def scenario() -> None:
        task = asyncio.create_task(nats_side.consume(runs.consumer(), asyncio.Event()))
        await publish(nats_side, ["order:1"])
        await until(lambda: len(runs.counted) == 1)
        await nats_side.jetstream_call("delete_stream", nats_side.names.stream)
        await asyncio.wait_for(task, 10)

    with pytest.raises(ConfigurationError, match="does not exist"):
        asyncio.run(scenario())
