"""The Redis Streams adapter against a real server: entries as messages, duplicates acked,
dead letters to the dead stream, a dead member's entries taken over, the group's start."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aredis

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, redis_streams
from mideng.messaging.redis_streams import message as redis_read
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.messaging.running import consume_until
from tests.services import REDIS_URL


def consuming(consumer: Any, names: Any, stop: asyncio.Event, **options: Any) -> Any:
    """``redis_streams.consume`` as member w1 of the test's stream and group."""
    return redis_streams.consume(
        consumer,
        REDIS_URL,
        stream=names.stream,
        group=names.group,
        name="w1",
        stop=stop,
        **options,
    )


async def pending(client: Any, stream: str, group: str) -> int:
    return int((await client.xpending(stream, group))["pending"])


def test_entries_run_once_per_key_and_everything_is_acked(broker_names: BrokerNames) -> None:
    names = broker_names.redis_stream()
    seen: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", seen.append, max_attempts=2)

    async def scenario() -> None:
        client: Any = aredis.from_url(REDIS_URL)
        # Added before the group exists: the group starts at id 0, so these are read too.
        for key in ["order:1", "order:2", "order:1"]:
            await client.xadd(
                names.stream, {"body": b'{"qty": 1}', "idempotency-key": key, "x-request-id": "r1"}
            )
        await client.xadd(names.stream, {"body": b"no key here"})

        async def done() -> bool:
            groups = await client.xinfo_groups(names.stream)
            return (
                bool(groups)
                and groups[0]["lag"] == 0
                and not await pending(client, names.stream, names.group)
            )

        await consume_until(
            lambda stop: redis_streams.consume(
                consumer, REDIS_URL, stream=names.stream, group=names.group, name="w1", stop=stop
            ),
            done,
        )
        dead = await client.xrange(names.dead)
        await client.aclose()
        assert len(dead) == 1
        fields = dead[0][1]
        assert fields[b"body"] == b"no key here"
        assert b"no business key" in fields[b"dead-reason"]

    asyncio.run(scenario())
    assert [m.headers["idempotency-key"] for m in seen] == ["order:1", "order:2"]
    assert seen[0].body == b'{"qty": 1}'
    assert seen[0].headers["x-request-id"] == "r1"
    assert seen[0].id is not None
    assert "-" in seen[0].id


def test_a_poison_entry_is_dead_lettered_after_its_attempts_and_the_rest_go_on(
    broker_names: BrokerNames,
) -> None:
    names = broker_names.redis_stream()
    tries: list[str] = []

    def handler(message: Message) -> None:
        tries.append(message.headers["idempotency-key"])
        if message.headers["idempotency-key"] == "order:poison":
            raise ValueError("cannot parse")

    consumer = IdempotentConsumer(
        Guard(MemoryStore()), "stock", handler, max_attempts=3, retry_delay=0.05
    )

    async def scenario() -> list[Any]:
        client: Any = aredis.from_url(REDIS_URL)
        await client.xgroup_create(names.stream, names.group, id="0", mkstream=True)  # exists
        await client.xadd(names.stream, {"body": b"x", "idempotency-key": "order:poison"})
        await client.xadd(names.stream, {"body": b"x", "idempotency-key": "order:good"})

        async def done() -> bool:
            return bool(await client.xlen(names.dead)) and not await pending(
                client, names.stream, names.group
            )

        await consume_until(
            lambda stop: redis_streams.consume(
                consumer, REDIS_URL, stream=names.stream, group=names.group, name="w1", stop=stop
            ),
            done,
        )
        dead: list[Any] = await client.xrange(names.dead)
        await client.aclose()
        return dead

    dead = asyncio.run(scenario())
    assert tries.count("order:poison") == 3
    assert tries.count("order:good") == 1
    assert len(dead) == 1
    assert b"3 time(s)" in dead[0][1][b"dead-reason"]


def test_a_dead_members_entries_are_taken_over_once_idle(broker_names: BrokerNames) -> None:
    names = broker_names.redis_stream()
    seen: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", seen.append)

    async def scenario() -> None:
        client: Any = aredis.from_url(REDIS_URL)
        await client.xgroup_create(names.stream, names.group, id="0", mkstream=True)
        for n in range(3):
            await client.xadd(names.stream, {"body": b"x", "idempotency-key": f"order:{n}"})
        # "ghost" reads them and dies without acking.
        taken = await client.xreadgroup(names.group, "ghost", {names.stream: ">"}, count=10)
        assert len(taken[0][1]) == 3

        async def done() -> bool:
            return len(seen) == 3 and not await pending(client, names.stream, names.group)

        await consume_until(lambda stop: consuming(consumer, names, stop, claim_idle=0.3), done)
        await client.aclose()

    asyncio.run(scenario())
    assert sorted(m.headers["idempotency-key"] for m in seen) == ["order:0", "order:1", "order:2"]


def test_a_failed_xack_loses_nothing_and_the_redelivery_is_not_run_again(
    broker_names: BrokerNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settled entries' XACK fails once, on the compact read that carries it."""
    names = broker_names.redis_stream()
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
        await client.xadd(names.stream, {"body": b"x", "idempotency-key": "order:1"})

        def run(stop: asyncio.Event) -> Any:
            return consuming(consumer, names, stop)

        async def drained() -> bool:
            return len(seen) == 1 and not await pending(client, names.stream, names.group)

        # The XACK fails and consume goes on: it reads its own pending entry again, and the
        # consumer's record acks it without running it.
        await consume_until(run, drained)
        await client.aclose()

    asyncio.run(scenario())
    assert not failures
    assert len(seen) == 1
    assert seen[0].body == b"x"
