"""Key and request id headers that are not plain text, against each broker that can carry
them: a null (AMQP void, Kafka null) or another value of no text (a list, a table, a bool) is
no key, so the message is dead-lettered as keyless, never run or acked under a key such as
``"None"`` that every such event shares; bytes that are not UTF-8 keep their own escaped key,
so two events that differ only there both run (a replacement character made them one)."""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from mideng import Guard
from mideng.context import get_request_id
from mideng.messaging import Ack, DeadLetter, IdempotentConsumer, Message, Verdict
from mideng.messaging.headers import MESSAGE_ID, REQUEST_ID, decoded
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames, broker_names, kafka_broker  # noqa: F401
from tests.messaging.base.broker import Broker
from tests.messaging.kafka.broker import Kafka
from tests.messaging.nats.broker import JetStream
from tests.messaging.rabbitmq.broker import RabbitMQ
from tests.messaging.redis_streams.broker import RedisStreams
from tests.messaging.running import consume_until

Headers = dict[str, Any]


@pytest.fixture
def brokers(
    request: pytest.FixtureRequest,
    broker_names: BrokerNames,  # noqa: F811
) -> Callable[[str], Broker]:
    """A broker by name, on names of this test's own (Kafka's broker started only if asked);
    its headers written as a client in another language writes them."""

    def make(name: str) -> Broker:
        if name == "rabbitmq":
            return RabbitMQ(broker_names)
        if name == "kafka":
            return Kafka(broker_names.kafka(request.getfixturevalue("kafka_broker")))
        if name == "redis_streams":
            return RedisStreams(broker_names)
        return JetStream(broker_names.nats(), batch=1)

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
    broker.publish_headers(*messages)

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
