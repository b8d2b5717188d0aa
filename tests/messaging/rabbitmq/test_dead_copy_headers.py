"""A message dead-lettered to ``dead_letter_queue`` is copied there with its AMQP headers as
they came, whatever their types: a long string that is not UTF-8 (pamqp reads it as bytes and
refused to write bytes back), inside tables and arrays too, or a double (pamqp writes floats
only in single precision: it refused one out of that range and rounded the rest). The copy
could never be made: the message was requeued every second, for good."""

from __future__ import annotations

import asyncio
import struct
from decimal import Decimal
from typing import Any

import aio_pika
import pytest

from mideng.messaging import rabbitmq
from tests.brokers import AMQP_URL, BrokerNames
from tests.messaging.rabbitmq.test_adapter import ready
from tests.messaging.running import consume_until, dead_lettering

#: As a producer in another language sends them: bytes as long strings, floats as doubles.
SENT: dict[str, Any] = {
    "trace": b"span-\xff\xfe",
    "note": "caf\xe9",
    "nested": {"inner": b"\xff\x00", "text": "ok", "deep": [b"\xfe", 7]},
    "list": [b"a\xff", "b", {"x": b"\xc3"}],
    "raw": bytearray(b"\x00\xff"),
    "amount": Decimal("-1.5"),
    "ratio": 0.1,
    "huge": 1e300,
    "half": 0.5,
    "count": 3,
    "flag": True,
    "none": None,
}

#: The copy as the broker hands it out: every value as the original was read, its bytes kept
#: (a long string that is not UTF-8 goes as a byte array: the same bytes); a double that
#: single precision, pamqp's only float, cannot hold goes as its text.
COPIED: dict[str, Any] = {
    "trace": bytearray(b"span-\xff\xfe"),
    "note": "caf\xe9",
    "nested": {"inner": bytearray(b"\xff\x00"), "text": "ok", "deep": [bytearray(b"\xfe"), 7]},
    "list": [bytearray(b"a\xff"), "b", {"x": bytearray(b"\xc3")}],
    "raw": bytearray(b"\x00\xff"),
    "amount": Decimal("-1.5"),
    "ratio": "0.1",
    "huge": "1e+300",
    "half": 0.5,
    "count": 3,
    "flag": True,
    "none": None,
}


def sends_as_another_client(patch: pytest.MonkeyPatch) -> None:
    """pamqp writes only text as a long string and every float in single precision; another
    client writes bytes as long strings and doubles."""
    import pamqp.encode

    encode = pamqp.encode.encode_table_value

    def other_client(value: Any) -> bytes:
        if isinstance(value, bytes):
            return b"S" + struct.pack(">I", len(value)) + value
        if isinstance(value, float):
            return b"d" + struct.pack(">d", value)
        return encode(value)

    patch.setattr(pamqp.encode, "encode_table_value", other_client)


async def publish_keyless(queue: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)
        message = aio_pika.Message(b'{"qty": 1}', headers=SENT, message_id="m0")
        await channel.default_exchange.publish(message, routing_key=queue)


async def take_one(queue: str) -> Any:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        source = await channel.declare_queue(queue, passive=True)
        message = await source.get(no_ack=True, fail=True)
        assert await source.get(no_ack=True, fail=False) is None  # one copy, not one a try
        return message


def test_a_dead_letter_copy_carries_the_headers_as_they_came(
    broker_names: BrokerNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, dlq = broker_names.rabbitmq_queue(), broker_names.rabbitmq_queue("dead")
    consumer, reasons = dead_lettering()
    with monkeypatch.context() as patch:
        sends_as_another_client(patch)
        asyncio.run(publish_keyless(queue))

    async def scenario() -> Any:
        async def copied() -> bool:
            return bool(reasons) and await ready(queue) == 0 and await ready(dlq) == 1

        await consume_until(
            lambda stop: rabbitmq.consume(
                consumer, AMQP_URL, queue=queue, stop=stop, dead_letter_queue=dlq
            ),
            copied,
            timeout=10,
        )
        # Acked with its copy: once no one consumes, an unacked message would be ready again.
        assert await ready(queue) == 0
        return await take_one(dlq)

    copy = asyncio.run(scenario())
    [reason] = reasons  # dead-lettered once
    assert "has no business key" in reason
    assert copy.headers == {**COPIED, rabbitmq.DEAD_REASON: reason}
    assert copy.body == b'{"qty": 1}'
    assert copy.message_id == "m0"
