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
from tests.guard.gates import gate
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
        # One delivery, or a batch of those that arrived: the first completion waits.
        one, many = gate(store, "acomplete"), gate(store, "acomplete_many")
        stop = asyncio.Event()
        task = asyncio.create_task(
            rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=stop, prefetch=10)
        )
        waits = [asyncio.ensure_future(g.reached.wait()) for g in (one, many)]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
        task.cancel()
        one.go.set()  # the completion written again (by either call) passes
        many.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
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
