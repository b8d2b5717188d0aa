"""A Kafka dead letter's copy carries the record's own headers, byte for byte: a null stays a
null and bytes that are not UTF-8 stay those bytes (the copy was made from the headers' text,
a null as b"None" and bad bytes as replacement characters)."""

from __future__ import annotations

import asyncio

import pytest

from mideng.messaging import kafka as adapter
from tests.brokers import BrokerNames, KafkaBroker
from tests.messaging.kafka.conftest import KafkaSide
from tests.messaging.kafka.test_consume import consuming, read_all, settled, until
from tests.messaging.running import dead_lettering

pytestmark = pytest.mark.slow

HEADERS = [("trace", None), ("span", b"\xff\xfe"), ("note", b"caf\xc3\xa9")]  # and no key


async def publish(side: KafkaSide) -> None:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    producer = AIOKafkaProducer(bootstrap_servers=side.names.bootstrap, acks="all")
    await producer.start()
    try:
        acked = await producer.send_and_wait(side.names.topic, b"{}", headers=HEADERS)
        side.ends[acked.partition] = acked.offset + 1
    finally:
        await producer.stop()


def test_a_dead_letter_copy_keeps_the_records_headers(
    broker_names: BrokerNames, kafka_broker: KafkaBroker
) -> None:
    side = KafkaSide(broker_names.kafka(kafka_broker))
    dead = KafkaSide(broker_names.kafka(kafka_broker, "orders-dead"))
    consumer, reasons = dead_lettering()

    async def scenario() -> None:
        await publish(side)
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(consumer, side, stop, dead_topic=dead.names.topic))
        await until(lambda: bool(reasons))
        await asyncio.to_thread(settled, side)
        stop.set()
        await asyncio.wait_for(task, 20)

    asyncio.run(scenario())
    [copy] = asyncio.run(read_all(kafka_broker, dead.names.topic, 1))
    assert "has no business key" in reasons[0]
    assert list(copy.headers) == [*HEADERS, (adapter.DEAD_LETTER_REASON, reasons[0].encode())]
