"""A record whose header name is not UTF-8 (another client's producer can write one) cannot be
read by aiokafka at all: it decodes every header name strictly, and the whole fetch raised
UnicodeDecodeError, which ended ``consume``, and again at every restart, at the same record.
Now that record is skipped, logged with its partition and offset, and every other record is
handled once: the ones before it in its partition, and those the failed fetch had already
taken from other partitions and dropped with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging import kafka as adapter
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames, KafkaBroker
from tests.messaging.kafka.broker import PARTITIONS, Kafka
from tests.messaging.running import consume_until

pytestmark = pytest.mark.slow


class RawName(str):
    """A header name written as the bytes given, as a client in another language may."""

    raw: bytes

    def __new__(cls, raw: bytes) -> RawName:
        name = super().__new__(cls, raw.decode("latin-1"))
        name.raw = raw
        return name

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


def writes_raw_header_names(patch: pytest.MonkeyPatch) -> None:
    """aiokafka's compiled record builder takes only text names; its Python one writes a name
    as the name's ``encode()`` says."""
    from aiokafka.producer import (  # type: ignore[import-untyped]
        message_accumulator,
        producer,
    )
    from aiokafka.record import default_records  # type: ignore[import-untyped]

    python_builder = default_records._DefaultRecordBatchBuilderPy
    patch.setattr(producer, "DefaultRecordBatchBuilder", python_builder)
    patch.setattr(message_accumulator, "DefaultRecordBatchBuilder", python_builder)


@contextlib.asynccontextmanager
async def producing(side: Kafka) -> AsyncIterator[Any]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    producer = AIOKafkaProducer(bootstrap_servers=side.names.bootstrap, acks="all")
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


async def send(producer: Any, side: Kafka, partition: int, headers: list[Any]) -> int:
    """Publish one record to ``partition``; its offset."""
    acked = await producer.send_and_wait(
        side.names.topic, b"{}", partition=partition, headers=headers
    )
    side.ends[partition] = acked.offset + 1
    return int(acked.offset)


async def publish(side: Kafka, poisoned: tuple[int, ...]) -> dict[int, int]:
    """Two readable records on every partition, partition by partition, and an unreadable one
    between them on the ``poisoned`` ones; the unreadable records' offsets by partition."""
    unreadable: dict[int, int] = {}
    async with producing(side) as producer:
        for partition in range(PARTITIONS):
            await send(producer, side, partition, [(IDEMPOTENCY_KEY, f"{partition}-a".encode())])
            if partition in poisoned:
                poison = [(RawName(b"caf\xe9"), b"x"), (IDEMPOTENCY_KEY, b"poison")]
                unreadable[partition] = await send(producer, side, partition, poison)
            await send(producer, side, partition, [(IDEMPOTENCY_KEY, f"{partition}-b".encode())])
    return unreadable


async def publish_until_handled(side: Kafka, handled: Callable[[], bool]) -> None:
    """A record on the first partition, again until one is handled: a group that reads from
    the end skips what came before it had a position."""
    async with producing(side) as producer:
        while True:
            await send(producer, side, 0, [(IDEMPOTENCY_KEY, b"marker")])
            if await within(handled, 1.0):
                return


async def within(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def skipped(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "mideng_outcome", None) == "unreadable"]


@pytest.mark.parametrize(
    ("reset", "poisoned"), [("earliest", (0, 3)), ("latest", (PARTITIONS - 1,))]
)
def test_a_record_aiokafka_cannot_read_is_skipped_and_the_rest_handled_once(
    broker_names: BrokerNames,
    kafka_broker: KafkaBroker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    reset: str,
    poisoned: tuple[int, ...],
) -> None:
    """``earliest``: all is published before the group joins, so its first fetch meets the
    unreadable records, with nothing committed yet. ``latest``: the group consumes first, and
    all is published while its member is held in a handler, so the next fetch takes the
    other partitions' records (fetched from, never committed) before the unreadable one."""
    side = Kafka(broker_names.kafka(kafka_broker), batch=50)
    runs: Counter[str] = Counter()
    released = threading.Event()

    def handler(message: Message) -> None:  # run off the event loop
        key = message.headers[IDEMPOTENCY_KEY]
        runs.update([key])
        if key == "marker":
            released.wait(10)

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)
    readable = [f"{p}-{n}" for p in range(PARTITIONS) for n in "ab"]
    unreadable: dict[int, int] = {}

    async def publish_all() -> None:
        with monkeypatch.context() as patch:
            writes_raw_header_names(patch)
            unreadable.update(await publish(side, poisoned))

    async def all_handled() -> bool:
        if reset == "latest" and not unreadable:
            await publish_until_handled(side, lambda: runs["marker"] > 0)
            await publish_all()
            released.set()
        handled = sum(runs[key] for key in readable)
        return handled == len(readable) and not any((await asyncio.to_thread(side.lag)).values())

    async def scenario() -> None:
        if reset == "earliest":
            await publish_all()
        options = {**side.adapter(), "auto_offset_reset": reset}
        await consume_until(
            lambda stop: adapter.consume(consumer, side.url, stop=stop, **options),
            all_handled,
            30,
        )

    with caplog.at_level(logging.WARNING, logger="mideng"):
        asyncio.run(scenario())
    assert runs - Counter(["marker"]) == Counter(readable)  # once each, the unreadable never
    # Each logged once, by its place, as Message.id names a record.
    logged = sorted(r.getMessage().split(" cannot be read")[0] for r in skipped(caplog))
    assert logged == [f"record {side.names.topic}:{p}:{unreadable[p]}" for p in poisoned]
