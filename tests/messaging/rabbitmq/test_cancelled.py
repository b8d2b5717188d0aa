"""The RabbitMQ adapter's task cancelled (not stopped) after its handlers ran, while their
completion was written: the broker requeues the unacked deliveries, and the next consume acks
them without running the handlers again."""

from __future__ import annotations

import asyncio

import pytest

from mideng import Guard
from mideng.core.record import Status
from mideng.messaging import IdempotentConsumer, Message, rabbitmq
from mideng.stores.memory import MemoryStore
from tests.brokers import AMQP_URL, BrokerNames
from tests.guard.gates import cancelled_at_completion
from tests.messaging.rabbitmq.test_adapter import publish, ready
from tests.messaging.running import consume_until


@pytest.mark.parametrize("count", [1, 3])
def test_a_consume_cancelled_at_the_completion_runs_nothing_twice(
    broker_names: BrokerNames, count: int
) -> None:
    queue = broker_names.rabbitmq_queue()
    store = MemoryStore()
    runs: list[str] = []

    def handler(message: Message) -> None:
        runs.append(message.headers["idempotency-key"])

    consumer = IdempotentConsumer(Guard(store, lease=60), "stock", handler)
    keys = [f"order:{n}" for n in range(count)]

    async def scenario() -> None:
        await publish(queue, *keys)
        # One delivery, or a batch of those that arrived: cancelled at the first completion.
        await cancelled_at_completion(
            store,
            rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=asyncio.Event(), prefetch=10),
        )
        ran = list(runs)
        assert ran  # the handlers in hand ran once, their deliveries went back unacked

        async def drained() -> bool:
            done = [store.get("stock", key) for key in keys]
            finished = all(r is not None and r.status is Status.SUCCEEDED for r in done)
            return finished and await ready(queue) == 0

        await consume_until(
            lambda stop: rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=stop), drained
        )
        assert await ready(queue) == 0  # acked, none waiting out a retry (stop requeues those)

    asyncio.run(scenario())
    assert sorted(runs) == keys  # each key ran once: the redelivered ones were acked unrun
