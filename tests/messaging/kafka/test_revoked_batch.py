"""A fetch hands several partitions' batches at once; a rebalance that revokes them while the
first is being handled must see none of the others handled by the old owner afterwards. aiokafka
keeps the old assignment in place from the revocation until the new one arrives, so a batch
started in that window was handed over, and (when the new assignment arrived while its handler
ran) a Retry's rewind of a partition no longer assigned raised out of ``consume``."""

from __future__ import annotations

import asyncio
import importlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest

from mideng.messaging import Ack, Message, Retry, Verdict
from tests.messaging.base.broker import until
from tests.messaging.kafka.broker import PARTITIONS, Kafka

adapter = importlib.import_module("mideng.messaging.kafka.consume")

pytestmark = pytest.mark.slow


def assignors() -> tuple[type[Any], type[Any]]:
    """The same protocol for both members; the newcomer's metadata says so, and every
    partition goes to it: each partition the first member had in hand moves away."""
    from aiokafka.coordinator.assignors.abstract import (  # type: ignore[import-untyped]
        AbstractPartitionAssignor,
    )
    from aiokafka.coordinator.protocol import (  # type: ignore[import-untyped]
        ConsumerProtocolMemberAssignment,
        ConsumerProtocolMemberMetadata,
    )

    class ToTheNewcomer(AbstractPartitionAssignor):  # type: ignore[misc]
        name = "to-the-newcomer"
        version = 0
        user_data = b""

        @classmethod
        def assign(cls, cluster: Any, members: Mapping[str, Any]) -> dict[str, Any]:
            newcomers = sorted(m for m, meta in members.items() if meta.user_data == b"new")
            owner = (newcomers or sorted(members))[0]
            topics = {topic for meta in members.values() for topic in meta.subscription}
            owned = sorted((t, sorted(cluster.partitions_for_topic(t))) for t in topics)
            return {
                member: ConsumerProtocolMemberAssignment(
                    cls.version, owned if member == owner else [], b""
                )
                for member in members
            }

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> Any:
            return ConsumerProtocolMemberMetadata(cls.version, list(topics), cls.user_data)

        @classmethod
        def on_assignment(cls, assignment: Any) -> None:
            return None

    class Newcomer(ToTheNewcomer):
        user_data = b"new"

    return ToTheNewcomer, Newcomer


class OldOwner:
    """Holds its first batch until its partitions are being revoked; a batch handed to it
    after the revocation waits for the new assignment, then asks for a retry."""

    def __init__(self, handled: Counter[str]) -> None:
        self.handled = handled
        self.revoking = asyncio.Event()
        self.assigned = asyncio.Event()
        self.busy = asyncio.Event()
        self.after_revocation: list[str | None] = []

    async def handle(self, message: Message) -> Verdict:
        return (await self.handle_batch([message]))[0]

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.handled.update(str(m.id) for m in messages)
        if not self.busy.is_set():
            self.busy.set()
            await asyncio.wait_for(self.revoking.wait(), 30)
            return [Ack(ran=True)] * len(messages)
        if self.revoking.is_set() and not self.assigned.is_set():
            self.after_revocation.extend(m.id for m in messages)
            await asyncio.wait_for(self.assigned.wait(), 30)
            return [Retry(0.1, "held elsewhere")] * len(messages)
        return [Ack(ran=True)] * len(messages)


class Newcomer:
    def __init__(self, handled: Counter[str]) -> None:
        self.handled = handled

    async def handle(self, message: Message) -> Verdict:
        return (await self.handle_batch([message]))[0]

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.handled.update(str(m.id) for m in messages)
        return [Ack(ran=True)] * len(messages)


async def publish_one_per_partition(side: Kafka) -> None:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    producer = AIOKafkaProducer(bootstrap_servers=side.names.bootstrap, acks="all")
    await producer.start()
    try:
        for partition in range(PARTITIONS):
            acked = await producer.send_and_wait(
                side.names.topic, b"{}", key=f"order:{partition}".encode(), partition=partition
            )
            side.ends[partition] = acked.offset + 1
    finally:
        await producer.stop()


def test_no_batch_is_handled_by_its_old_owner_after_the_revocation(
    kafka_side: Kafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    first: Counter[str] = Counter()
    second: Counter[str] = Counter()
    old, new = OldOwner(first), Newcomer(second)
    listener = adapter._Member.listener

    def noted(member: Any, aiokafka: Any) -> Any:
        made = listener(member, aiokafka)
        if member.consumer is old:
            revoked, assigned = made.on_partitions_revoked, made.on_partitions_assigned

            async def on_revoked(partitions: Any) -> None:
                if partitions:
                    old.revoking.set()
                await revoked(partitions)

            async def on_assigned(partitions: Any) -> None:
                if old.revoking.is_set():
                    old.assigned.set()
                await assigned(partitions)

            made.on_partitions_revoked, made.on_partitions_assigned = on_revoked, on_assigned
        return made

    monkeypatch.setattr(adapter._Member, "listener", noted)
    keep, take = assignors()

    async def scenario() -> None:
        await publish_one_per_partition(kafka_side)
        stop = asyncio.Event()
        one = asyncio.create_task(
            kafka_side.consume(old, stop, partition_assignment_strategy=(keep,))
        )
        await asyncio.wait_for(old.busy.wait(), 30)
        two = asyncio.create_task(
            kafka_side.consume(new, stop, partition_assignment_strategy=(take,))
        )
        await until(lambda: one.done() or len(set(first) | set(second)) == PARTITIONS, 60)
        if not one.done():
            await asyncio.to_thread(kafka_side.until_settled)
        stop.set()
        await asyncio.wait_for(asyncio.gather(one, two), 30)

    asyncio.run(scenario())
    assert len(first) >= 1  # the batch in hand when the rebalance came
    assert old.after_revocation == []
    assert kafka_side.lag() == dict.fromkeys(kafka_side.ends, 0)
