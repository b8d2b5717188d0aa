"""The Kafka adapter's decisions on a scripted client, step by step: what is committed, where a
partition is rewound and paused, that a revocation waits for the batch in hand, that a batch of
a partition no longer assigned is never handled nor committed, and what a failed dead-letter
copy or a consumer that raises does."""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from mideng.messaging import Ack, DeadLetter, Message, Retry, Verdict

adapter = importlib.import_module("mideng.messaging.kafka.consume")


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    value: bytes | None = b"{}"
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = (("idempotency-key", b"order:1"),)


@dataclass
class Client:
    """What _Member calls on an AIOKafkaConsumer, recorded."""

    assigned: set[Any] = field(default_factory=lambda: {0})
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def assignment(self) -> set[Any]:
        return self.assigned

    async def commit(self, offsets: dict[Any, int]) -> None:
        self.calls.append(("commit", dict(offsets)))

    def seek(self, partition: Any, offset: int) -> None:
        self.calls.append(("seek", (partition, offset)))

    def pause(self, partition: Any) -> None:
        self.calls.append(("pause", partition))

    def resume(self, partition: Any) -> None:
        self.calls.append(("resume", partition))


class Scripted:
    """A consumer answering each batch with the given verdicts, optionally waiting first."""

    def __init__(self, verdicts: list[Verdict], gate: asyncio.Event | None = None) -> None:
        self.verdicts = verdicts
        self.gate = gate
        self.batches: list[list[str | None]] = []
        self.entered = asyncio.Event()

    async def handle(self, message: Message) -> Verdict:
        return (await self.handle_batch([message]))[0]

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.batches.append([m.id for m in messages])
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        return self.verdicts[: len(messages)]


def records(*offsets: int) -> list[Record]:
    return [Record("orders", 0, offset) for offset in offsets]


def member(consumer: Any, client: Client, dead_topic: str | None = None) -> Any:
    made = adapter._Member(consumer, dead_topic, "127.0.0.1:1", asyncio.Event(), 1.0, True)
    made.client = client
    return made


def test_all_settled_commits_past_the_last() -> None:
    client = Client()
    verdicts: list[Verdict] = [Ack(True), Ack(False), DeadLetter("poison")]
    consumer = Scripted(verdicts)
    asyncio.run(member(consumer, client).process(0, records(10, 11, 12)))
    assert consumer.batches == [["orders:0:10", "orders:0:11", "orders:0:12"]]
    assert client.calls == [("commit", {0: 13})]


def test_a_retry_commits_before_it_rewinds_to_it_and_pauses() -> None:
    client = Client()
    consumer = Scripted([Ack(True), Retry(0.2, "held"), Ack(True)])
    made = member(consumer, client)
    asyncio.run(made.process(0, records(10, 11, 12)))
    assert client.calls == [("commit", {0: 11}), ("seek", (0, 11)), ("pause", 0)]
    made.resume_due()
    assert ("resume", 0) not in client.calls  # not before its delay
    time.sleep(0.25)
    made.resume_due()
    assert client.calls[-1] == ("resume", 0)


def test_a_retry_first_commits_nothing() -> None:
    client = Client()
    asyncio.run(member(Scripted([Retry(1, "x"), Ack(True)]), client).process(0, records(5, 6)))
    assert client.calls == [("seek", (0, 5)), ("pause", 0)]


def test_a_consumer_that_raises_rewinds_the_whole_batch() -> None:
    class Raises(Scripted):
        async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
            raise RuntimeError("store down")

    client = Client()
    asyncio.run(member(Raises([]), client).process(0, records(5, 6)))
    assert client.calls == [("seek", (0, 5)), ("pause", 0)]


def test_a_batch_of_a_partition_no_longer_assigned_is_abandoned() -> None:
    client = Client(assigned={1})
    consumer = Scripted([Ack(True)])
    asyncio.run(member(consumer, client).process(0, records(5)))
    assert consumer.batches == []
    assert client.calls == []


def test_a_revocation_waits_for_the_batch_in_hand_to_commit() -> None:
    aiokafka = pytest.importorskip("aiokafka")
    client = Client()
    gate = asyncio.Event()
    consumer = Scripted([Ack(True)], gate)
    made = member(consumer, client)
    listener = made.listener(aiokafka)

    async def scenario() -> list[str]:
        order: list[str] = []
        batch = asyncio.create_task(made.process(0, records(7)))
        await consumer.entered.wait()

        async def revoke() -> None:
            await listener.on_partitions_revoked([0])
            order.append("revoked")

        revocation = asyncio.create_task(revoke())
        await asyncio.sleep(0.1)
        order.append(f"calls before the batch ends: {len(client.calls)}")
        assert not revocation.done()
        gate.set()
        await asyncio.gather(batch, revocation)
        order.append(f"calls after: {client.calls}")
        return order

    assert asyncio.run(scenario()) == [
        "calls before the batch ends: 0",
        "revoked",
        "calls after: [('commit', {0: 8})]",
    ]


def test_a_failed_dead_letter_copy_rewinds_instead_of_skipping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Producer:
        def __init__(self, **options: Any) -> None:
            pass

        async def start(self) -> None:
            return None

        async def send_and_wait(self, *args: Any, **kwargs: Any) -> None:
            raise ConnectionError("broker gone")

        async def stop(self) -> None:
            return None

    aiokafka = pytest.importorskip("aiokafka")
    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", Producer)
    client = Client()
    made = member(Scripted([Ack(True), DeadLetter("poison")]), client, dead_topic="dead")
    asyncio.run(made.process(0, records(3, 4)))
    assert client.calls == [("commit", {0: 4}), ("seek", (0, 4)), ("pause", 0)]
    asyncio.run(made.close())


def test_headers_body_and_id_of_a_record() -> None:
    record = Record("orders", 2, 41, None, b"k", (("idempotency-key", b"order:9"), ("n", b"1")))
    message = adapter.message_of(record)
    assert message.body == b""
    assert message.headers == {"idempotency-key": "order:9", "n": "1"}
    assert (message.id, message.attempt, message.raw) == ("orders:2:41", None, record)
