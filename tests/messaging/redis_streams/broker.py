"""Redis Streams as the base suite drives it: a fresh stream, its consumer group (one member
name a slot), the dead stream, and the consumer's own connection killed for real
(``CLIENT KILL`` by its client name; no other client touched).

redis-py retries a failed command itself (ten times over some seconds by default); a consumer
whose connection is killed is given ``retry=Retry(NoBackoff(), 0)`` so that each kill
outlasts the client's own retries, as a longer outage would, and reaches the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mideng.messaging import redis_streams
from mideng.messaging.headers import IDEMPOTENCY_KEY, decoded
from mideng.messaging.reconnect import Backoff
from tests.brokers import BrokerNames, token
from tests.messaging.base.broker import Broker, Consuming, DeadCopy, Link, Outgoing
from tests.services import REDIS_URL

#: The fields the adapter adds to a dead letter's copy.
DEAD_REASON, DEAD_FROM = b"dead-reason", b"dead-from"


def kill_named(name: str, command: str | None = None) -> int:
    """CLIENT KILL every connection called ``name`` (only when running ``command``, if
    given); how many were killed."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        killed = 0
        for entry in client.client_list():
            if entry["name"] == name and (command is None or entry["cmd"] == command):
                killed += int(client.client_kill_filter(_id=entry["id"]))
        return killed
    finally:
        client.close()


@contextlib.contextmanager
def half_open() -> Iterator[None]:
    """A killed connection stays in the pool as a half-open one would: redis-py 8.2's pool
    probes each connection it hands out and quietly reconnects one whose end of stream it has
    already read, so a kill between two commands never reached the consumer there. A
    connection a middlebox dropped, or a server that restarted without a word, gives no such
    sign until the next command fails on it; that is the loss these tests make."""

    async def connected_only(self: Any, connection: Any) -> None:
        await connection.connect()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aredis.ConnectionPool, "ensure_connection", connected_only)
        yield


class Named(Link):
    """The consumer's connection, named so it can be killed; long blocking reads, so a kill
    while it waits finds it in XREADGROUP."""

    broker: RedisStreams

    def __init__(self, broker: RedisStreams) -> None:
        self.broker, self.name = broker, f"mideng-test-{token()[:10]}"

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        chosen = {"batch": 2, "block": 1.0, **options}
        return self.broker.consume(
            consumer,
            stop,
            reconnect=Backoff(0.01, 0.05),
            client_name=self.name,
            retry=Retry(NoBackoff(), 0),
            **chosen,
        )

    def drop(self, waiting: bool = False) -> int:
        return kill_named(self.name, "xreadgroup" if waiting else None)


class RedisStreams(Broker):
    """A fresh stream and the consumer group its consumers share, one name a slot."""

    broker = "redis_streams"
    url = REDIS_URL
    lease = 2.0  # a killed member's pending entries are taken over once idle this long
    reconnect_lines = "some"
    reads_ahead = True

    def __init__(self, names: BrokerNames, batch: int = 20) -> None:
        found = names.redis_stream()
        self.stream, self.group, self.dead = found.stream, found.group, found.dead
        self.batch = batch

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "group": self.group,
            "name": f"member-{slot}",
            "batch": self.batch,
            "block": 0.2,
        }

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        return redis_streams.consume(consumer, self.url, stop=stop, **{**self.adapter(), **options})

    def client(self) -> Any:
        return redis.Redis.from_url(self.url)

    def publish(
        self, messages: Sequence[Outgoing], headers: Mapping[str, str] | None = None
    ) -> list[str]:
        client = self.client()
        try:
            pipe = client.pipeline(transaction=False)
            for key, body in messages:
                keyed = {} if key is None else {IDEMPOTENCY_KEY: key}
                pipe.xadd(self.stream, {"body": body, **(headers or {}), **keyed})
            return [entry.decode() for entry in pipe.execute()]
        finally:
            client.close()

    def publish_headers(self, *messages: Any) -> list[str]:
        """Each entry's fields as given, and a body when none of them is one."""
        client = self.client()
        try:
            pipe = client.pipeline(transaction=False)
            for fields in messages:
                body = {} if {"body", b"body"} & set(fields) else {"body": b"{}"}
                pipe.xadd(self.stream, {**body, **fields})
            return [entry.decode() for entry in pipe.execute()]
        finally:
            client.close()

    def dead_letter_options(self) -> dict[str, Any]:
        return {"dead_stream": self.dead}

    def dead_letters(self, at_least: int = 1) -> list[DeadCopy]:
        client = self.client()
        try:
            found = client.xrange(self.dead)
        finally:
            client.close()
        copies = []
        for _id, fields in found:
            key = fields.get(IDEMPOTENCY_KEY.encode())
            copies.append(
                DeadCopy(
                    None if key is None else decoded(key),
                    decoded(fields.get(DEAD_REASON, b"")),
                    fields.get(b"body", b""),
                    fields,
                    fields,
                )
            )
        return copies

    def group_info(self) -> dict[str, Any] | None:
        client = self.client()
        try:
            groups = client.xinfo_groups(self.stream)
        except redis.ResponseError:  # no stream yet
            return None
        finally:
            client.close()
        mine = [g for g in groups if g["name"].decode() == self.group]
        return mine[0] if mine else None

    def unsettled(self) -> int:
        info = self.group_info()
        if info is None:  # no group yet: every entry is still to be read
            client = self.client()
            try:
                return int(client.xlen(self.stream))
            finally:
                client.close()
        return int(info["pending"]) + int(info["lag"] or 0)

    def settled(self) -> bool:
        info = self.group_info()  # a lag the server does not know is not settled
        return info is not None and info["pending"] == 0 and info["lag"] == 0

    def state(self) -> str:
        info = self.group_info()
        return "no group" if info is None else f"{info['pending']} pending, lag {info['lag']}"

    @contextlib.asynccontextmanager
    async def droppable(self) -> AsyncIterator[Link]:
        with half_open():
            yield Named(self)
