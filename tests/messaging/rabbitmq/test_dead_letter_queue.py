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
from tests.messaging.rabbitmq.broker import publish, ready
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


def test_a_dead_letter_copy_returned_unroutable_is_not_counted_and_lands_once_declared(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    """The dead-letter queue deleted under a live consumer: the copy is unroutable and the
    broker returns it. That is a failure, like a nack: the message is requeued, not acked,
    the queue declared again as at the start, and the next copy lands. Before, the return
    was taken as published and the message acked: its only copy went nowhere."""
    queue, dlq = broker_names.rabbitmq_queue(), broker_names.rabbitmq_queue("dead")
    runs: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", runs.append)
    caplog.set_level(logging.ERROR, logger="mideng")

    def returned() -> int:
        errors = [r.exc_info[1] for r in caplog.records if r.exc_info]
        return sum(isinstance(e, aio_pika.exceptions.PublishError) for e in errors)

    async def scenario() -> None:
        await publish(queue, "order:1")
        dlq_deleted = False

        async def copy_landed() -> bool:
            nonlocal dlq_deleted
            if not dlq_deleted:
                if not runs:  # consuming: the dead-letter queue was declared at the start
                    return False
                await delete_queue(dlq)
                dlq_deleted = True
                await publish(queue, None)  # keyless: dead-lettered at once
                return False
            return returned() >= 1 and await ready(queue) == 0 and await ready(dlq) == 1

        await consume_until(
            lambda stop: rabbitmq.consume(
                consumer, AMQP_URL, queue=queue, stop=stop, dead_letter_queue=dlq
            ),
            copy_landed,
        )
        assert await ready(dlq) == 1  # one copy: the returned one is not counted twice

    asyncio.run(scenario())
    assert [m.headers["idempotency-key"] for m in runs] == ["order:1"]


async def delete_queue(name: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(name)
