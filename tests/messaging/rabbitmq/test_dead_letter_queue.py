"""The dead-letter queue an operator made is used as it is, and a copy the broker refuses
leaves the message requeued, never acked without it, while the consumer goes on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aio_pika
import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, rabbitmq
from mideng.stores.memory import MemoryStore
from tests.brokers import AMQP_URL, BrokerNames
from tests.messaging.rabbitmq.test_adapter import publish, ready
from tests.messaging.running import consume_until


async def declare(name: str, arguments: dict[str, Any]) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(name, durable=True, arguments=arguments)


def test_an_operators_quorum_dead_letter_queue_is_used_as_it_is(
    broker_names: BrokerNames,
) -> None:
    """Declared again with no arguments, the broker refused it (PRECONDITION_FAILED) and
    closed the channel: every session failed at its start and nothing was consumed."""
    queue, dlq = broker_names.rabbitmq_queue(), broker_names.rabbitmq_queue("dead")
    seen: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", seen.append)

    async def scenario() -> None:
        await declare(dlq, {"x-queue-type": "quorum"})
        await publish(queue, "order:1", None)

        async def done() -> bool:
            return len(seen) == 1 and await ready(queue) == 0 and await ready(dlq) == 1

        await consume_until(
            lambda stop: rabbitmq.consume(
                consumer, AMQP_URL, queue=queue, stop=stop, dead_letter_queue=dlq
            ),
            done,
        )

    asyncio.run(scenario())


def test_a_dead_letter_copy_the_broker_refuses_requeues_the_message_and_consume_goes_on(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    """The dead-letter queue holds nothing and refuses what it can't hold: the broker nacks
    the copy. The message is requeued (not acked, not lost) and dead-lettered again later;
    consume does not end (the refusal escaped it, and every restart met it again)."""
    queue, dlq = broker_names.rabbitmq_queue(), broker_names.rabbitmq_queue("dead")
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", lambda message: None)
    caplog.set_level(logging.ERROR, logger="mideng")

    def refusals() -> int:
        return sum(
            getattr(r, "mideng_outcome", None) == "dead_letter_failed" for r in caplog.records
        )

    async def scenario() -> None:
        await declare(dlq, {"x-max-length": 0, "x-overflow": "reject-publish"})
        await publish(queue, None)

        async def refused_twice() -> bool:  # requeued, delivered again, refused again
            return refusals() >= 2

        await consume_until(
            lambda stop: rabbitmq.consume(
                consumer, AMQP_URL, queue=queue, stop=stop, dead_letter_queue=dlq
            ),
            refused_twice,
        )
        assert await ready(dlq) == 0
        assert await ready(queue) == 1  # given back on stop: still there to be dead-lettered

    asyncio.run(scenario())
