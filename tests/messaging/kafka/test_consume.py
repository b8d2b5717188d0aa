"""The Kafka adapter against the Tansu broker: a poison record is tried N times (its partition
rewound each time), copied to the dead topic, and the partition goes on past it; a rebalance
in the middle of a batch never has a record handled by two members; stop commits the batch in
hand; the addresses and options it accepts and refuses."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.messaging import Ack, IdempotentConsumer, Message, Verdict
from mideng.messaging import kafka as adapter
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames, KafkaBroker
from tests.helpers.storm import wait_for
from tests.messaging.kafka.conftest import PARTITIONS, KafkaSide

pytestmark = pytest.mark.slow


async def until(condition: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def consuming(consumer: Any, side: KafkaSide, stop: asyncio.Event, **extra: Any) -> None:
    await adapter.consume(consumer, side.url, stop=stop, **{**side.adapter(), **extra})


def settled(side: KafkaSide) -> None:
    wait_for(side.settled, 30, f"every offset committed ({side.state()})", 0.2)


def test_poison_is_tried_n_times_copied_to_the_dead_topic_and_passed(
    broker_names: BrokerNames, kafka_broker: KafkaBroker
) -> None:
    side = KafkaSide(broker_names.kafka(kafka_broker))
    dead = KafkaSide(broker_names.kafka(kafka_broker, "orders-dead"))
    tries: list[str] = []

    def handler(message: Message) -> None:
        tries.append(message.headers["idempotency-key"])
        if message.headers["idempotency-key"] == "order:poison":
            raise ValueError("stock row is locked forever")

    guard = Guard(MemoryStore(), lease=5)
    consumer = IdempotentConsumer(guard, "stock", handler, max_attempts=3, retry_delay=0.05)
    side.publish([("order:poison", b"{}")] + [(f"order:{n}", b"{}") for n in range(20)])

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(consumer, side, stop, dead_topic=dead.names.topic))
        await until(lambda: tries.count("order:poison") == 3 and len(set(tries)) == 21)
        await asyncio.to_thread(side.publish, [("order:late", b"{}")])
        await until(lambda: "order:late" in tries)
        await asyncio.to_thread(settled, side)
        stop.set()
        await asyncio.wait_for(task, 20)

    asyncio.run(scenario())
    assert tries.count("order:poison") == 3
    assert Counter(k for k in tries if k != "order:poison") == dict.fromkeys(
        [f"order:{n}" for n in range(20)] + ["order:late"], 1
    )
    copies = asyncio.run(read_all(kafka_broker, dead.names.topic, 1))
    assert [dict(c.headers)["idempotency-key"] for c in copies] == [b"order:poison"]
    assert b"failed 3 time(s)" in dict(copies[0].headers)[adapter.DEAD_LETTER_REASON]


async def read_all(broker: KafkaBroker, topic: str, count: int) -> list[Any]:
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

    reader = AIOKafkaConsumer(
        topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
    )
    await reader.start()
    found: list[Any] = []
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while len(found) < count and asyncio.get_running_loop().time() < deadline:
            for records in (await reader.getmany(timeout_ms=500)).values():
                found.extend(records)
    finally:
        await reader.stop()
    return found


class Counting:
    """Acks everything, slowly, counting each record it was handed."""

    def __init__(self, handled: Counter[str], pause: float) -> None:
        self.handled = handled
        self.pause = pause
        self.busy = asyncio.Event()

    async def handle(self, message: Message) -> Verdict:
        return (await self.handle_batch([message]))[0]

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.busy.set()
        self.handled.update(str(m.id) for m in messages)
        await asyncio.sleep(self.pause)
        return [Ack(ran=True)] * len(messages)


def test_a_rebalance_mid_batch_hands_no_record_to_two_members(kafka_side: KafkaSide) -> None:
    kafka_side.publish([(f"order:{n}", b"{}") for n in range(30)])
    handled: Counter[str] = Counter()
    # A batch outlasts the rebalance it meets: the old member is still on it when it starts.
    first, second = Counting(handled, 0.6), Counting(handled, 0.6)

    async def scenario() -> None:
        stop = asyncio.Event()
        one = asyncio.create_task(consuming(first, kafka_side, stop, batch=5))
        await asyncio.wait_for(first.busy.wait(), 30)
        # Joins while the first member is inside a batch: the group rebalances under it.
        two = asyncio.create_task(consuming(second, kafka_side, stop, batch=5))
        await until(lambda: len(handled) == 30, 60)
        await asyncio.to_thread(settled, kafka_side)
        stop.set()
        await asyncio.wait_for(asyncio.gather(one, two), 30)

    asyncio.run(scenario())
    assert second.busy.is_set()  # the second member did get partitions
    assert len(handled) == 30
    assert [record for record, times in handled.items() if times != 1] == []
    topic = kafka_side.names.topic
    assert {record.rsplit(":", 2)[0] for record in handled} == {topic}
    assert {int(record.rsplit(":", 2)[1]) for record in handled} <= set(range(PARTITIONS))


def test_stop_commits_the_batch_in_hand(kafka_side: KafkaSide) -> None:
    kafka_side.publish([(f"order:{n}", b"{}") for n in range(10)])
    handled: Counter[str] = Counter()
    member = Counting(handled, 1.0)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(member, kafka_side, stop, batch=100))
        await asyncio.wait_for(member.busy.wait(), 30)
        stop.set()  # mid-batch
        await asyncio.wait_for(task, 20)

    asyncio.run(scenario())
    lag = kafka_side.lag()
    committed = sum(kafka_side.ends.values()) - sum(lag.values())
    assert committed == len(handled) > 0  # what was handled is committed, nothing more


def test_stop_cuts_a_long_fetch_short(kafka_side: KafkaSide) -> None:
    # Nothing to read and a 120 s poll: without stop racing the fetch, consume would sit in
    # getmany (or a rebalance's wait) for that long after stop is set.
    kafka_side.publish([("order:1", b"{}")])
    handled: Counter[str] = Counter()
    member = Counting(handled, 0.0)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(member, kafka_side, stop, poll_timeout=120.0))
        await asyncio.wait_for(member.busy.wait(), 30)
        await asyncio.to_thread(settled, kafka_side)  # committed: the next fetch has begun
        stop.set()
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert sum(handled.values()) == 1


def test_addresses_and_options() -> None:
    assert adapter.bootstrap_servers("127.0.0.1:9092") == "127.0.0.1:9092"
    assert adapter.bootstrap_servers("kafka://a:1, kafka://b:2/") == "a:1,b:2"
    for bad in ["", "http://a:1", "kafka://a:1/topic"]:
        with pytest.raises(ConfigurationError, match="not a Kafka address"):
            adapter.bootstrap_servers(bad)
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", lambda m: None)
    stop = asyncio.Event()
    with pytest.raises(ConfigurationError, match="commit offsets before processing"):
        asyncio.run(
            adapter.consume(
                consumer,
                "kafka://127.0.0.1:1",
                topic="t",
                group="g",
                stop=stop,
                enable_auto_commit=True,
            )
        )
    with pytest.raises(ConfigurationError, match="batch"):
        asyncio.run(
            adapter.consume(consumer, "127.0.0.1:1", topic="t", group="g", stop=stop, batch=0)
        )
    with pytest.raises(ConfigurationError, match="close_timeout"):
        asyncio.run(
            adapter.consume(
                consumer, "127.0.0.1:1", topic="t", group="g", stop=stop, close_timeout=-1
            )
        )
