"""Consumer throughput on Redis Streams and RabbitMQ, in one run: the raw consume+ack loop
without dedup (the floor), mideng per message, mideng batched, and idemkit's
IdempotentConsumer dispatching the same messages; and one batch claim (and completion) of
100 against 100 single claims (and completions) on the Redis and PostgreSQL stores.

    .venv/bin/python bench/bench_consumer.py [--messages 3000] [--batch 100]

Every case consumes its own ``--messages`` fresh messages (each a new business key, so every
one is claimed, run and completed) through the same read/ack loop; only what is done with a
fetched batch differs. One more Redis Streams row runs mideng's adapter itself
(``redis_streams.consume``: its reads, its Messages, its acks and its checks for retries and
takeovers between batches, one batch decided while the next is read and decided) on the same
kind of stream; two more run the floor's loop as that adapter runs: with the next batch read
while one is processed, and reading as the adapter reads (one compact reply a batch,
mideng.messaging.redis_read), so that its dedup shows against each floor. On RabbitMQ, one
more row runs mideng's adapter (``rabbitmq.consume``, with a prefetch of ``--batch``: a
batch is what has been delivered, acked with one ``multiple`` ack), and one more the floor's
loop acking each batch that way. The dedup records live in Redis for mideng and idemkit
alike. The handler is an ``async def`` that does nothing, so the figures are the consumer's
own cost. Messages/s is the best of ``--repeats`` runs per case (the machine is shared; the
best run is the one least disturbed), beside this process's CPU time a message (median of
the runs: round trips are not in it); mideng per message against idemkit is also given
repeat by repeat, each pair run one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import platform
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aio_pika
import redis.asyncio as aredis

from mideng import Guard, open_store
from mideng.core.record import ClaimRequest, Ticket
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.stores.batch import Completion
from mideng.stores.redis import RedisStore

REDIS = "redis://127.0.0.1:6379/0"
AMQP = "amqp://guest:guest@127.0.0.1:5672/"
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
Batch = Callable[[Sequence[Message]], Awaitable[None]]
PER_MESSAGE = "mideng, per message"


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


def strategies(prefix: str) -> tuple[dict[str, Callable[[], Batch]], list[Callable[[], Any]]]:
    """Each case's batch function, made fresh per run; and what to close at the end."""
    closers: list[Callable[[], Any]] = []

    def mideng(batched: bool) -> Callable[[], Batch]:
        def make() -> Batch:
            store = RedisStore.from_url(REDIS, prefix=f"{prefix}:m{uuid.uuid4().hex[:6]}")
            closers.append(store.aclose)
            consumer = IdempotentConsumer(Guard(store), "stock", nothing)

            async def each(messages: Sequence[Message]) -> None:
                for m in messages:
                    await consumer.handle(m)

            async def batch(messages: Sequence[Message]) -> None:
                await consumer.handle_batch(messages)

            return batch if batched else each

        return make

    def idemkit() -> Batch:
        from idemkit import QueueConfig
        from idemkit.adapters.queue import IdempotentConsumer as Peer
        from idemkit.backends.redis import RedisBackend

        client = aredis.from_url(REDIS)
        closers.append(client.aclose)
        peer = Peer(
            backend=RedisBackend(client, namespace=f"{prefix}:i{uuid.uuid4().hex[:6]}"),
            config=QueueConfig(
                dedup_id=lambda m: m.headers[IDEMPOTENCY_KEY], visibility_timeout_seconds=60
            ),
            handler=nothing,
        )

        async def each(messages: Sequence[Message]) -> None:
            for m in messages:
                await peer.dispatch(m)

        return each

    cases = {
        "raw consume+ack (floor)": lambda: floor,
        PER_MESSAGE: mideng(False),
        "mideng, batched": mideng(True),
        "idemkit IdempotentConsumer": idemkit,
    }
    return cases, closers


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
        self.store = RedisStore.from_url(REDIS, prefix=f"{prefix}{uuid.uuid4().hex[:6]}")
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
            REDIS,
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
    """The floor's loop reading as the adapter does (mideng.messaging.redis_read: one compact
    reply a batch, its XACK carried by the next read): what a consume+ack loop without dedup
    costs with that read, so the adapter's dedup can be read against it too."""
    from mideng.messaging.redis_read import CompactReader

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
        await rabbitmq.consume(consumer, AMQP, queue=queue.name, stop=stop, prefetch=batch)
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


# -- one batch claim against single claims ----------------------------------------------------
async def claim_costs(store: Any, batch: int, rounds: int) -> tuple[float, ...]:
    """µs per message: ``batch`` sequential single claims, one batch claim of ``batch``; then
    the completions of those claims, one by one and as one batch."""
    singles, batches, single_done, batch_done = [], [], [], []
    for _ in range(rounds):
        reqs = [ClaimRequest("bench", uuid.uuid4().hex, "o", 60, 600) for _ in range(batch)]
        t = time.perf_counter()
        claims = [await store.aclaim(r) for r in reqs]
        singles.append((time.perf_counter() - t) / batch * 1e6)
        t = time.perf_counter()
        for c in claims:
            await store.acomplete(Ticket.of(c.record), b"null", "json", 600)
        single_done.append((time.perf_counter() - t) / batch * 1e6)
        reqs = [ClaimRequest("bench", uuid.uuid4().hex, "o", 60, 600) for _ in range(batch)]
        t = time.perf_counter()
        claims = await store.aclaim_many(reqs)
        batches.append((time.perf_counter() - t) / batch * 1e6)
        items = [Completion(Ticket.of(c.record), b"null", "json", 600) for c in claims]
        t = time.perf_counter()
        await store.acomplete_many(items)
        batch_done.append((time.perf_counter() - t) / batch * 1e6)
    return tuple(statistics.median(x) for x in (singles, batches, single_done, batch_done))


