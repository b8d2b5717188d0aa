"""The Redis Streams adapter against a real server, beyond the base suite: a dead member's
entries taken over, a failed XACK that loses nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aredis

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.redis_streams import message as redis_read
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.messaging.redis_streams.broker import RedisStreams
from tests.messaging.running import consume_until
from tests.services import REDIS_URL


async def pending(client: Any, stream: str, group: str) -> int:
    return int((await client.xpending(stream, group))["pending"])


def test_a_dead_members_entries_are_taken_over_once_idle(broker_names: BrokerNames) -> None:
    broker = RedisStreams(broker_names)
    seen: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", seen.append)

    async def scenario() -> None:
        client: Any = aredis.from_url(REDIS_URL)
        await client.xgroup_create(broker.stream, broker.group, id="0", mkstream=True)
        for n in range(3):
            await client.xadd(broker.stream, {"body": b"x", "idempotency-key": f"order:{n}"})
        # "ghost" reads them and dies without acking.
        taken = await client.xreadgroup(broker.group, "ghost", {broker.stream: ">"}, count=10)
        assert len(taken[0][1]) == 3

        async def done() -> bool:
            return len(seen) == 3 and not await pending(client, broker.stream, broker.group)

        await consume_until(lambda stop: broker.consume(consumer, stop, claim_idle=0.3), done)
        await client.aclose()

    asyncio.run(scenario())
    assert sorted(m.headers["idempotency-key"] for m in seen) == ["order:0", "order:1", "order:2"]


def test_a_failed_xack_loses_nothing_and_the_redelivery_is_not_run_again(
    broker_names: BrokerNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settled entries' XACK fails once, on the compact read that carries it."""
    broker = RedisStreams(broker_names)
    seen: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", seen.append)
    failures = [ConnectionError("connection reset by peer")]
    real_read = redis_read.CompactReader.read

    async def flaky_read(self: Any, *args: Any) -> Any:
        if failures and args[-1]:  # only a read that carries acks
            raise failures.pop()
        return await real_read(self, *args)

    monkeypatch.setattr(redis_read.CompactReader, "read", flaky_read)

    async def scenario() -> None:
        client: Any = aredis.from_url(REDIS_URL)
        await client.xadd(broker.stream, {"body": b"x", "idempotency-key": "order:1"})

        def run(stop: asyncio.Event) -> Any:
            return broker.consume(consumer, stop)

        async def drained() -> bool:
            return len(seen) == 1 and not await pending(client, broker.stream, broker.group)

        # The XACK fails and consume goes on: it reads its own pending entry again, and the
        # consumer's record acks it without running it.
        await consume_until(run, drained)
        await client.aclose()

    asyncio.run(scenario())
    assert not failures
    assert len(seen) == 1
    assert seen[0].body == b"x"
