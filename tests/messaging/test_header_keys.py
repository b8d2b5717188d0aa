"""Key and request id headers that are not plain text, against each broker that can carry
them: a null (AMQP void, Kafka null) or another value of no text (a list, a table, a bool) is
no key, so the message is dead-lettered as keyless, never run or acked under a key such as
``"None"`` that every such event shares; bytes that are not UTF-8 keep their own escaped key,
so two events that differ only there both run (a replacement character made them one)."""

from __future__ import annotations

import asyncio
import codecs
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import pytest

from mideng import Guard
from mideng.context import get_request_id
from mideng.messaging import (
    Ack,
    DeadLetter,
    IdempotentConsumer,
    Message,
    Verdict,
    kafka,
    nats,
    rabbitmq,
    redis_streams,
)
from mideng.messaging.headers import MESSAGE_ID, REQUEST_ID, decoded
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames, KafkaBroker, broker_names, kafka_broker  # noqa: F401
from tests.messaging.kafka.conftest import KafkaSide
from tests.messaging.nats.conftest import NatsSide
from tests.messaging.rabbitmq.conftest import RabbitSide
from tests.messaging.redis_streams.conftest import StreamSide
from tests.messaging.running import consume_until

Headers = dict[str, Any]


class Broker(Protocol):
    def publish(self, messages: Sequence[Headers]) -> None:
        """One message a header map, each value as the broker's own client sends it."""

    def consume(self, consumer: Any, stop: asyncio.Event) -> Awaitable[None]: ...

    def settled(self) -> bool:
        """Nothing left unacked, pending or uncommitted."""


class Rabbit:
    def __init__(self, names: BrokerNames, monkeypatch: pytest.MonkeyPatch) -> None:
        self.side = RabbitSide(names)
        self.monkeypatch = monkeypatch

    def publish(self, messages: Sequence[Headers]) -> None:
        with self.monkeypatch.context() as patch:
            sends_bytes_as_long_strings(patch)
            asyncio.run(self._publish(messages))

    async def _publish(self, messages: Sequence[Headers]) -> None:
        import aio_pika

        connection = await aio_pika.connect(self.side.url)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(self.side.queue, durable=True)
            for n, headers in enumerate(messages):
                body = aio_pika.Message(b"{}", headers=headers, message_id=f"m{n}")
                await channel.default_exchange.publish(body, routing_key=self.side.queue)

    def consume(self, consumer: Any, stop: asyncio.Event) -> Awaitable[None]:
        return rabbitmq.consume(consumer, self.side.url, queue=self.side.queue, stop=stop)

    def settled(self) -> bool:
        return self.side.settled()


def sends_bytes_as_long_strings(patch: pytest.MonkeyPatch) -> None:
    """Bytes header values go out as AMQP long strings, as a producer in another language
    sends them (a long string is bytes on the wire; pamqp sends only str as one)."""
    import pamqp.encode

    encode = pamqp.encode.encode_table_value

    def long_strings(value: Any) -> bytes:
        if isinstance(value, bytes):
            return b"S" + struct.pack(">I", len(value)) + value
        return encode(value)

    patch.setattr(pamqp.encode, "encode_table_value", long_strings)


class Kafka:
    def __init__(self, names: BrokerNames, broker: KafkaBroker) -> None:
        self.side = KafkaSide(names.kafka(broker))

    def publish(self, messages: Sequence[Headers]) -> None:
        asyncio.run(self._publish(messages))

    async def _publish(self, messages: Sequence[Headers]) -> None:
        from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

        producer = AIOKafkaProducer(bootstrap_servers=self.side.names.bootstrap, acks="all")
        await producer.start()
        try:
            for headers in messages:
                # One partition, so the records come in the order published.
                acked = await producer.send_and_wait(
                    self.side.names.topic, b"{}", partition=0, headers=list(headers.items())
                )
                self.side.ends[acked.partition] = acked.offset + 1
        finally:
            await producer.stop()

    def consume(self, consumer: Any, stop: asyncio.Event) -> Awaitable[None]:
        return kafka.consume(consumer, self.side.url, stop=stop, **self.side.adapter())

    def settled(self) -> bool:
        return self.side.settled()


