"""The Kafka adapter's task cancelled (not stopped) after its handlers ran, while their
completion was written: nothing was committed, so the group's next member reads the records
again from the last committed offset, and commits them without running the handlers again."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from mideng import Guard
from mideng.core.record import Status
from mideng.messaging import Ack, IdempotentConsumer, Message, Verdict
from mideng.stores.memory import MemoryStore
from tests.guard.gates import cancelled_at_completion
from tests.helpers.storm import headers_of
from tests.messaging.kafka.conftest import KafkaSide
from tests.messaging.kafka.test_consume import consuming
from tests.messaging.running import consume_until

pytestmark = pytest.mark.slow

#: Tansu numbers a group's first generation 0, and aiokafka sends no LeaveGroup from it: the
#: cancelled member stays in the group until its session times out, and the next member's join
#: waits for that (and Tansu holds every join longer the longer the session). A short session
#: keeps the test to a few seconds instead of ten.
SESSION = {"session_timeout_ms": 1000, "heartbeat_interval_ms": 200}


class Seen:
    """The consumer, noting what the adapter hands it and what it answers: the second
    consume must read the records again (not skip them) and settle them unrun."""

    def __init__(self, consumer: IdempotentConsumer) -> None:
        self.consumer = consumer
        self.batches: list[list[str | None]] = []
        self.verdicts: list[Verdict] = []

    async def handle(self, message: Message) -> Verdict:
        self.batches.append([message.id])
        verdict = await self.consumer.handle(message)
        self.verdicts.append(verdict)
        return verdict

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.batches.append([m.id for m in messages])
        verdicts = await self.consumer.handle_batch(messages)
        self.verdicts.extend(verdicts)
        return verdicts


async def publish_to_one_partition(side: KafkaSide, keys: list[str]) -> list[str]:
    """Each key as a record on partition 0, so that several are fetched, and handed to the
    consumer, as one batch; their ids (topic:partition:offset)."""
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    producer = AIOKafkaProducer(bootstrap_servers=side.names.bootstrap, acks="all")
    await producer.start()
    try:
        acked = [
            await producer.send_and_wait(
                side.names.topic,
                b"{}",
                key=key.encode(),
                partition=0,
                headers=[(k, v.encode()) for k, v in headers_of(key).items()],
            )
            for key in keys
        ]
    finally:
        await producer.stop()
    side.ends[0] = acked[-1].offset + 1
    return [f"{a.topic}:{a.partition}:{a.offset}" for a in acked]


@pytest.mark.parametrize("count", [1, 3])
def test_a_consume_cancelled_at_the_completion_runs_nothing_twice(
    kafka_side: KafkaSide, count: int
) -> None:
    runs: Counter[str] = Counter()

    def handler(message: Message) -> None:
        runs.update([message.headers["idempotency-key"]])

    store = MemoryStore()
    consumer = IdempotentConsumer(Guard(store, lease=60), "stock", handler)
    keys = [f"order:{n}" for n in range(count)]

    def finished() -> bool:
        done = [store.get("stock", key) for key in keys]
        return all(r is not None and r.status is Status.SUCCEEDED for r in done)

    async def scenario() -> None:
        ids = await publish_to_one_partition(kafka_side, keys)
        first = Seen(consumer)
        # One record, or a batch of those fetched together: cancelled at the first completion
        # (the helper fails unless the consume raised its cancellation).
        await cancelled_at_completion(
            store, consuming(first, kafka_side, asyncio.Event(), **SESSION)
        )
        assert first.batches == [ids]  # the whole batch was in hand when it was cancelled
        assert first.verdicts == []  # no verdict came back: the cancellation cut it short
        assert runs == Counter(keys)  # each handler ran once before the cancellation
        assert finished()  # completed before the cancellation was raised
        # Nothing was committed: the next member must read every record again.
        assert await asyncio.to_thread(kafka_side.lag) == kafka_side.ends

        second = Seen(consumer)

        async def committed() -> bool:
            return not any((await asyncio.to_thread(kafka_side.lag)).values())

        await consume_until(lambda stop: consuming(second, kafka_side, stop, **SESSION), committed)
        # Read again from the uncommitted offset, and settled as duplicates, unrun.
        assert [i for batch in second.batches for i in batch] == ids
        assert second.verdicts == [Ack(ran=False)] * count

    asyncio.run(scenario())
    assert runs == Counter(keys)  # each key ran once: the records read again were committed unrun
    assert finished()
