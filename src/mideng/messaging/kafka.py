"""Kafka: a consumer group member (aiokafka) feeding an IdempotentConsumer, batch by batch.

    stop = asyncio.Event()
    await kafka.consume(consumer, "kafka://127.0.0.1:9092", topic="orders.paid",
                        group="stock", stop=stop)

Kafka redelivers by offset: whatever a group member read but had not committed when it died,
or when its partitions moved to another member in a rebalance, is read again by the next
owner. So each partition's fetched records go to ``handle_batch`` (one store round trip for
the claims), and the partition's offset is committed only after that, past every record that
was settled: acked (run now, or a duplicate, which is committed too) or dead-lettered. Kafka
cannot hand one record back, so a ``Retry`` stops the partition there: the offset is
committed up to it, the partition is rewound to it and paused for the verdict's delay; the
records after it were already decided and come back as duplicates, acked without running.

A revoked partition is never committed by its old owner after the revocation: the rebalance
waits (``on_partitions_revoked``) for the batch in hand to be committed, and a batch whose
partition is no longer assigned when its turn comes is abandoned, uncommitted, for the new
owner to read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from mideng.errors import ConfigurationError
from mideng.messaging.message import Message
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.observability import logs
from mideng.stores.registry import require

#: The header a dead-lettered copy carries: why it was given up on.
DEAD_LETTER_REASON = "x-dead-letter-reason"
#: How long a partition whose batch could not be decided at all (store down) waits.
UNDECIDED_DELAY = 1.0


class Consumer(Protocol):
    async def handle(self, message: Message) -> Verdict: ...

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]: ...


def bootstrap_servers(url: str) -> str:
    """``host:port`` or ``kafka://host:port`` (comma-separated for several) as aiokafka wants."""
    servers = []
    for part in url.split(","):
        server = part.strip()
        if server.startswith("kafka://"):
            server = server[len("kafka://") :]
        server = server.rstrip("/")
        if not server or "/" in server or "://" in server:
            raise ConfigurationError(
                f"not a Kafka address (host:port or kafka://host:port): {url!r}"
            )
        servers.append(server)
    return ",".join(servers)


def message_of(record: Any) -> Message:
    headers: Mapping[str, str] = {
        name: value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        for name, value in (record.headers or ())
    }
    body = record.value if record.value is not None else b""
    return Message(
        body, headers, f"{record.topic}:{record.partition}:{record.offset}", None, record
    )


async def consume(
    consumer: Consumer,
    url: str,
    *,
    topic: str,
    group: str,
    stop: asyncio.Event,
    batch: int = 100,
    poll_timeout: float = 1.0,
    dead_topic: str | None = None,
    **options: Any,
) -> None:
    """Consume ``topic`` as a member of ``group`` until ``stop`` is set; the batch in hand is
    finished and committed first, and the group is left.

    Up to ``batch`` records are fetched at a time. A dead-lettered record is copied to
    ``dead_topic`` (with its headers and the reason) when one is given, else logged and
    skipped. ``options`` go to ``AIOKafkaConsumer`` (``session_timeout_ms``,
    ``auto_offset_reset`` — ``"earliest"`` unless given, so a new group misses nothing ...);
    auto commit is always off.
    """
    if batch < 1:
        raise ConfigurationError(f"batch must be at least 1: {batch!r}")
    if options.get("enable_auto_commit"):
        raise ConfigurationError("enable_auto_commit would commit offsets before processing")
    aiokafka = require("aiokafka", "kafka")
    servers = bootstrap_servers(url)
    member = _Member(consumer, dead_topic, servers)
    client = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=servers,
        group_id=group,
        **{"auto_offset_reset": "earliest", **options, "enable_auto_commit": False},
    )
    member.client = client
    client.subscribe([topic], listener=member.listener(aiokafka))
    await client.start()
    # A fetch can wait past its timeout while the group rebalances (members leaving one after
    # another when a deployment stops): ``stop`` cuts it short. Records fetched but not yet
    # handed out are simply read again by the next owner; nothing is committed for them.
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            member.resume_due()
            fetch = asyncio.ensure_future(
                client.getmany(timeout_ms=int(poll_timeout * 1000), max_records=batch)
            )
            await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not fetch.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fetch
                break
            for partition, records in fetch.result().items():
                await member.process(partition, records)
    finally:
        stopping.cancel()
        try:
            await client.stop()  # leaves the group: its partitions go to the others at once
        finally:
            await member.close()


