"""A batch is decided while the next one is read and decided: the adapter keeps two batches in
hand, each acked only after it was decided, their handlers one at a time; stop settles both;
a retry keeps its delay; duplicates across the two batches still run once; a transactional
consumer decides one batch at a time."""

from __future__ import annotations

import asyncio
import importlib
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aredis
from sqlalchemy import create_engine, text

from mideng import Guard, open_store
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.messaging.redis_streams.held import HeldStore
from tests.messaging.running import consume_until
from tests.services import REDIS_URL

redis_streams = importlib.import_module("mideng.messaging.redis_streams.consume")

KEY = "idempotency-key"


async def publish(stream: str, keys: list[str]) -> None:
    client: Any = aredis.from_url(REDIS_URL)
    for key in keys:
        await client.xadd(stream, {"body": b"x", KEY: key})
    await client.aclose()


async def state(stream: str, group: str) -> tuple[int, int]:
    """The group's lag (entries never read) and pending count (read, not acked)."""
    client: Any = aredis.from_url(REDIS_URL)
    try:
        groups = await client.xinfo_groups(stream)
        pending = int((await client.xpending(stream, group))["pending"])
    finally:
        await client.aclose()
    return int(groups[0]["lag"] or 0), pending


def consuming(consumer: IdempotentConsumer, names: Any, stop: asyncio.Event, **kw: Any) -> Any:
    options: dict[str, Any] = {"batch": 2, **kw}
    return redis_streams.consume(
        consumer, REDIS_URL, stream=names.stream, group=names.group, name="w1", stop=stop, **options
    )


def test_the_next_batch_runs_while_one_is_decided_and_each_is_acked_after_it(
    broker_names: BrokerNames,
) -> None:
    names = broker_names.redis_stream("overlap")
    store = HeldStore()
    seen_pending: list[int] = []
    runs: list[str] = []

    async def handler(message: Message) -> None:
        key = message.headers[KEY]
        runs.append(key)
        if key == "c":
            # One batch at a time would never get here: a and b's completion waits for c.
            # a and b are not acked yet: they and this batch are pending.
            seen_pending.append((await state(names.stream, names.group))[1])
            store.go.set()

    consumer = IdempotentConsumer(Guard(store), "stock", handler)

    async def scenario() -> None:
        await publish(names.stream, ["a", "b", "c", "d", "e"])

        async def done() -> bool:
            return len(runs) == 5 and (await state(names.stream, names.group)) == (0, 0)

        await consume_until(lambda stop: consuming(consumer, names, stop), done)

    asyncio.run(scenario())
    assert not store.starved
    assert runs == ["a", "b", "c", "d", "e"]
    assert seen_pending == [4]
    # c and d were claimed, run and completed while a and b's completion was held back.
    assert store.events.index("claim c d") < store.events.index("completed a b")
    assert store.events.index("completed c d") < store.events.index("completed a b")


def test_stop_while_a_batch_is_decided_settles_both_and_leaves_the_rest_unread(
    broker_names: BrokerNames,
) -> None:
    names = broker_names.redis_stream("overlap")
    store = HeldStore()
    stop = asyncio.Event()
    runs: list[str] = []

    async def handler(message: Message) -> None:
        key = message.headers[KEY]
        runs.append(key)
        if key == "c":
            stop.set()  # a and b not completed yet
            store.go.set()

    consumer = IdempotentConsumer(Guard(store), "stock", handler)

    async def scenario() -> tuple[int, int]:
        await publish(names.stream, ["a", "b", "c", "d", "e", "f"])
        await asyncio.wait_for(consuming(consumer, names, stop), 15)
        return await state(names.stream, names.group)

    lag, pending = asyncio.run(scenario())
    assert not store.starved
    assert runs == ["a", "b", "c", "d"]
    assert (lag, pending) == (2, 0)  # both batches acked; e and f never read


