"""A Redis that comes back without the consumer group (restarted without persistence, or
from a snapshot taken before the group was made) does not end ``consume``: redis-py
reconnects by itself, so no connection error reaches the adapter, only the server's NOGROUP
on the next read; the group is made again and the entries added since are run."""

from __future__ import annotations

import asyncio

import redis.asyncio as aredis

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.messaging.redis_streams.broker import RedisStreams
from tests.messaging.running import consume_until
from tests.services import REDIS_URL


def test_a_stream_that_lost_its_group_is_read_again_once_it_is_made_again(
    broker_names: BrokerNames,
) -> None:
    broker = RedisStreams(broker_names)
    runs: list[str] = []

    def handler(message: Message) -> None:
        runs.append(message.headers["idempotency-key"])

    consumer = IdempotentConsumer(Guard(MemoryStore(), lease=5), "stock", handler)

    async def scenario() -> None:
        client = aredis.from_url(REDIS_URL)
        state = {"lost": False}
        await client.xadd(broker.stream, {"body": b"{}", "idempotency-key": "order:1"})

        async def after_the_loss() -> bool:
            if runs == ["order:1"] and not state["lost"]:
                # What a server that came back empty holds: no stream, so no group either.
                await client.delete(broker.stream)
                await client.xadd(broker.stream, {"body": b"{}", "idempotency-key": "order:2"})
                state["lost"] = True
            return runs == ["order:1", "order:2"]

        try:
            await consume_until(lambda stop: broker.consume(consumer, stop), after_the_loss)
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert runs == ["order:1", "order:2"]
