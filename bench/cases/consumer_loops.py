"""The consumer case's loops: a broker's messages read, handed to a batch function and acked,
on Redis Streams and on RabbitMQ, and mideng's own adapters run end to end on the same kind of
stream and queue. Each returns the messages a second; the CPU time a message is kept beside."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aio_pika

from bench.services import AMQP_URL, REDIS_URL
from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.stores.redis import RedisStore

Batch = Callable[[Sequence[Message]], Awaitable[None]]


async def nothing(message: Message) -> None:
    return None


async def floor(messages: Sequence[Message]) -> None:
    """The floor's batch: the handler on each message, no dedup."""
    for m in messages:
        await nothing(m)


# This process's CPU time a message in the last run (user and system, all threads): round
# trips do not count in it, so it is steadier than the rates when the loopback is slow.
LAST_CPU = [0.0]


def began() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def rate_since(n: int, start: tuple[float, float]) -> float:
    """Messages a second since ``start``; the CPU µs a message is kept in LAST_CPU."""
    LAST_CPU[0] = (time.process_time() - start[1]) / n * 1e6
    return n / (time.perf_counter() - start[0])


# -- Redis Streams ----------------------------------------------------------------------------
async def new_stream(client: Any, n: int, prefix: str) -> tuple[str, str]:
    """A stream of ``n`` entries, each a new business key, and its group at id 0."""
    stream, group = f"{prefix}:stream:{uuid.uuid4().hex[:8]}", "bench"
    pipe = client.pipeline(transaction=False)
    for _ in range(n):
        pipe.xadd(stream, {"body": b'{"qty": 1}', IDEMPOTENCY_KEY: f"order:{uuid.uuid4().hex}"})
    await pipe.execute()
    await client.xgroup_create(stream, group, id="0")
    return stream, group


async def streams_run(client: Any, n: int, batch: int, process: Batch, prefix: str) -> float:
    stream, group = await new_stream(client, n, prefix)
    done = 0
    start = began()
    try:
        while done < n:
            found = await client.xreadgroup(group, "w1", {stream: ">"}, count=batch)
            entries = found[0][1]
            messages = [
                Message(
                    f[b"body"],
                    {k.decode(): v.decode() for k, v in f.items() if k != b"body"},
                    i.decode(),
                )
                for i, f in entries
            ]
            await process(messages)
            await client.xack(stream, group, *[m.id for m in messages])
            done += len(messages)
        return rate_since(n, start)
    finally:
        await client.delete(stream)


async def ahead_floor(client: Any, n: int, batch: int, prefix: str) -> float:
    """The floor's loop with the next batch read while one is processed and acked (a task on
    a second pooled connection), as mideng's adapter decides one batch beside the next: what
    the same overlap gives a loop without dedup."""
    stream, group = await new_stream(client, n, prefix)

    async def read() -> list[Message]:
        found = await client.xreadgroup(group, "w1", {stream: ">"}, count=batch)
        return [
            Message(
                f[b"body"],
                {k.decode(): v.decode() for k, v in f.items() if k != b"body"},
                i.decode(),
            )
            for i, f in (found[0][1] if found else [])
        ]

    done = 0
    start = began()
    try:
        messages = await read()
        while done < n:
            ahead = asyncio.ensure_future(read()) if done + len(messages) < n else None
            for m in messages:
                await nothing(m)
            await client.xack(stream, group, *[m.id for m in messages])
            done += len(messages)
            messages = await ahead if ahead is not None else []
        return rate_since(n, start)
    finally:
        await client.delete(stream)


class Counted:
    """An IdempotentConsumer on a fresh Redis store whose handler counts its runs and sets
    ``stop`` at the ``n``-th: an adapter's run ends when every message ran once."""

    def __init__(self, n: int, prefix: str) -> None:
        self.n, self.ran, self.stop = n, 0, asyncio.Event()
        self.store = RedisStore.from_url(REDIS_URL, prefix=f"{prefix}{uuid.uuid4().hex[:6]}")
        self.consumer = IdempotentConsumer(Guard(self.store), "stock", self.count)

    async def count(self, message: Message) -> None:
        self.ran += 1
        if self.ran == self.n:
            self.stop.set()


