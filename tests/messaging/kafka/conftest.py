from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.brokers import (  # noqa: F401  (fixtures)
    BrokerNames,
    KafkaBroker,
    KafkaNames,
    broker_names,
    kafka_broker,
)
from tests.helpers.storm import headers_of

PARTITIONS = 6


class KafkaSide:
    """A fresh topic of PARTITIONS partitions on the session's Tansu broker, and a group."""

    broker = "kafka"
    lease = 10.0

    def __init__(self, names: KafkaNames, *, batch: int = 50) -> None:
        self.names = names
        self.url = f"kafka://{names.bootstrap}"
        self.batch = batch
        # Per partition, past the last offset published: the broker's ListOffsets answer is
        # not relied on (Tansu's differs from Kafka's), the producer's acks are.
        self.ends: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
        asyncio.run(self._create())

    async def _create(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]

        admin = AIOKafkaAdminClient(bootstrap_servers=self.names.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(self.names.topic, PARTITIONS, 1)])
        finally:
            await admin.close()

    def publish(self, messages: list[tuple[str, bytes]], topic: str | None = None) -> None:
        asyncio.run(self._publish(messages, topic or self.names.topic))

    async def _publish(self, messages: list[tuple[str, bytes]], topic: str) -> None:
        from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

        producer = AIOKafkaProducer(bootstrap_servers=self.names.bootstrap, acks="all")
        await producer.start()
        try:
            sent = [
                await producer.send(
                    topic,
                    body,
                    key=key.encode(),
                    headers=[(k, v.encode()) for k, v in headers_of(key).items()],
                )
                for key, body in messages
            ]
            for acked in await asyncio.gather(*sent):
                if acked.topic == self.names.topic:
                    self.ends[acked.partition] = max(self.ends[acked.partition], acked.offset + 1)
        finally:
            await producer.stop()

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {
            "topic": self.names.topic,
            "group": self.names.group,
            "batch": self.batch,
            "poll_timeout": 0.5,
            "session_timeout_ms": 3000,
            "heartbeat_interval_ms": 500,
        }

    def lag(self) -> dict[int, int]:
        """Per partition: records after the group's committed offset."""
        return asyncio.run(self._lag())

    async def _lag(self) -> dict[int, int]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        partitions = [TopicPartition(self.names.topic, p) for p in range(PARTITIONS)]
        # A group member that never subscribes only reads the group's offsets; it never joins.
        reader = AIOKafkaConsumer(
            bootstrap_servers=self.names.bootstrap,
            group_id=self.names.group,
            enable_auto_commit=False,
        )
        await reader.start()
        try:
            committed = {tp.partition: await reader.committed(tp) for tp in partitions}
        finally:
            await reader.stop()
        return {p: end - (committed[p] or 0) for p, end in self.ends.items()}

    def state(self) -> str:
        return f"lag per partition {self.lag()}"

    def settled(self) -> bool:
        return not any(self.lag().values())


@pytest.fixture
def kafka_side(broker_names: BrokerNames, kafka_broker: KafkaBroker) -> KafkaSide:  # noqa: F811
    return KafkaSide(broker_names.kafka(kafka_broker))
