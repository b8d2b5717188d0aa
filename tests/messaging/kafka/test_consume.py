"""The Kafka adapter against the Tansu broker, beyond the base suite: a rebalance in the
middle of a batch never has a record handled by two members; stop commits the batch in hand
and cuts a long fetch short; the addresses and options it accepts and refuses."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.messaging import Ack, IdempotentConsumer, Message, Verdict
from mideng.messaging import kafka as adapter
from mideng.stores.memory import MemoryStore
from tests.messaging.base.broker import until
from tests.messaging.kafka.broker import PARTITIONS, Kafka

pytestmark = pytest.mark.slow


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


def test_a_rebalance_mid_batch_hands_no_record_to_two_members(kafka_side: Kafka) -> None:
    kafka_side.publish([(f"order:{n}", b"{}") for n in range(30)])
    handled: Counter[str] = Counter()
    # A batch outlasts the rebalance it meets: the old member is still on it when it starts.
    first, second = Counting(handled, 0.6), Counting(handled, 0.6)

    async def scenario() -> None:
        stop = asyncio.Event()
        one = asyncio.create_task(kafka_side.consume(first, stop, batch=5))
        await asyncio.wait_for(first.busy.wait(), 30)
        # Joins while the first member is inside a batch: the group rebalances under it.
        two = asyncio.create_task(kafka_side.consume(second, stop, batch=5))
        await until(lambda: len(handled) == 30, 60)
        await asyncio.to_thread(kafka_side.until_settled)
        stop.set()
        await asyncio.wait_for(asyncio.gather(one, two), 30)

    asyncio.run(scenario())
    assert second.busy.is_set()  # the second member did get partitions
    assert len(handled) == 30
    assert [record for record, times in handled.items() if times != 1] == []
    topic = kafka_side.names.topic
    assert {record.rsplit(":", 2)[0] for record in handled} == {topic}
    assert {int(record.rsplit(":", 2)[1]) for record in handled} <= set(range(PARTITIONS))


def test_stop_commits_the_batch_in_hand(kafka_side: Kafka) -> None:
    kafka_side.publish([(f"order:{n}", b"{}") for n in range(10)])
    handled: Counter[str] = Counter()
    member = Counting(handled, 1.0)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(kafka_side.consume(member, stop, batch=100))
        await asyncio.wait_for(member.busy.wait(), 30)
        stop.set()  # mid-batch
        await asyncio.wait_for(task, 20)

    asyncio.run(scenario())
    lag = kafka_side.lag()
    committed = sum(kafka_side.ends.values()) - sum(lag.values())
    assert committed == len(handled) > 0  # what was handled is committed, nothing more


def test_stop_cuts_a_long_fetch_short(kafka_side: Kafka) -> None:
    # Nothing to read and a 120 s poll: without stop racing the fetch, consume would sit in
    # getmany (or a rebalance's wait) for that long after stop is set.
    kafka_side.publish([("order:1", b"{}")])
    handled: Counter[str] = Counter()
    member = Counting(handled, 0.0)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(kafka_side.consume(member, stop, poll_timeout=120.0))
        await asyncio.wait_for(member.busy.wait(), 30)
        await asyncio.to_thread(kafka_side.until_settled)  # committed: the next fetch has begun
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
