"""RabbitMQ as the base suite drives it: a fresh durable queue and a dead-letter queue, the
broker's counts, and the consumer's own connection closed for real by name
(``rabbitmqctl close_connection``; no other connection is touched)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aio_pika
import pytest

from mideng.messaging import rabbitmq
from mideng.messaging.headers import IDEMPOTENCY_KEY, header_text
from mideng.messaging.reconnect import Backoff
from tests.brokers import AMQP_URL, BrokerNames, token
from tests.messaging.base.broker import Broker, Consuming, DeadCopy, Link, Outgoing


async def publish(queue: str, *keys: str | None, declare: bool = True) -> None:
    """Keyed messages (None: one without a key), ids m0, m1 ..., to ``queue``."""
    await publish_messages(queue, with_keys([(key, b'{"qty": 1}') for key in keys], {}), declare)


async def publish_messages(
    queue: str, messages: Sequence[tuple[Mapping[str, Any], bytes]], declare: bool = True
) -> list[str]:
    """Each (headers, body) as a message to ``queue``, ids m0, m1 ..."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        if declare:
            await channel.declare_queue(queue, durable=True)
        ids = [f"m{n}" for n in range(len(messages))]
        for sent, (headers, body) in zip(ids, messages, strict=True):
            message = aio_pika.Message(body, headers=dict(headers), message_id=sent)
            await channel.default_exchange.publish(message, routing_key=queue)
        return ids


def with_keys(messages: Sequence[Outgoing], headers: Mapping[str, Any]) -> list[Any]:
    return [
        ({**headers, **({} if key is None else {IDEMPOTENCY_KEY: key})}, body)
        for key, body in messages
    ]


async def declared(queue: str) -> Any:
    """The broker's answer to a passive declare of ``queue`` (its message and consumer counts)."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        return (await channel.declare_queue(queue, passive=True)).declaration_result


async def ready(queue: str) -> int:
    return int((await declared(queue)).message_count or 0)


def close_named(name: str) -> int:
    """Have the broker close every connection named ``name``; how many it closed."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_connections", "pid", "client_properties", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    pids = [
        line.split("\t")[0] for line in listed.splitlines() if f'"connection_name","{name}"' in line
    ]
    for pid in pids:
        subprocess.run(
            ["rabbitmqctl", "close_connection", pid, "closed by the reconnect test", "-q"],
            capture_output=True,
            timeout=60,
            check=True,
        )
    return len(pids)


class Named(Link):
    """The consumer's connection, named so the broker can be told to close it; a prefetch of
    two, so a handler that closes it is among the first of a session."""

    broker: RabbitMQ

    def __init__(self, broker: RabbitMQ) -> None:
        self.broker, self.name = broker, f"mideng-test-{token()[:10]}"

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        return self.broker.consume(
            consumer,
            stop,
            reconnect=Backoff(0.01, 0.05),
            client_properties={"connection_name": self.name},
            **{"prefetch": 2, **options},
        )

    def drop(self, waiting: bool = False) -> int:
        return close_named(self.name)


class RabbitMQ(Broker):
    """A fresh durable queue (and a dead-letter queue) the consumers share."""

    broker = "rabbitmq"
    url = AMQP_URL
    lease = 2.0
    fetches = False

    def __init__(self, names: BrokerNames, prefetch: int = 20) -> None:
        self.queue = names.rabbitmq_queue()
        self.dead = names.rabbitmq_queue("dead")
        self.prefetch = prefetch

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {"queue": self.queue, "prefetch": self.prefetch}

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        return rabbitmq.consume(consumer, self.url, stop=stop, **{**self.adapter(), **options})

    def publish(
        self, messages: Sequence[Outgoing], headers: Mapping[str, str] | None = None
    ) -> list[str]:
        return asyncio.run(publish_messages(self.queue, with_keys(messages, headers or {})))

    def publish_headers(self, *messages: Any) -> list[str]:
        with sends_as_another_client():
            return asyncio.run(publish_messages(self.queue, [(h, b"{}") for h in messages]))

    def dead_letter_options(self) -> dict[str, Any]:
        return {"dead_letter_queue": self.dead}

    def dead_letters(self, at_least: int = 1) -> list[DeadCopy]:
        return asyncio.run(self._dead_letters())

    async def _dead_letters(self) -> list[DeadCopy]:
        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            source = await channel.declare_queue(self.dead, passive=True)
            copies = []
            # Not acked: the copies go back to the queue when the channel closes.
            while (got := await source.get(no_ack=False, fail=False)) is not None:
                headers = dict(got.headers)
                key = header_text(headers.get(IDEMPOTENCY_KEY))
                reason = header_text(headers.get(rabbitmq.DEAD_REASON)) or ""
                copies.append(DeadCopy(key, reason, got.body, headers, got))
            return copies

    def unsettled(self) -> int:
        return asyncio.run(ready(self.queue))

    def delivered(self) -> bool:
        return self.unsettled() == 0  # none ready: every one in a consumer's prefetch

    def counts(self) -> tuple[int, int]:
        """(ready, consumers) as the broker reports them."""
        result = asyncio.run(declared(self.queue))
        return result.message_count or 0, result.consumer_count or 0

    def state(self) -> str:
        ready, consumers = self.counts()
        return f"{ready} ready, {consumers} consumers"

    @contextlib.asynccontextmanager
    async def droppable(self) -> AsyncIterator[Link]:
        if shutil.which("rabbitmqctl") is None:
            pytest.skip("closing a connection needs rabbitmqctl")
        yield Named(self)


@contextlib.contextmanager
def sends_as_another_client() -> Any:
    """pamqp writes only text as a long string and every float in single precision; another
    client writes bytes as long strings and doubles."""
    import struct

    import pamqp.encode

    encode = pamqp.encode.encode_table_value

    def other_client(value: Any) -> bytes:
        if isinstance(value, bytes):
            return b"S" + struct.pack(">I", len(value)) + value
        if isinstance(value, float):
            return b"d" + struct.pack(">d", value)
        return encode(value)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pamqp.encode, "encode_table_value", other_client)
        yield