async def adapter_run(client: Any, n: int, batch: int, prefix: str) -> float:
    """mideng's own Redis Streams adapter end to end (its reads, its Messages, its acks) on
    the same kind of stream: ``redis_streams.consume`` until every entry ran once."""
    from mideng.messaging import redis_streams

    stream, group = await new_stream(client, n, prefix)
    counted = Counted(n, f"{prefix}:a")
    consumer, stop, store = counted.consumer, counted.stop, counted.store
    start = began()
    try:
        await redis_streams.consume(
            consumer,
            REDIS_URL,
            stream=stream,
            group=group,
            name="w1",
            stop=stop,
            batch=batch,
        )
        rate = rate_since(n, start)
        pending = await client.xpending(stream, group)
        assert counted.ran == n, (counted.ran, n)
        assert pending["pending"] == 0, pending
        return rate
    finally:
        await store.aclose()
        await client.delete(stream)


async def compact_floor(client: Any, n: int, batch: int, prefix: str) -> float:
    """The floor's loop reading as the adapter does (``redis_streams.message.CompactReader``: one
    compact reply a batch, its XACK carried by the next read): what a consume+ack loop without dedup
    costs with that read, so the adapter's dedup can be read against it too."""
    from mideng.messaging.redis_streams.message import CompactReader

    stream, group = await new_stream(client, n, prefix)
    reader = CompactReader(client)
    done, acks = 0, list[str]()
    start = began()
    try:
        while done < n:
            messages = await reader.read(stream, group, "w1", batch, acks)
            for m in messages:
                await nothing(m)
            acks = [str(m.id) for m in messages]
            done += len(messages)
        await client.xack(stream, group, *acks)
        return rate_since(n, start)
    finally:
        await client.delete(stream)


# -- RabbitMQ ---------------------------------------------------------------------------------
async def rabbit_queue(
    connection: Any, n: int, prefetch: int, auto_delete: bool = True
) -> tuple[Any, Any]:
    """A channel with ``prefetch`` and a fresh queue holding ``n`` messages, each a new key."""
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=prefetch)
    name = f"mideng-bench-{uuid.uuid4().hex[:8]}"
    queue = await channel.declare_queue(name, auto_delete=auto_delete)
    for _ in range(n):
        body = aio_pika.Message(b'{"qty": 1}', headers={IDEMPOTENCY_KEY: f"o:{uuid.uuid4().hex}"})
        await channel.default_exchange.publish(body, routing_key=queue.name)
    return channel, queue


async def rabbit_run(
    connection: Any, n: int, batch: int, process: Batch, multiple: bool = False
) -> float:
    """The bench's own loop: a batch is what the prefetch window has delivered, up to
    ``batch``; each message acked on its own, or the batch with one ``multiple`` ack."""
    channel, queue = await rabbit_queue(connection, n, batch)
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    done = 0
    start = began()
    tag = await queue.consume(inbox.put)
    while done < n:
        got = [await inbox.get()]
        while not inbox.empty() and len(got) < batch:
            got.append(inbox.get_nowait())
        messages = [
            Message(bytes(m.body), {k: str(v) for k, v in m.headers.items()}, m.message_id, None, m)
            for m in got
        ]
        await process(messages)
        if multiple:
            await got[-1].ack(multiple=True)
        else:
            for m in got:
                await m.ack()
        done += len(got)
    rate = rate_since(n, start)
    await queue.cancel(tag)
    await queue.delete()
    await channel.close()
    return rate


async def rabbit_multiple_floor(connection: Any, n: int, batch: int, prefix: str) -> float:
    """The floor's loop acking each batch with one ``multiple`` ack, as the adapter does."""

    return await rabbit_run(connection, n, batch, floor, multiple=True)


async def rabbit_adapter_run(connection: Any, n: int, batch: int, prefix: str) -> float:
    """mideng's own RabbitMQ adapter end to end (its Messages, its batches, its acks) with
    a prefetch of ``batch``: ``rabbitmq.consume`` until every message ran once."""
    from mideng.messaging import rabbitmq

    # Not auto-deleted: the adapter's consumer going away must leave it to be checked empty.
    channel, queue = await rabbit_queue(connection, n, batch, auto_delete=False)
    counted = Counted(n, f"{prefix}:q")
    consumer, stop, store = counted.consumer, counted.stop, counted.store
    start = began()
    try:
        await rabbitmq.consume(consumer, AMQP_URL, queue=queue.name, stop=stop, prefetch=batch)
        rate = rate_since(n, start)
        assert counted.ran == n, (counted.ran, n)
        left = await channel.declare_queue(queue.name, passive=True)
        assert not left.declaration_result.message_count, left.declaration_result
        return rate
    finally:
        await store.aclose()
        with contextlib.suppress(Exception):
            await queue.delete()
        await channel.close()