def test_duplicates_across_the_two_batches_in_hand_run_once(broker_names: BrokerNames) -> None:
    names = broker_names.redis_stream("overlap")
    store = HeldStore()
    runs: Counter[str] = Counter()

    async def handler(message: Message) -> None:
        key = message.headers[KEY]
        runs.update([key])
        if key == "c":
            store.go.set()

    # The copy of a in the next batch finds a in flight (its completion held back): it is
    # retried shortly after, and then acked as a duplicate without running.
    consumer = IdempotentConsumer(Guard(store), "stock", handler, in_flight_delay=0.05)

    async def scenario() -> None:
        await publish(names.stream, ["a", "b", "a", "c", "b", "d"])

        async def done() -> bool:
            return len(runs) == 4 and (await state(names.stream, names.group)) == (0, 0)

        await consume_until(lambda stop: consuming(consumer, names, stop), done)

    asyncio.run(scenario())
    assert not store.starved
    assert runs == Counter({"a": 1, "b": 1, "c": 1, "d": 1})


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_handlers_of_the_two_batches_in_hand_never_overlap_and_keep_the_read_order(
    broker_names: BrokerNames, kind: str
) -> None:
    names = broker_names.redis_stream("overlap")
    running, most, order = [0], [0], list[str]()
    lock = threading.Lock()

    def enter(key: str) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            order.append(key)

    def leave() -> None:
        with lock:
            running[0] -= 1

    def sync_handler(message: Message) -> None:
        enter(message.headers[KEY])
        time.sleep(0.002)  # another handler starting now would be seen
        leave()

    async def async_handler(message: Message) -> None:
        enter(message.headers[KEY])
        await asyncio.sleep(0.002)  # the other batch's task runs here, but not its handler
        leave()

    class SlowStore(MemoryStore):
        """Completions that take a while, so the next batch is decided beside them."""

        claimed, completed, overlapped = 0, 0, False

        async def aclaim_many(self, reqs: Any) -> Any:
            # A batch claimed while the one before is not completed yet.
            self.overlapped = self.overlapped or self.claimed > self.completed
            self.claimed += 1
            return await super().aclaim_many(reqs)

        async def acomplete_many(self, items: Any) -> Any:
            await asyncio.sleep(0.01)
            done = await super().acomplete_many(items)
            self.completed += 1
            return done

    handler = sync_handler if kind == "def" else async_handler
    store = SlowStore()
    consumer = IdempotentConsumer(Guard(store), "stock", handler)
    keys = [f"k{n}" for n in range(60)]

    async def scenario() -> None:
        await publish(names.stream, keys)

        async def done() -> bool:
            return len(order) == 60 and (await state(names.stream, names.group)) == (0, 0)

        await consume_until(lambda stop: consuming(consumer, names, stop, batch=5), done)

    asyncio.run(scenario())
    assert order == keys
    assert most == [1]
    assert store.overlapped  # a batch was claimed before the one before it was completed


def test_a_failed_run_in_the_batch_in_hand_waits_its_retry_delay(
    broker_names: BrokerNames,
) -> None:
    names = broker_names.redis_stream("overlap")
    ran: dict[str, list[float]] = {}

    async def handler(message: Message) -> None:
        key = message.headers[KEY]
        ran.setdefault(key, []).append(time.monotonic())
        if key == "a" and len(ran[key]) == 1:
            raise RuntimeError("the first try fails")

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler, retry_delay=0.5)

    async def scenario() -> None:
        await publish(names.stream, ["a", "b", "c", "d", "e", "f"])

        async def done() -> bool:
            if len(ran.get("a", [])) < 2:
                return False
            return (await state(names.stream, names.group)) == (0, 0)

        await consume_until(lambda stop: consuming(consumer, names, stop), done)

    asyncio.run(scenario())
    first, second = ran["a"]
    assert second - first >= 0.5
    assert all(len(ran[k]) == 1 for k in "bcdef")


def test_a_transactional_consumer_decides_one_batch_at_a_time(
    broker_names: BrokerNames, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = broker_names.redis_stream("overlap")
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    store, engine = open_store(url), create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE moves (order_key VARCHAR(64) NOT NULL)"))

    def deduct(message: Message, conn: Any) -> None:
        conn.execute(text("INSERT INTO moves VALUES (:k)"), {"k": message.headers[KEY]})

    deciding, most = [0], [0]
    decide = redis_streams.decide

    async def counted(consumer: Any, messages: Any) -> Any:
        deciding[0] += 1
        most[0] = max(most[0], deciding[0])
        try:
            return await decide(consumer, messages)
        finally:
            deciding[0] -= 1

    monkeypatch.setattr(redis_streams, "decide", counted)
    consumer = IdempotentConsumer(Guard(store), "stock", deduct, engine=engine)
    keys = [f"k{n}" for n in range(12)]

    async def scenario() -> None:
        await publish(names.stream, keys)

        async def done() -> bool:
            with engine.connect() as conn:
                moved = conn.execute(text("SELECT COUNT(*) FROM moves")).scalar_one()
            return moved == 12 and (await state(names.stream, names.group)) == (0, 0)

        await consume_until(lambda stop: consuming(consumer, names, stop), done)

    try:
        asyncio.run(scenario())
        with engine.connect() as conn:
            moved = [r[0] for r in conn.execute(text("SELECT order_key FROM moves"))]
    finally:
        store.close()
        engine.dispose()
    assert sorted(moved) == sorted(keys)
    assert most == [1]
