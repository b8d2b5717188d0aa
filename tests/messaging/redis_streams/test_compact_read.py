"""The compact read against a real server: the same Messages as redis-py's XREADGROUP makes
of the same entries, the same group state after it, and the XACKs it carries applied, past the
slice its script acks at a time."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aredis

from mideng.messaging.redis_streams import message as redis_read
from mideng.messaging.redis_streams import message_of
from tests.brokers import BrokerNames
from tests.services import REDIS_URL

ENTRIES: list[dict[Any, Any]] = [
    {"body": b'{"qty": 1}', "idempotency-key": "order:1", "x-request-id": "r-1"},
    {"idempotency-key": "order:2"},  # no body
    {"body": b"", "empty": b""},  # empty values
    {"body": bytes(range(256)), "bad": b"\xff\xfe text", "\xe9t\xe9": "caf\xe9"},
    {f"h{n}": f"v{n}" * n for n in range(40)},  # many fields, long values
]


def same(a: Any, b: Any) -> bool:
    return (a.body, a.headers, a.id, a.attempt, a.raw) == (
        b.body,
        b.headers,
        b.id,
        b.attempt,
        b.raw,
    )


def test_the_compact_read_makes_the_messages_xreadgroup_would(broker_names: BrokerNames) -> None:
    names = broker_names.redis_stream("compact")

    async def scenario() -> None:
        client: Any = aredis.from_url(REDIS_URL)
        try:
            for fields in ENTRIES:
                await client.xadd(names.stream, fields)
            await client.xgroup_create(names.stream, "plain", id="0")
            await client.xgroup_create(names.stream, "compact", id="0")
            found = await client.xreadgroup("plain", "w1", {names.stream: ">"}, count=100)
            plain = [message_of(i, f, 1) for i, f in found[0][1]]
            reader = redis_read.CompactReader(client)
            compact = await reader.read(names.stream, "compact", "w1", 100, [])
            assert len(compact) == len(plain) == len(ENTRIES)
            for a, b in zip(compact, plain, strict=True):
                assert same(a, b), (a, b)
            # Delivered as XREADGROUP delivers: pending for the member, nothing left to read.
            assert await reader.read(names.stream, "compact", "w1", 100, []) == []
            summary = await client.xpending(names.stream, "compact")
            assert summary["pending"] == len(ENTRIES)
            assert summary["consumers"] == [{"name": b"w1", "pending": len(ENTRIES)}]
            # The acks a read carries are applied before it reads.
            await reader.read(names.stream, "compact", "w1", 100, [str(m.id) for m in compact[:3]])
            assert (await client.xpending(names.stream, "compact"))["pending"] == len(ENTRIES) - 3
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_a_read_acks_more_entries_than_one_slice(broker_names: BrokerNames) -> None:
    names = broker_names.redis_stream("compact-acks")

    async def scenario() -> None:
        client: Any = aredis.from_url(REDIS_URL)
        try:
            pipe = client.pipeline(transaction=False)
            for n in range(2500):
                pipe.xadd(names.stream, {"body": b"x", "idempotency-key": f"order:{n}"})
            await pipe.execute()
            await client.xgroup_create(names.stream, names.group, id="0")
            reader = redis_read.CompactReader(client)
            got = await reader.read(names.stream, names.group, "w1", 2500, [])
            assert len(got) == 2500
            assert (
                await reader.read(names.stream, names.group, "w1", 10, [str(m.id) for m in got])
                == []
            )
            assert (await client.xpending(names.stream, names.group))["pending"] == 0
        finally:
            await client.aclose()

    asyncio.run(scenario())
