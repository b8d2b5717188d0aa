"""The publishers on their own: RabbitMQ refuses what no queue takes (so the relay retries it
rather than losing it) and publishes to a named exchange; ``publish`` adds mideng's headers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from mideng.context import request_id_scope
from mideng.errors import ConfigurationError
from mideng.messaging.publish import open_publisher, publish
from mideng.outbox import Relay
from tests.brokers import AMQP_URL, BrokerNames
from tests.outbox.conftest import drop, open_db
from tests.outbox.recording import Recording


def test_publish_adds_the_message_id_the_key_and_the_request_id() -> None:
    publisher = Recording()
    with request_id_scope("req-3"):
        message_id = asyncio.run(
            publish(publisher, "orders", b"{}", key="order:3", headers={"tenant": "acme"})
        )
    (message,) = publisher.sent
    assert message.headers == {
        "tenant": "acme",
        "message-id": message_id,
        "idempotency-key": "order:3",
        "x-request-id": "req-3",
    }
    with pytest.raises(ConfigurationError):
        asyncio.run(publish(publisher, "orders", b"{}", key=None, headers={"n": 1}))  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="no publisher"):
        open_publisher("stomp://broker")


def test_rabbitmq_a_message_no_queue_takes_is_a_failure_not_a_loss(
    tmp_path: Path, broker_names: BrokerNames
) -> None:
    missing = broker_names.rabbitmq_queue("missing")  # never declared
    db = open_db("sqlite", tmp_path)
    try:
        with db.engine.begin() as connection:
            db.outbox.add(connection, missing, {"order": 1}, key="order:1")

        async def main() -> Any:
            async with Relay(db.engine, AMQP_URL, table=db.table, max_attempts=1) as relay:
                return await relay.run_once()

        total = asyncio.run(main())
        assert (total.sent, total.dead) == (0, 1)
        (row,) = db.rows()
        assert row["state"] == 2
        assert row["last_error"]
    finally:
        drop(db)


def test_rabbitmq_publishes_to_a_named_exchange(tmp_path: Path, broker_names: BrokerNames) -> None:
    import aio_pika

    queue_name = broker_names.rabbitmq_queue()
    exchange_name = broker_names.rabbitmq_exchange("orders")
    db = open_db("sqlite", tmp_path)

    async def main() -> list[Any]:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(exchange_name, aio_pika.ExchangeType.DIRECT)
            queue = await channel.declare_queue(queue_name)
            await queue.bind(exchange, routing_key="order-events")
            with db.engine.begin() as tx:
                db.outbox.add(tx, "order-events", {"order": 5}, key="order:5")
            async with Relay(db.engine, AMQP_URL, table=db.table, exchange=exchange_name) as relay:
                assert (await relay.run_once()).sent == 1
            got = []
            for _ in range(100):
                message = await queue.get(no_ack=True, fail=False)
                if message is not None:
                    got.append(message)
                    break
                await asyncio.sleep(0.02)
            return got

    try:
        (message,) = asyncio.run(main())
    finally:
        drop(db)
    assert json.loads(message.body) == {"order": 5}
    assert message.headers["idempotency-key"] == "order:5"
    assert message.message_id == message.headers["message-id"]