def table(title: str, runs: dict[str, list[float]], cpu: dict[str, list[float]]) -> str:
    """Best of the runs per case against the best floor; and mideng per message against
    idemkit repeat by repeat (the two ran one after the other in each), since round-trip
    bound rows move with the loopback's latency and a best-of-each can pair a calm run of
    one with a disturbed run of the other."""
    rates = {name: max(rs) for name, rs in runs.items()}
    floor = rates["raw consume+ack (floor)"]
    lines = [f"**{title}**", "", "| case | messages/s | x floor | CPU µs a message |"]
    lines.append("|---|---:|---:|---:|")
    for name, rate in rates.items():
        used = statistics.median(cpu[name])
        lines.append(f"| {name} | {rate:,.0f} | {rate / floor:.2f} | {used:.0f} |")
    paired = [
        m / i for m, i in zip(runs[PER_MESSAGE], runs["idemkit IdempotentConsumer"], strict=True)
    ]
    each = ", ".join(f"{r:.2f}" for r in paired)
    lines += ["", f"mideng per message / idemkit, each repeat: {each} (median "]
    lines[-1] += f"{statistics.median(paired):.2f}x)"
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("mideng").setLevel(logging.ERROR)
    prefix = f"mideng:bench:{uuid.uuid4().hex[:8]}"
    cases, closers = strategies(prefix)
    client = aredis.from_url(REDIS)
    connection = await aio_pika.connect(AMQP)
    results: dict[str, dict[str, list[float]]] = {"Redis Streams": {}, "RabbitMQ": {}}
    cpu: dict[str, dict[str, list[float]]] = {"Redis Streams": {}, "RabbitMQ": {}}
    try:
        for _ in range(args.repeats):  # interleaved, so load drifts hit every case alike
            for name, make in cases.items():
                r = await streams_run(client, args.messages, args.batch, make(), prefix)
                r_cpu = LAST_CPU[0]
                q = await rabbit_run(connection, args.messages, args.batch, make())
                for broker, rate, used in (
                    ("Redis Streams", r, r_cpu),
                    ("RabbitMQ", q, LAST_CPU[0]),
                ):
                    results[broker].setdefault(name, []).append(rate)
                    cpu[broker].setdefault(name, []).append(used)
            for name, run in (
                ("mideng, redis_streams.consume", adapter_run),
                ("raw consume+ack, next batch read ahead (no dedup)", ahead_floor),
                ("raw consume+ack, mideng's compact read (no dedup)", compact_floor),
            ):
                r = await run(client, args.messages, args.batch, prefix)
                results["Redis Streams"].setdefault(name, []).append(r)
                cpu["Redis Streams"].setdefault(name, []).append(LAST_CPU[0])
            for name, rabbit in (
                ("mideng, rabbitmq.consume", rabbit_adapter_run),
                ("raw consume, one multiple ack a batch (no dedup)", rabbit_multiple_floor),
            ):
                q = await rabbit(connection, args.messages, args.batch, prefix)
                results["RabbitMQ"].setdefault(name, []).append(q)
                cpu["RabbitMQ"].setdefault(name, []).append(LAST_CPU[0])
        redis_store = RedisStore.from_url(REDIS, prefix=f"{prefix}:claims")
        closers.append(redis_store.aclose)
        table_name = f"mideng_bench_{uuid.uuid4().hex[:8]}"
        sql_store = open_store(POSTGRES, table=table_name)
        claims = {
            "Redis": await claim_costs(redis_store, args.batch, 20),
            "PostgreSQL": await claim_costs(sql_store, args.batch, 20),
        }
        with sql_store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql(f"DROP TABLE {table_name}")
        await sql_store.aclose()
    finally:
        for close in closers:
            await close()
        async for name in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.delete(name)
        await client.aclose()
        await connection.close()
    print(f"Python {platform.python_version()}, {args.messages} messages per case, ", end="")
    print(f"batches of {args.batch}, best of {args.repeats}\n")
    for broker, rates in results.items():
        print(table(broker, rates, cpu[broker]), end="\n\n")
    for what, at in (("claim", 0), ("completion", 2)):
        print(
            f"| store | {args.batch} single {what}s, µs/message | one batch {what} of "
            f"{args.batch}, µs/message | single / batch |"
        )
        print("|---|---:|---:|---:|")
        for store, costs in claims.items():
            single, batched = costs[at], costs[at + 1]
            print(f"| {store} | {single:.1f} | {batched:.1f} | {single / batched:.1f}x |")
        print()


if __name__ == "__main__":
    asyncio.run(main())
