"""The transactional consumer on Django's connection, through Redis Streams, in a process of its
own per database (see tests/db/django_project.py): ``python -m
tests.messaging.django_consumer_scenarios`` prints what it found as one JSON object.

The handler writes an ORM row, takes a unit of stock with ``decrement`` and adds an outbox row,
all on the connection it is handed; one message's first run raises after its writes. Copies of
two messages are delivered twice."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
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
    quoted,
)
from tests.messaging.running import consume_until
from tests.services import REDIS_URL

STREAM, GROUP = f"mideng-dj-{SUFFIX}", f"group-{SUFFIX}"
RACE_STREAM = f"mideng-dj-race-{SUFFIX}"


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
    if key.startswith("race:"):
        # Holds the block open a moment, so the copy another process took at the same time
        # meets the record uncommitted and waits on it.
        time.sleep(0.05)


def publish(stream: str, *keys: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for key in keys:
            client.xadd(stream, {"body": b"{}", IDEMPOTENCY_KEY: key})
    finally:
        client.close()


def consume_as(member: str, stream: str, prefix: str, moves: int) -> None:
    """Consume ``stream`` as ``member`` until ``moves`` moves of keys ``prefix…`` are stored
    and nothing of the stream is pending."""
    consumer = IdempotentConsumer(guard, "stock", deduct, engine="default", retry_delay=0.2)

    async def done() -> bool:
        # Read in a thread of its own: this thread's connection is the scenario's, not Django's
        # thread for async code, and an open transaction here would hide the commits.
        return await asyncio.to_thread(_settled, stream, prefix, moves)

    def consume(stop: asyncio.Event) -> Any:
        return redis_streams.consume(
            consumer, REDIS_URL, stream=stream, group=GROUP, name=member, stop=stop, batch=1
        )

    asyncio.run(consume_until(consume, done, timeout=60))


def _settled(stream: str, prefix: str, moves: int) -> bool:
    try:
        if Move.objects.filter(order_key__startswith=prefix).count() != moves:
            return False
        client = redis.Redis.from_url(REDIS_URL)
        try:
            pending = client.xpending(stream, GROUP)["pending"]
        finally:
            client.close()
        return int(pending) == 0
    finally:
        connection.close()


def _facts(prefix: str) -> dict[str, Any]:
    where = "scope = %s AND status = %s AND " + quoted("key") + " LIKE %s"
    return {
        "moves": sorted(
            Move.objects.filter(order_key__startswith=prefix).values_list("order_key", flat=True)
        ),
        "outbox": count(OUTBOX, "aggregateid LIKE %s", f"{prefix}%"),
        "records": count(RECORDS, where, "stock", "succeeded", f"{prefix}%"),
    }


def consumed() -> dict[str, Any]:
    publish(STREAM, "order:1", "order:2", "order:1", "order:bad", "order:2")
    before = Product.objects.get().stock
    consume_as("m-0", STREAM, "order:", 3)
    return {
        "runs": dict(runs),
        "taken": before - Product.objects.get().stock,
        "handed": all(handed) and len(handed) == 4,
        **_facts("order:"),
    }


def raced() -> dict[str, Any]:
    """Two processes, each one member of the group, and every message delivered twice, the
    copies side by side so that the two members take them at the same time."""
    keys = [f"race:{i}" for i in range(10)]
    client = redis.Redis.from_url(REDIS_URL)
    client.xgroup_create(RACE_STREAM, GROUP, id="0", mkstream=True)
    client.close()
    before = Product.objects.get().stock
    command = [sys.executable, "-m", "tests.messaging.django_consumer_scenarios", "member"]
    members = [
        subprocess.Popen([*command, f"m-{i}"], stdout=subprocess.PIPE, text=True) for i in (1, 2)
    ]
    _members_reading(2)
    publish(RACE_STREAM, *(key for key in keys for _ in range(2)))
    ran: Counter[str] = Counter()
    each = []
    for member in members:
        out, _ = member.communicate(timeout=120)
        its = json.loads(out.strip().splitlines()[-1])
        each.append(sum(its.values()))
        ran.update(its)
    return {
        "runs": dict(ran),
        "each": each,
        "members": sum(1 for member in members if member.returncode == 0),
        "taken": before - Product.objects.get().stock,
        **_facts("race:"),
    }


def _members_reading(count: int) -> None:
    """Wait until ``count`` members of the group have read from it: the start line, so that
    both take the copies as they come rather than one taking all before the other is up."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        deadline = time.monotonic() + 60
        while len(client.xinfo_consumers(RACE_STREAM, GROUP)) < count:
            assert time.monotonic() < deadline, "the members never read"
            time.sleep(0.01)
    finally:
        client.close()


def member(name: str) -> None:
    consume_as(name, RACE_STREAM, "race:", 10)
    print(json.dumps(dict(runs)))


def inside_atomic() -> dict[str, Any]:
    """A message handled while Django's thread for async code holds an open atomic block
    (here: the main thread, as ``async_to_sync`` makes it): its block would be a savepoint of
    that one and its ack would come before any commit, so it is sent back, not run."""
    from asgiref.sync import async_to_sync
    from django.db import transaction

    consumer = IdempotentConsumer(guard, "stock", deduct, engine="default", retry_delay=0.2)
    message = Message(b"{}", headers={IDEMPOTENCY_KEY: "order:inside"})
    with transaction.atomic():
        verdict = async_to_sync(consumer.handle)(message)
    return {"verdict": type(verdict).__name__, "runs": runs["order:inside"]}


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
        Product.objects.create(stock=100)
        try:
            found = {
                "consumed": consumed(),
                "raced": raced(),
                "inside_atomic": inside_atomic(),
                "refused": refused(guard),
            }
        finally:
            client = redis.Redis.from_url(REDIS_URL)
            client.delete(STREAM, RACE_STREAM)
            client.close()
    print(json.dumps(found))


if __name__ == "__main__":
    if sys.argv[1:2] == ["member"]:
        try:
            member(sys.argv[2])
        finally:
            guard.store.close()
    else:
        main()
