"""The transactional consumer on Django's connection, through Redis Streams, in a process of its
own per database (see tests/db/django_project.py): ``python -m
tests.messaging.django_consumer_scenarios`` prints what it found as one JSON object.

The handler writes an ORM row, takes a unit of stock with ``decrement`` and adds an outbox row,
all on the connection it is handed; one message's first run raises after its writes. Copies of
two messages are delivered twice."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import redis
from django.db import connection, connections, models

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, redis_streams
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.state import decrement
from tests.db.django_scenarios import (
    OUTBOX,
    RECORDS,
    SUFFIX,
    count,
    guard,
    mideng_tables,
    outbox,
)
from tests.messaging.running import consume_until
from tests.services import REDIS_URL

STREAM, GROUP = f"mideng-dj-{SUFFIX}", f"group-{SUFFIX}"


class Product(models.Model):
    stock: Any = models.IntegerField()

    class Meta:
        app_label = "scenario"
        db_table = f"cons_product_{SUFFIX}"


class Move(models.Model):
    product: Any = models.ForeignKey(Product, on_delete=models.CASCADE)
    order_key: Any = models.CharField(max_length=40)

    class Meta:
        app_label = "scenario"
        db_table = f"cons_move_{SUFFIX}"


runs: Counter[str] = Counter()
handed: list[bool] = []  # whether each run was handed its thread's Django connection


def deduct(message: Message, conn: Any) -> None:
    key = message.headers[IDEMPOTENCY_KEY]
    runs.update([key])
    handed.append(conn is connections["default"] and not conn.get_autocommit())
    product = Product.objects.get()
    Move.objects.create(product=product, order_key=key)
    decrement(conn, Product, product.pk, "stock", 1)
    outbox.add(conn, "stock.moved", {"order": key}, key=key)
    if key == "order:bad" and runs[key] == 1:
        raise LookupError("no such product yet")  # its row, stock and message roll back


def publish(*keys: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for key in keys:
            client.xadd(STREAM, {"body": b"{}", IDEMPOTENCY_KEY: key})
    finally:
        client.close()


def consumed(guard: Guard) -> dict[str, Any]:
    consumer = IdempotentConsumer(guard, "stock", deduct, engine="default", retry_delay=0.2)
    publish("order:1", "order:2", "order:1", "order:bad", "order:2")

    def moves() -> int:
        return int(Move.objects.count())

    async def done() -> bool:
        # Read in a thread of its own: this thread's connection is the test's, not Django's
        # thread for async code, and an open transaction here would hide the commits.
        return await asyncio.to_thread(_settled, moves)

    def consume(stop: asyncio.Event) -> Any:
        return redis_streams.consume(
            consumer, REDIS_URL, stream=STREAM, group=GROUP, name="m-0", stop=stop, block=0.2
        )

    asyncio.run(consume_until(consume, done, timeout=60))
    where = "scope = %s AND status = %s"
    return {
        "runs": dict(runs),
        "moves": sorted(Move.objects.values_list("order_key", flat=True)),
        "stock": Product.objects.get().stock,
        "outbox": count(OUTBOX, "aggregateid LIKE %s", "order:%"),
        "records": count(RECORDS, where, "stock", "succeeded"),
        "handed": all(handed) and len(handed) == 4,
    }


def _settled(moves: Any) -> bool:
    try:
        if moves() != 3:
            return False
        client = redis.Redis.from_url(REDIS_URL)
        try:
            pending = client.xpending(STREAM, GROUP)["pending"]
        finally:
            client.close()
        return int(pending) == 0
    finally:
        connection.close()


def refused(guard: Guard) -> dict[str, str]:
    from mideng.errors import ConfigurationError

    found = {}

    async def handler(message: Message, conn: Any) -> None:
        return None

    def alias() -> None:
        IdempotentConsumer(guard, "stock", deduct, engine="nowhere")

    def coroutine() -> None:
        IdempotentConsumer(guard, "stock", handler, engine="default")

    for name, make in {"alias": alias, "coroutine": coroutine}.items():
        try:
            make()
            found[name] = "not refused"
        except ConfigurationError as exc:
            found[name] = str(exc)
    return found


def main() -> None:
    with mideng_tables(Product, Move):
        Product.objects.create(stock=10)
        try:
            found = {"consumed": consumed(guard), "refused": refused(guard)}
        finally:
            client = redis.Redis.from_url(REDIS_URL)
            client.delete(STREAM)
            client.close()
    print(json.dumps(found))


if __name__ == "__main__":
    main()
