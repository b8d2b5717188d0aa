"""Entries a consumer must get past, against a real server: one with more fields than a
two-byte count holds (the compact read's reply once wrapped its count and ended consume, the
entry and all behind it left pending), and one whose bytes are not UTF-8 read by a client told
to decode replies (redis-py raised at every read). (A dead letter's copy of bytes that are not
UTF-8: the base suite's dead-copy case.)"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aredis

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, redis_streams
from mideng.messaging.headers import MESSAGE_ID
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.messaging.running import consume_until
from tests.services import REDIS_URL

#: Field pairs in the big entries: 80,001 strings with the id, past a two-byte count.
PAIRS = 40_000


class Outcomes:
    """The consumer under test: what ran (the message-id header) and what was dead-lettered."""

    def __init__(self) -> None:
        self.ran: list[Message] = []
        self.dead: list[tuple[Message, str]] = []
        self.consumer = IdempotentConsumer(
            Guard(MemoryStore(), lease=10),
            "stock",
            self.ran.append,
            on_dead_letter=lambda message, reason: self.dead.append((message, reason)),
        )

    def keys(self) -> list[str | None]:
        return [m.headers.get(MESSAGE_ID) for m in self.ran]


def consume(outcomes: Outcomes, names: Any, ran: int, dead: int, **options: Any) -> None:
    """Consume until ``ran`` messages ran, ``dead`` were dead-lettered and none is pending."""

    async def scenario() -> None:
        client: Any = aredis.from_url(REDIS_URL)

        async def done() -> bool:
            if len(outcomes.ran) < ran or len(outcomes.dead) < dead:
                return False
            return not (await client.xpending(names.stream, names.group))["pending"]

        try:
            await consume_until(
                lambda stop: redis_streams.consume(
                    outcomes.consumer,
                    REDIS_URL,
                    stream=names.stream,
                    group=names.group,
                    name="w1",
                    stop=stop,
                    dead_stream=names.dead,
                    **options,
                ),
                done,
            )
        finally:
            await client.aclose()

    asyncio.run(scenario())


def sync_client() -> Any:
    import redis

    return redis.Redis.from_url(REDIS_URL)


def test_entries_of_40000_fields_are_read_and_those_behind_them_handled(
    broker_names: BrokerNames,
) -> None:
    names = broker_names.redis_stream("wide")
    poison = {b"body": b"{}"} | {f"f{n}".encode(): b"v" for n in range(PAIRS)}  # no key
    wide = {MESSAGE_ID.encode(): b"order-wide"} | {f"h{n}".encode(): b"w" for n in range(PAIRS)}
    client = sync_client()
    try:
        for fields in [poison, wide, {b"body": b"{}", MESSAGE_ID.encode(): b"order-after"}]:
            client.xadd(names.stream, fields)
        outcomes = Outcomes()
        consume(outcomes, names, ran=2, dead=1)
        copies = client.xrange(names.dead)
    finally:
        client.close()
    assert outcomes.keys() == ["order-wide", "order-after"]
    assert len(outcomes.ran[0].headers) == PAIRS + 1
    assert "has no business key" in outcomes.dead[0][1]
    [(_copy_id, copy)] = copies
    assert copy.pop(b"dead-from") == str(outcomes.dead[0][0].id).encode()
    assert b"has no business key" in copy.pop(b"dead-reason")
    assert copy == poison


def test_a_client_told_to_decode_replies_still_reads_entries_of_any_bytes(
    broker_names: BrokerNames,
) -> None:
    names = broker_names.redis_stream("decoding")
    client = sync_client()
    try:
        client.xadd(names.stream, {"body": b"\xff{}", MESSAGE_ID: b"order-\xff"})
        client.xadd(names.stream, {"body": b"{}", MESSAGE_ID: b"order-2"})
    finally:
        client.close()
    outcomes = Outcomes()
    consume(outcomes, names, ran=2, dead=0, decode_responses=True)
    assert outcomes.keys() == ["order-\\xff", "order-2"]
    assert outcomes.ran[0].body == b"\xff{}"
