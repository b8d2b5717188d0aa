"""Outbox relay throughput to RabbitMQ and commit-to-arrival latency on PostgreSQL, timed.

The relay publishing with publisher confirms against the raw floor, and commit-to-arrival
latency with LISTEN/NOTIFY, in one run.

    .venv/bin/python -m bench outbox [--rows 5000] [--keys 100] [--samples 200] [--repeats 3]

Floor: the same rows (same bodies, headers and message ids) published with confirms by the
same pattern the relay uses (keys in parallel, one key's messages one after the other), with
no database. Relay: ``Relay.run_once`` over those rows committed in an outbox table, claim,
publish and settle included. Latency: one relay running with LISTEN/NOTIFY (poll 5 s, so a
poll never explains a fast arrival), a writer committing one row every 10 ms; time from the
writer's commit returning to a plain aio-pika consumer receiving the message. Throughput is
the best of ``--repeats`` runs (the machine is shared; the best run is the least disturbed).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import threading
import time
import uuid
from typing import Any

import aio_pika
from sqlalchemy import create_engine, text

from bench.report import parser
from bench.services import AMQP_URL, POSTGRES_URL
from mideng.messaging.publish import Outgoing, open_publisher, outgoing
from mideng.outbox import Outbox, Relay


def messages(queue: str, rows: int, keys: int) -> list[Outgoing]:
    return [
        outgoing(queue, b'{"order":"order:%d","qty":1}' % (n % keys), key=f"order:{n % keys}")
        for n in range(rows)
    ]


class NullPublisher:
    """Publishes nowhere: what is left of the relay is its database work and its Python."""

    async def start(self) -> None:
        return None

    async def publish(self, message: Outgoing) -> None:
        return None

    async def close(self) -> None:
        return None


async def floor(
    batch: list[Outgoing], concurrency: int, broker: str = AMQP_URL
) -> tuple[float, float]:
    publisher = open_publisher(broker)
    await publisher.start()
    groups: dict[str | None, list[Outgoing]] = {}
    for message in batch:
        groups.setdefault(message.key, []).append(message)
    gate = asyncio.Semaphore(concurrency)

    async def one_key(group: list[Outgoing]) -> None:
        async with gate:
            for message in group:
                await publisher.publish(message)

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one_key(group) for group in groups.values()))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    await publisher.close()
    return len(batch) / elapsed, cpu / len(batch)


async def relay_rate(
    engine: Any, queue: str, rows: int, keys: int, broker: Any = AMQP_URL
) -> tuple[float, float]:
    outbox = Outbox(engine, table=f"bench_outbox_{uuid.uuid4().hex[:8]}")
    outbox.create_schema()
    try:
        with engine.begin() as connection:
            for n in range(rows):
                outbox.add(
                    connection,
                    queue,
                    {"order": f"order:{n % keys}", "qty": 1},
                    key=f"order:{n % keys}",
                )
        async with Relay(engine, broker, table=outbox.table, listen=False) as relay:
            start, cpu = time.perf_counter(), time.process_time()
            total = await relay.run_once()
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert total.sent == rows, total
        return rows / elapsed, cpu / rows
    finally:
        drop(engine, outbox.table)


def drop(engine: Any, table: str) -> None:
    with engine.begin() as connection:
        connection.execute(text(f"DROP TABLE IF EXISTS {table}"))
        connection.execute(text(f"DROP TABLE IF EXISTS {table}_keys"))
        connection.execute(text(f"DROP FUNCTION IF EXISTS {table}_notify()"))


async def latency(engine: Any, queue_name: str, samples: int) -> list[float]:
    outbox = Outbox(engine, table=f"bench_outbox_{uuid.uuid4().hex[:8]}")
    outbox.create_schema()
    committed: dict[str, float] = {}
    arrived: dict[str, float] = {}
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, auto_delete=True)

        everything = asyncio.Event()

        async def on_message(message: Any) -> None:
            arrived[message.message_id] = time.monotonic()
            if len(arrived) == samples:
                everything.set()

        await queue.consume(on_message, no_ack=True)

        def write() -> None:
            for n in range(samples):
                with engine.begin() as tx:
                    message_id = outbox.add(tx, queue_name, {"n": n}, key=f"order:{n % 10}")
                committed[message_id] = time.monotonic()
                time.sleep(0.01)

        stop = asyncio.Event()
        async with Relay(engine, AMQP_URL, table=outbox.table, poll=5.0) as relay:
            running = asyncio.create_task(relay.run(stop))
            await asyncio.sleep(0.3)
            writer = threading.Thread(target=write)
            writer.start()
            await everything.wait()
            await asyncio.to_thread(writer.join)
            stop.set()
            await running
        return [arrived[i] - committed[i] for i in committed]
    finally:
        await connection.close()
        drop(engine, outbox.table)


def main(argv: list[str]) -> None:
    options = parser("outbox", __doc__)
    options.add_argument("--rows", type=int, default=5000)
    options.add_argument("--keys", type=int, default=100)
    options.add_argument("--samples", type=int, default=200)
    options.add_argument("--repeats", type=int, default=3)
    asyncio.run(run(options.parse_args(argv)))


async def run(args: argparse.Namespace) -> None:
    engine = create_engine(POSTGRES_URL, pool_size=8)
    connection = await aio_pika.connect(AMQP_URL)
    queue_name = f"bench-outbox-{uuid.uuid4().hex[:8]}"
    channel = await connection.channel()
    queue = await channel.declare_queue(queue_name, auto_delete=False)
    try:
        floors, relays, nulls = [], [], []
        for _ in range(args.repeats):
            floors.append(await floor(messages(queue_name, args.rows, args.keys), 64))
            relays.append(await relay_rate(engine, queue_name, args.rows, args.keys))
            await queue.purge()
            nulls.append(
                await relay_rate(engine, queue_name, args.rows, args.keys, NullPublisher())
            )
        waits = sorted(await latency(engine, f"{queue_name}-latency", args.samples))
    finally:
        await queue.delete(if_unused=False, if_empty=False)
        await connection.close()
        engine.dispose()
    best_floor, best_relay = max(rate for rate, _ in floors), max(rate for rate, _ in relays)
    floor_cpu, relay_cpu = (min(cpu for _, cpu in runs) * 1e6 for runs in (floors, relays))
    null_cpu = min(cpu for _, cpu in nulls) * 1e6
    print(f"python {platform.python_version()}, {args.rows} rows over {args.keys} keys")
    print(
        f"raw confirm-publish floor : {best_floor:8.0f} msg/s  client CPU {floor_cpu:5.1f} us/msg"
    )
    print(
        f"relay (PostgreSQL)        : {best_relay:8.0f} msg/s  ({best_relay / best_floor:.2f}x)"
        f"  client CPU {relay_cpu:5.1f} us/msg"
    )
    print(f"relay, null publisher     : {' ' * 23}client CPU {null_cpu:5.1f} us/msg")
    p50 = statistics.median(waits) * 1000
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1000
    print(
        f"commit-to-arrival, LISTEN/NOTIFY: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
        f"({len(waits)} samples)"
    )
