"""1,000 business transactions from 8 threads, half rolled back, two relays publishing
meanwhile: exactly the 500 committed messages arrive, per key in commit order. RabbitMQ on
PostgreSQL and MariaDB (read live by a plain aio-pika consumer); NATS JetStream, Redis
Streams and Kafka on PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.brokers import AMQP_URL, NATS_URL, BrokerNames, KafkaBroker
from tests.outbox.conftest import Db
from tests.outbox.storm import Arrival, Storm, arrival
from tests.services import REDIS_URL

pytestmark = pytest.mark.slow


def test_rabbitmq(server_db: Db, broker_names: BrokerNames) -> None:
    import aio_pika

    queue_name = broker_names.rabbitmq_queue()
    storm = Storm(server_db, queue_name)
    arrivals: list[Arrival] = []

    async def main() -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(queue_name, durable=True)

            async def on_message(message: Any) -> None:
                arrivals.append(arrival(message.message_id, message.body, message.headers))

            await queue.consume(on_message, no_ack=True)
            await storm.run(AMQP_URL)
            for _ in range(200):  # the last confirms may still be on their way to us
                if len({a.message_id for a in arrivals}) >= len(storm.committed):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)

    try:
        asyncio.run(main())
        storm.check(arrivals)
        assert len(arrivals) == len(storm.committed)  # no crash, so no re-publish
    finally:
        storm.drop()


@pytest.fixture
def pg_db(tmp_path: Any) -> Any:
    from tests.outbox.conftest import drop, open_db

    db = open_db("postgresql", tmp_path, pool_size=12)
    yield db
    drop(db)


def test_redis_streams(pg_db: Db, broker_names: BrokerNames) -> None:
    import redis

    stream = broker_names.redis_stream().stream
    storm = Storm(pg_db, stream)
    try:
        asyncio.run(storm.run(REDIS_URL))
        client = redis.Redis.from_url(REDIS_URL)
        try:
            entries: Any = client.xrange(stream)
        finally:
            client.close()
        arrivals = []
        for _, fields in entries:
            headers = {k.decode(): v.decode() for k, v in fields.items() if k != b"body"}
            arrivals.append(arrival(headers["message-id"], fields[b"body"], headers))
        storm.check(arrivals)
    finally:
        storm.drop()


def test_nats_jetstream(pg_db: Db, broker_names: BrokerNames) -> None:
    import nats

    names = broker_names.nats()
    storm = Storm(pg_db, names.subject)

    async def main() -> list[Arrival]:
        client = await nats.connect(NATS_URL)
        try:
            jetstream = client.jetstream()
            await jetstream.add_stream(name=names.stream, subjects=[names.subject, names.wildcard])
            await storm.run(NATS_URL)
            subscription = await jetstream.pull_subscribe(names.subject, durable=names.durable)
            arrivals: list[Arrival] = []
            while len(arrivals) < len(storm.committed):
                for message in await subscription.fetch(100, timeout=5):
                    headers = dict(message.headers or {})
                    assert headers["Nats-Msg-Id"] == headers["message-id"]
                    arrivals.append(arrival(headers["message-id"], message.data, headers))
                    await message.ack()
            return arrivals
        finally:
            await client.close()

    try:
        storm.check(asyncio.run(main()))
    finally:
        storm.drop()


def test_kafka(pg_db: Db, broker_names: BrokerNames, kafka_broker: KafkaBroker) -> None:
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]

    names = broker_names.kafka(kafka_broker)
    storm = Storm(pg_db, names.topic)

    async def main() -> list[Arrival]:
        admin = AIOKafkaAdminClient(bootstrap_servers=names.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(names.topic, 3, 1)])
        finally:
            await admin.close()
        await storm.run(kafka_broker.url)
        consumer = AIOKafkaConsumer(
            names.topic, bootstrap_servers=names.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        arrivals: list[Arrival] = []
        # Every message was published and confirmed before this read starts, so what is
        # missing here is missing for good. One overall deadline rather than one per poll: on
        # a loaded machine the consumer's first fetch (metadata, then the offsets of three
        # partitions) has taken longer than a single poll's 5 s.
        deadline = asyncio.get_running_loop().time() + 60
        try:
            while len(arrivals) < len(storm.committed):
                batches = await consumer.getmany(timeout_ms=5000)
                assert batches or asyncio.get_running_loop().time() < deadline, (
                    f"Kafka delivered {len(arrivals)} of {len(storm.committed)} messages"
                )
                for records in batches.values():
                    for record in records:
                        headers = {name: value.decode() for name, value in record.headers}
                        assert record.key.decode() == headers["idempotency-key"]
                        arrivals.append(arrival(headers["message-id"], record.value, headers))
        finally:
            await consumer.stop()
        return arrivals

    try:
        storm.check(asyncio.run(main()))
    finally:
        storm.drop()
