"""The broker cancels the consumer when its queue is deleted: the adapter notices, declares
the queue again as at its start and consumes on (it used to wait for deliveries for good,
with only aiormq's warning in the log). The queue is deleted, and declared again as an
operator would, while the consumer waits and while a handler runs; every key published
afterwards runs once."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter

import aio_pika
import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.brokers import AMQP_URL, BrokerNames
from tests.messaging.rabbitmq.broker import declared, ready
from tests.messaging.rabbitmq.test_adapter import consume_through

KEY = "idempotency-key"
FIRST = [f"order:{n}" for n in range(4)]
LATER = [f"order:{n}" for n in range(4, 8)] + ["order:4"]  # one published twice


async def delete_and_declare(queue: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(queue)
        await channel.declare_queue(queue, durable=True)


async def consumers(queue: str) -> int:
    return int((await declared(queue)).consumer_count or 0)


def cancellations(caplog: pytest.LogCaptureFixture) -> int:
    return sum(getattr(r, "mideng_outcome", None) == "consumer_cancelled" for r in caplog.records)


@pytest.mark.parametrize("deleted", ["while waiting", "while a handler runs"])
def test_a_queue_deleted_and_declared_again_is_consumed_again(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture, deleted: str
) -> None:
    queue = broker_names.rabbitmq_queue()
    runs: Counter[str] = Counter()
    replaced = threading.Event()  # the queue deleted and declared again

    def handler(message: Message) -> None:
        runs.update([message.headers[KEY]])
        if deleted == "while a handler runs" and len(runs) == len(FIRST):
            asyncio.run(delete_and_declare(queue))  # this message's ack is still to be sent
            replaced.set()

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)

    async def replace_queue() -> bool:
        if deleted == "while waiting" and await consumers(queue):
            await delete_and_declare(queue)
            replaced.set()
        return replaced.is_set()

    async def scenario() -> None:
        await consume_through(consumer, queue, runs, replace_queue, (FIRST, LATER))
        assert await ready(queue) == 0

    with caplog.at_level(logging.WARNING, logger="mideng"):
        asyncio.run(scenario())
    assert runs == Counter(f"order:{n}" for n in range(8))
    assert cancellations(caplog) == 1
