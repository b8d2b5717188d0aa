"""The RabbitMQ adapter against a real broker, beyond the base suite: a poison message tried
N times goes to the queue's own DLX, the queue is declared durable when missing, a failed
ack loses nothing; and ``consume_through``, the disruption scenario of the channel and
consumer-cancel tests."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aio_pika
import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, rabbitmq
from mideng.messaging.reconnect import Backoff
from mideng.stores.memory import MemoryStore
from tests.brokers import AMQP_URL, BrokerNames
from tests.messaging.rabbitmq.broker import publish, ready
from tests.messaging.running import consume_until


async def consume_through(
    consumer: IdempotentConsumer,
    queue: str,
    runs: Counter[str],
    disrupt: Callable[[], Awaitable[bool]],
    keys: tuple[Sequence[str], Sequence[str]],
) -> None:
    """Publish the first ``keys`` and consume ``queue`` until each ran and none is ready; then
    ``disrupt()`` until it answers that it is done, publish the later ``keys``, and consume
    until every key of both ran and none is ready. Reconnects are quick."""
    first, later = keys
    await publish(queue, *first)
    published_later = False

    async def through() -> bool:
        nonlocal published_later
        if not published_later:
            if len(runs) < len(set(first)) or await ready(queue) or not await disrupt():
                return False
            await publish(queue, *later)
            published_later = True
            return False
        return len(runs) == len({*first, *later}) and await ready(queue) == 0

    await consume_until(
        lambda stop: rabbitmq.consume(
            consumer, AMQP_URL, queue=queue, stop=stop, reconnect=Backoff(0.01, 0.05)
        ),
        through,
    )


def test_a_poison_message_is_tried_n_times_then_goes_to_the_queues_dlx(
    broker_names: BrokerNames,
) -> None:
    queue, dlx = broker_names.rabbitmq_queue(), broker_names.rabbitmq_exchange()
    parked = broker_names.rabbitmq_queue("parked")
    tries: list[str] = []

    def handler(message: Message) -> None:
        tries.append(message.headers["idempotency-key"])
        if message.headers["idempotency-key"] == "order:poison":
            raise ValueError("cannot parse")

    consumer = IdempotentConsumer(
        Guard(MemoryStore()), "stock", handler, max_attempts=3, retry_delay=0.05
    )

    async def scenario() -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(dlx, aio_pika.ExchangeType.FANOUT)
            sink = await channel.declare_queue(parked, durable=True)
            await sink.bind(exchange)
            # The operator's queue, with its dead-letter exchange: used as it is.
            await channel.declare_queue(
                queue, durable=True, arguments={"x-dead-letter-exchange": dlx}
            )
        await publish(queue, "order:poison", "order:good", declare=False)

        async def done() -> bool:
            return await ready(parked) == 1 and "order:good" in tries

        await consume_until(
            lambda stop: rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=stop), done
        )

    asyncio.run(scenario())
    assert tries.count("order:poison") == 3
    assert tries.count("order:good") == 1


def test_a_missing_queue_is_declared_durable(broker_names: BrokerNames) -> None:
    queue = broker_names.rabbitmq_queue()
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", lambda m: None)

    async def scenario() -> None:
        async def declared() -> bool:
            try:
                await ready(queue)
            except Exception:
                return False
            return True

        await consume_until(
            lambda stop: rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=stop), declared
        )
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            # Re-declaring with durable=True only succeeds if it is durable already.
            await channel.declare_queue(queue, durable=True)
            other = await connection.channel()
            with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
                await other.declare_queue(queue, durable=False)

    asyncio.run(scenario())


def test_a_failed_ack_loses_nothing_and_the_redelivery_is_not_run_again(
    broker_names: BrokerNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = broker_names.rabbitmq_queue()
    seen: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", seen.append)
    real = aio_pika.IncomingMessage.ack
    failures = [ConnectionError("connection reset by peer")]
    acked: list[bool] = []

    async def flaky(self: Any, multiple: bool = False) -> None:
        if failures:
            raise failures.pop()
        await real(self, multiple)
        acked.append(True)

    monkeypatch.setattr(aio_pika.IncomingMessage, "ack", flaky)

    async def scenario() -> None:
        await publish(queue, "order:1")

        def run(stop: asyncio.Event) -> Any:
            return rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=stop)

        async def settled() -> bool:
            return bool(acked)

        # The ack fails and consume goes on: it connects again, the broker redelivers what
        # the closed connection held, and the consumer's record acks it without running.
        await consume_until(run, settled)
        assert await ready(queue) == 0

    asyncio.run(scenario())
    assert not failures
    assert len(seen) == 1
