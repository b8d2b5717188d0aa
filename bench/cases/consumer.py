"""Consumer throughput on Redis Streams and RabbitMQ; one batch claim against single claims.

In one run: the raw consume+ack loop without dedup (the floor), mideng per message, mideng
batched, and idemkit's IdempotentConsumer dispatching the same messages; and one batch claim
(and completion) of 100 against 100 single claims (and completions) on the Redis and
PostgreSQL stores. The loops are bench/cases/consumer_loops.py.

    .venv/bin/python -m bench consumer [--messages 3000] [--batch 100] [--repeats 3]

Every case consumes its own ``--messages`` fresh messages (each a new business key, so every
one is claimed, run and completed) through the same read/ack loop; only what is done with a
fetched batch differs. One more Redis Streams row runs mideng's adapter itself
(``redis_streams.consume``: its reads, its Messages, its acks and its checks for retries and
takeovers between batches, one batch decided while the next is read and decided) on the same
kind of stream; two more run the floor's loop as that adapter runs: with the next batch read
while one is processed, and reading as the adapter reads (one compact reply a batch:
``redis_streams.message.CompactReader``), so that its dedup shows against each floor. On
RabbitMQ, one more row runs mideng's adapter (``rabbitmq.consume``, with a prefetch of
``--batch``: a batch is what has been delivered, acked with one ``multiple`` ack), and one more
the floor's loop acking each batch that way. The dedup records live in Redis for mideng and
idemkit alike. The handler is an ``async def`` that does nothing, so the figures are the
consumer's own cost. Messages/s is the best of ``--repeats`` runs per case (the machine is
shared; the best run is the one least disturbed), beside this process's CPU time a message
(median of the runs: round trips are not in it); mideng per message against idemkit is also
given repeat by repeat, each pair run one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import aio_pika
import redis.asyncio as aredis

from bench.cases.consumer_loops import (
    LAST_CPU,
    Batch,
    adapter_run,
    ahead_floor,
    compact_floor,
    floor,
    nothing,
    rabbit_adapter_run,
    rabbit_multiple_floor,
    rabbit_run,
    streams_run,
)
from bench.report import parser
from bench.services import AMQP_URL, POSTGRES_URL, REDIS_URL
from mideng import Guard, open_store
from mideng.core.record import ClaimRequest, Ticket
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.stores.batch import Completion
from mideng.stores.redis import RedisStore

PER_MESSAGE = "mideng, per message"


def strategies(prefix: str) -> tuple[dict[str, Callable[[], Batch]], list[Callable[[], Any]]]:
    """Each case's batch function, made fresh per run; and what to close at the end."""
    closers: list[Callable[[], Any]] = []

    def mideng(batched: bool) -> Callable[[], Batch]:
        def make() -> Batch:
            store = RedisStore.from_url(REDIS_URL, prefix=f"{prefix}:m{uuid.uuid4().hex[:6]}")
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

        client = aredis.from_url(REDIS_URL)
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


def main(argv: list[str]) -> None:
    options = parser("consumer", __doc__)
    options.add_argument("--messages", type=int, default=3000)
    options.add_argument("--batch", type=int, default=100)
    options.add_argument("--repeats", type=int, default=3)
    asyncio.run(run(options.parse_args(argv)))


async def run(args: argparse.Namespace) -> None:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    prefix = f"mideng:bench:{uuid.uuid4().hex[:8]}"
    cases, closers = strategies(prefix)
    client = aredis.from_url(REDIS_URL)
    connection = await aio_pika.connect(AMQP_URL)
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
        redis_store = RedisStore.from_url(REDIS_URL, prefix=f"{prefix}:claims")
        closers.append(redis_store.aclose)
        table_name = f"mideng_bench_{uuid.uuid4().hex[:8]}"
        sql_store = open_store(POSTGRES_URL, table=table_name)
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
