"""Kafka as the base suite drives it: a fresh topic of PARTITIONS partitions on the session's
Tansu broker, a group, a dead topic, the group's lag, and, for a dropped connection, a Tansu
broker of the test's own that every client reaches through a proxy resetting them for real."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mideng.messaging import kafka as adapter
from mideng.messaging.headers import IDEMPOTENCY_KEY, decoded
from tests.brokers import KafkaNames, start_tansu, stop_broker, token
from tests.helpers.cut_proxy import CutProxy
from tests.messaging.base.broker import Broker, Consuming, DeadCopy, Link, Outgoing

PARTITIONS = 6


async def read_all(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The records of ``topic`` from its start, until ``count`` were read (20 s at most)."""
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

    reader = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
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


def header(record: Any, name: str) -> str | None:
    value = dict(record.headers).get(name)
    return None if value is None else decoded(value)


class Proxied(Link):
    """The consumer on a broker of its own, every connection through ``proxy``. It is
    waiting for records once its group is stable with it in: a drop before that (while it
    bootstraps) is a broker it cannot reach at its start, which consume raises."""

    broker: Kafka

    def __init__(self, broker: Kafka, proxy: CutProxy) -> None:
        self.broker, self.proxy = broker, proxy

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        return self.broker.consume(consumer, stop, **options)

    def drop(self, waiting: bool = False) -> int:
        if waiting and not asyncio.run(self.broker.joined()):
            return 0
        return self.proxy.cut_from_thread()


class Kafka(Broker):
    """A fresh topic of PARTITIONS partitions and a dead topic, and a group."""

    broker = "kafka"
    lease = 10.0
    ordered = False
    reconnect_lines = "none"

    def __init__(self, names: KafkaNames, *, batch: int = 50, logs: Path | None = None) -> None:
        self.names = names
        self.url = f"kafka://{names.bootstrap}"
        self.dead = f"{names.topic}-dead"
        self.batch = batch
        self.logs = logs  # where a broker of the test's own writes its log
        # Per partition, past the last offset published: the broker's ListOffsets answer is
        # not relied on (Tansu's differs from Kafka's), the producer's acks are.
        self.ends: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
        asyncio.run(self._create())

    async def _create(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]

        admin = AIOKafkaAdminClient(bootstrap_servers=self.names.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(self.names.topic, PARTITIONS, 1), NewTopic(self.dead, 1, 1)]
            )
        finally:
            await admin.close()

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {
            "topic": self.names.topic,
            "group": self.names.group,
            "batch": self.batch,
            "poll_timeout": 0.5,
            # Tansu numbers a group's first generation 0, and aiokafka sends no LeaveGroup
            # from it: a member that ends without a word (cancelled, killed) stays in the
            # group until its session times out, and the next member's join waits for that;
            # Tansu holds every join longer the longer the session, too. A short session
            # keeps each join to about a second.
            "session_timeout_ms": 1000,
            "heartbeat_interval_ms": 200,
        }

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        return adapter.consume(consumer, self.url, stop=stop, **{**self.adapter(), **options})

    def publish(
        self,
        messages: Sequence[Outgoing],
        headers: Mapping[str, str] | None = None,
        partition: int | None = None,
    ) -> list[str]:
        """By key over the partitions, or all to ``partition`` (fetched as one batch)."""
        records = [
            (
                body,
                None if key is None else key.encode(),
                [
                    (name, value.encode())
                    for name, value in {
                        **(headers or {}),
                        **({} if key is None else {IDEMPOTENCY_KEY: key}),
                    }.items()
                ],
            )
            for key, body in messages
        ]
        return asyncio.run(self.send(records, partition))

    def publish_batch(self, messages: Sequence[Outgoing]) -> list[str]:
        return self.publish(messages, partition=0)

    def publish_headers(self, *messages: Any) -> list[str]:
        """To one partition, so they are read in the order published."""
        pairs = [list(h.items()) if isinstance(h, Mapping) else list(h) for h in messages]
        return asyncio.run(self.send([(b"{}", None, h) for h in pairs], 0))

    async def send(
        self, records: Sequence[tuple[bytes, bytes | None, Any]], partition: int | None
    ) -> list[str]:
        """Each (value, key, headers) as a record, acked by the broker; their ids."""
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.names.bootstrap, acks="all")
        await producer.start()
        try:
            sent = [
                await producer.send(
                    self.names.topic, value, key=key, headers=headers, partition=partition
                )
                for value, key, headers in records
            ]
            acked = await asyncio.gather(*sent)
        finally:
            await producer.stop()
        for ack in acked:
            self.ends[ack.partition] = max(self.ends[ack.partition], ack.offset + 1)
        return [f"{ack.topic}:{ack.partition}:{ack.offset}" for ack in acked]

    def dead_letter_options(self) -> dict[str, Any]:
        return {"dead_topic": self.dead}

    def dead_letters(self, at_least: int = 1) -> list[DeadCopy]:
        found = asyncio.run(read_all(self.names.bootstrap, self.dead, at_least))
        return [
            DeadCopy(
                header(r, IDEMPOTENCY_KEY),
                header(r, adapter.DEAD_LETTER_REASON) or "",
                r.value or b"",
                list(r.headers),
                r,
            )
            for r in found
        ]

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

    def unsettled(self) -> int:
        return sum(self.lag().values())

    async def joined(self) -> bool:
        """The group is stable, with a member."""
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.names.bootstrap)
        await admin.start()
        try:
            [described] = await admin.describe_consumer_groups([self.names.group])
        finally:
            await admin.close()
        return any(state == "Stable" and members for _, _, state, *_, members in described.groups)

    def state(self) -> str:
        # What the topic holds, read again from its start: a record the broker acked and
        # then lost shows here, apart from what the consumers did.
        stored = asyncio.run(
            read_all(self.names.bootstrap, self.names.topic, sum(self.ends.values()))
        )
        keys = {header(record, IDEMPOTENCY_KEY) for record in stored}
        return (
            f"lag per partition {self.lag()}; the topic holds {len(stored)} of "
            f"{sum(self.ends.values())} records acked, {len(keys)} keys"
        )

    @contextlib.asynccontextmanager
    async def droppable(self) -> AsyncIterator[Link]:
        """A Tansu broker of this test's own, told to send its clients to the proxy."""
        assert self.logs is not None, "a broker of the test's own needs a place for its log"
        async with CutProxy(0) as proxy:
            log = self.logs / f"proxied-{token()}.log"
            server = await asyncio.to_thread(start_tansu, log, proxy.port)
            proxy.upstream_port = server.port
            try:
                names = KafkaNames(self.names.topic, self.names.group, f"127.0.0.1:{proxy.port}")
                own = await asyncio.to_thread(Kafka, names, batch=self.batch, logs=self.logs)
                yield Proxied(own, proxy)
            finally:
                await asyncio.to_thread(stop_broker, server.process)