class _Member:
    """One group member's batches, pauses and the lock a revocation waits on."""

    def __init__(self, consumer: Consumer, dead_topic: str | None, servers: str) -> None:
        self.consumer = consumer
        self.dead_topic = dead_topic
        self.servers = servers
        self.client: Any = None
        self.producer: Any = None
        self.busy = asyncio.Lock()
        self.paused: dict[Any, float] = {}

    def listener(self, aiokafka: Any) -> Any:
        member = self

        class Revocation(aiokafka.ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                # The batch in hand commits while the partition is still ours.
                async with member.busy:
                    for partition in revoked:
                        member.paused.pop(partition, None)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                return None

        return Revocation()

    def resume_due(self) -> None:
        now = time.monotonic()
        for partition, until in list(self.paused.items()):
            if until <= now:
                del self.paused[partition]
                if partition in self.client.assignment():
                    self.client.resume(partition)

    async def process(self, partition: Any, records: Sequence[Any]) -> None:
        async with self.busy:
            if partition not in self.client.assignment() or partition in self.paused:
                return  # revoked (the new owner reads it again) or rewound meanwhile
            messages = [message_of(record) for record in records]
            try:
                if len(messages) == 1:
                    verdicts = [await self.consumer.handle(messages[0])]
                else:
                    verdicts = await self.consumer.handle_batch(messages)
            except Exception as exc:
                logs.kafka_records_unhandled(len(messages), str(partition), exc)
                verdicts = [Retry(UNDECIDED_DELAY, "the consumer raised")] * len(messages)
            settled, delay = await self._settled(messages, verdicts)
            if settled:
                await self._commit(partition, messages[settled - 1].raw.offset + 1)
            if settled < len(messages):
                self.client.seek(partition, messages[settled].raw.offset)
                self.client.pause(partition)
                self.paused[partition] = time.monotonic() + delay

    async def _settled(
        self, messages: Sequence[Message], verdicts: Sequence[Verdict]
    ) -> tuple[int, float]:
        """How many leading records are settled, and the delay of the first that is not."""
        for index, (message, verdict) in enumerate(zip(messages, verdicts, strict=True)):
            if isinstance(verdict, Ack):
                continue
            if isinstance(verdict, Retry):
                return index, verdict.delay
            if isinstance(verdict, DeadLetter):
                if not await self._dead_letter(message, verdict):
                    return index, UNDECIDED_DELAY
                continue
            raise TypeError(f"not a verdict: {verdict!r}")
        return len(messages), 0.0

    async def _dead_letter(self, message: Message, verdict: DeadLetter) -> bool:
        logs.kafka_record_dead_lettered(message.id, verdict.reason)
        if self.dead_topic is None:
            return True
        try:
            if self.producer is None:
                aiokafka = require("aiokafka", "kafka")
                producer = aiokafka.AIOKafkaProducer(bootstrap_servers=self.servers, acks="all")
                await producer.start()
                self.producer = producer
            headers = [(k, v.encode()) for k, v in message.headers.items()]
            headers.append((DEAD_LETTER_REASON, verdict.reason.encode()))
            await self.producer.send_and_wait(
                self.dead_topic, message.body, key=message.raw.key, headers=headers
            )
        except Exception as exc:
            # Never skipped without its copy: the partition rewinds and it comes back.
            logs.kafka_dead_letter_copy_failed(message.id, self.dead_topic, exc)
            return False
        return True

    async def _commit(self, partition: Any, offset: int) -> None:
        try:
            await self.client.commit({partition: offset})
        except Exception:
            # A rebalance took the partition first: its next owner reads these records again
            # and the consumer's records answer them as duplicates.
            logs.kafka_offset_uncommitted(offset, str(partition))

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