class Streams:
    def __init__(self, names: BrokerNames) -> None:
        self.side = StreamSide(names)

    def publish(self, messages: Sequence[Headers]) -> None:
        client = self.side.client()
        try:
            for headers in messages:
                client.xadd(self.side.stream, {"body": b"{}", **headers})
        finally:
            client.close()

    def consume(self, consumer: Any, stop: asyncio.Event) -> Awaitable[None]:
        options = self.side.adapter()
        return redis_streams.consume(consumer, self.side.url, stop=stop, **options)

    def settled(self) -> bool:
        return self.side.settled()


class Nats:
    def __init__(self, names: BrokerNames) -> None:
        self.side = NatsSide(names.nats(), batch=1)

    def publish(self, messages: Sequence[Headers]) -> None:
        asyncio.run(self._publish(messages))

    async def _publish(self, messages: Sequence[Headers]) -> None:
        """Each message in one HPUB of its own: nats-py sends header values only as UTF-8
        text, so the bytes go on the wire as another client may send them."""
        host, port = self.side.url.removeprefix("nats://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            await reader.readline()  # INFO
            writer.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')
            for headers in messages:
                lines = b"".join(b"%s: %s\r\n" % (k.encode(), v) for k, v in headers.items())
                block = b"NATS/1.0\r\n" + lines + b"\r\n"
                command = b"HPUB %s %d %d\r\n" % (
                    self.side.names.subject.encode(),
                    len(block),
                    len(block) + 2,
                )
                writer.write(command + block + b"{}\r\n")
            writer.write(b"PING\r\n")
            await writer.drain()
            assert await reader.readline() == b"PONG\r\n"  # every HPUB before it was taken
        finally:
            writer.close()
            await writer.wait_closed()

    def consume(self, consumer: Any, stop: asyncio.Event) -> Awaitable[None]:
        return nats.consume(consumer, self.side.url, stop=stop, **self.side.adapter())

    def settled(self) -> bool:
        return self.side.settled()


@pytest.fixture
def brokers(
    request: pytest.FixtureRequest,
    broker_names: BrokerNames,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[str], Broker]:
    """A broker by name, on names of this test's own (Kafka's broker started only if asked)."""

    def make(name: str) -> Broker:
        if name == "rabbitmq":
            return Rabbit(broker_names, monkeypatch)
        if name == "kafka":
            return Kafka(broker_names, request.getfixturevalue("kafka_broker"))
        if name == "redis_streams":
            return Streams(broker_names)
        return Nats(broker_names)

    return make


class Recording(IdempotentConsumer):
    """The consumer, recording each message it decided and its verdict."""

    decided: list[tuple[Message, Verdict]]

    async def handle(self, message: Message) -> Verdict:
        verdict = await super().handle(message)
        self.decided.append((message, verdict))
        return verdict

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        verdicts = await super().handle_batch(messages)
        self.decided.extend(zip(messages, verdicts, strict=True))
        return verdicts


def decide(broker: Broker, messages: Sequence[Headers]) -> tuple[list[Verdict], list[Any]]:
    """Publish ``messages``, consume until each was decided, and return the verdicts in order
    and what each handler run saw: its message-id header and its request id."""
    runs: list[tuple[str | None, str | None]] = []

    def handler(message: Message) -> None:
        runs.append((message.headers.get(MESSAGE_ID), get_request_id()))

    consumer = Recording(Guard(MemoryStore(), lease=10), "stock", handler, max_attempts=1)
    consumer.decided = []
    broker.publish(messages)

    async def decided() -> bool:
        return len(consumer.decided) >= len(messages)

    asyncio.run(consume_until(lambda stop: broker.consume(consumer, stop), decided, 60))
    assert broker.settled()  # every verdict carried out: nothing sent back or left pending
    return [verdict for _message, verdict in consumer.decided], runs


def keyless(verdict: Verdict) -> bool:
    return isinstance(verdict, DeadLetter) and "has no business key" in verdict.reason


NULL = None
kafka_too = pytest.param("kafka", marks=pytest.mark.slow)


@pytest.mark.parametrize("broker", ["rabbitmq", kafka_too])
def test_a_null_key_header_is_no_key(brokers: Callable[[str], Broker], broker: str) -> None:
    # Read as the key "None", the first of three different events ran and the other two were
    # acked as its duplicates, never run.
    verdicts, runs = decide(brokers(broker), [{MESSAGE_ID: NULL}] * 3)
    assert runs == []
    assert len(verdicts) == 3
    assert all(keyless(v) for v in verdicts), verdicts


def test_an_amqp_key_header_that_is_not_text_is_no_key(brokers: Callable[[str], Broker]) -> None:
    # A list was the key "['order-0']", a table its repr, a bool "True" (every such event one).
    not_text = [["order-0"], {"id": "order-0"}, True, 1.5]
    messages = [{MESSAGE_ID: value} for value in not_text] + [{MESSAGE_ID: 42}]
    verdicts, runs = decide(brokers("rabbitmq"), messages)
    assert all(keyless(v) for v in verdicts[:4]), verdicts
    # An integer id is text in decimal (AMQP producers send ids as integers).
    assert verdicts[4] == Ack(ran=True)
    assert runs == [("42", None)]


def test_a_null_request_id_is_no_request_id(brokers: Callable[[str], Broker]) -> None:
    verdicts, runs = decide(brokers("rabbitmq"), [{MESSAGE_ID: "order-1", REQUEST_ID: NULL}])
    assert verdicts == [Ack(ran=True)]
    assert runs == [("order-1", None)]  # it was the request id "None"


@pytest.mark.parametrize("broker", ["rabbitmq", kafka_too, "redis_streams"])
def test_keys_of_bytes_not_utf8_stay_apart(brokers: Callable[[str], Broker], broker: str) -> None:
    # Decoded with replacement, both were "order-\ufffd": the second event was acked unrun.
    messages = [
        {MESSAGE_ID: b"order-\xff", REQUEST_ID: b"req-\xff"},
        {MESSAGE_ID: b"order-\xfe", REQUEST_ID: b"req-\xfe"},
        {MESSAGE_ID: b"order-\xff"},  # a true duplicate is still one
    ]
    verdicts, runs = decide(brokers(broker), messages)
    assert verdicts == [Ack(ran=True), Ack(ran=True), Ack(ran=False)]
    assert runs == [("order-\\xff", "req-\\xff"), ("order-\\xfe", "req-\\xfe")]


@pytest.mark.slow
def test_nats_keys_nats_py_could_not_decode_are_no_key(
    brokers: Callable[[str], Broker],
) -> None:
    # nats-py hands both over as "order-\ufffd", its bytes gone: dead-lettered as keyless,
    # not one run and one acked unrun.
    messages = [{MESSAGE_ID: b"order-\xff"}, {MESSAGE_ID: b"order-\xfe"}]
    verdicts, runs = decide(brokers("nats"), messages)
    assert runs == []
    assert len(verdicts) == 2
    assert all(keyless(v) for v in verdicts), verdicts


@pytest.mark.parametrize(
    "raw",
    [b"order-\xff", b"a\\xff\xfe", b"a\xff\xfe", b"\\\\\xc3", b"caf\xc3\xa9 \xe9", b"\\n\x80"],
)
def test_an_escaped_value_reads_back_to_its_bytes(raw: bytes) -> None:
    # So no two values of bytes that are not UTF-8 read the same: b"a\\xff\xfe" (a backslash
    # spelled out, then a bad byte) is not b"a\xff\xfe" (two bad bytes).
    text = decoded(raw)
    assert codecs.escape_decode(text.encode())[0] == raw
