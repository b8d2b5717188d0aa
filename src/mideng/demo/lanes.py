"""Where the demo's messages go on each broker: one lane (a queue, a subject and its stream,
a stream and its group, a topic) per consumer, made before the relay publishes and removed
after, named with the run's own suffix."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.brokers import for_scheme, schemes
from mideng.stores.registry import require


@dataclass(frozen=True)
class Lane:
    """``destination``: what a publisher publishes to; ``options``: the adapter's keyword
    arguments that consume it."""

    destination: str
    options: dict[str, Any]


def broker_of(url: str) -> str:
    """The broker package a URL names (``rabbitmq``, ``memory`` ...), or a one-line error."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    found = for_scheme(scheme)
    if found is None:
        raise ConfigurationError(f"no broker for {url!r}; mideng has {', '.join(schemes())}")
    return found.consume.split(".")[2]


def lane(broker: str, suffix: str, name: str) -> Lane:
    """The lane ``name`` of this run on ``broker``."""
    if broker == "memory":
        queue = f"demo.{suffix}.{name}"
        return Lane(queue, {"queue": queue, "fetch_timeout": 0.2})
    if broker == "rabbitmq":
        queue = f"demo.{suffix}.{name}"
        return Lane(queue, {"queue": queue, "prefetch": 1})
    if broker == "nats":
        subject = f"demo.{suffix}.{name}"
        return Lane(
            subject,
            {
                "stream": f"DEMO_{suffix}_{name}",
                "subject": subject,
                "durable": f"demo-{suffix}-{name}",
                "fetch_timeout": 0.2,
            },
        )
    if broker == "redis_streams":
        stream = f"demo:{suffix}:{name}"
        return Lane(stream, {"stream": stream, "group": "shop", "name": "worker-1", "block": 0.2})
    if broker == "kafka":
        topic = f"demo.{suffix}.{name}"
        return Lane(topic, {"topic": topic, "group": f"demo-{suffix}-{name}", "poll_timeout": 0.2})
    raise ConfigurationError(f"the demo has no lanes on {broker}")


@contextlib.asynccontextmanager
async def _admin(broker: str, url: str) -> AsyncIterator[Any]:
    """The broker's client to make and remove lanes with: an AMQP channel, a JetStream
    context, a Redis client, a Kafka admin client."""
    if broker == "rabbitmq":
        async with await require("aio_pika", "rabbitmq").connect(url) as connection:
            yield await connection.channel()
    elif broker == "nats":
        client = await require("nats", "nats").connect(url)
        try:
            yield client.jetstream()
        finally:
            await client.close()
    elif broker == "redis_streams":
        client = require("redis.asyncio", "redis").from_url(url)
        try:
            yield client
        finally:
            await client.aclose()
    else:
        kafka = require("aiokafka.admin", "kafka")
        admin = kafka.AIOKafkaAdminClient(bootstrap_servers=url.split("://", 1)[1])
        await admin.start()
        try:
            yield admin
        finally:
            await admin.close()


async def prepare(broker: str, url: str, lanes: list[Lane]) -> None:
    """Make the lanes, so a message published before its consumer starts is kept."""
    if broker == "memory":
        return  # a queue of the in-process broker is made by its first message
    async with _admin(broker, url) as admin:
        for each in lanes:
            if broker == "rabbitmq":
                await admin.declare_queue(each.destination, durable=True)
            elif broker == "nats":
                stream, subject = each.options["stream"], each.options["subject"]
                await admin.add_stream(name=stream, subjects=[subject])
            elif broker == "redis_streams":
                group = each.options["group"]
                await admin.xgroup_create(each.destination, group, id="0", mkstream=True)
            else:
                kafka = require("aiokafka.admin", "kafka")
                await admin.create_topics([kafka.NewTopic(each.destination, 1, 1)])


async def remove(broker: str, url: str, lanes: list[Lane]) -> None:
    """Remove the lanes; what cannot be removed is left (the names are the run's own)."""
    if broker == "memory":
        return  # gone with the process
    with contextlib.suppress(Exception):
        await asyncio.wait_for(_remove(broker, url, lanes), 10)


async def _remove(broker: str, url: str, lanes: list[Lane]) -> None:
    async with _admin(broker, url) as admin:
        for each in lanes:
            if broker == "rabbitmq":
                await admin.queue_delete(each.destination)
            elif broker == "nats":
                await admin.delete_stream(each.options["stream"])
            elif broker == "redis_streams":
                await admin.delete(each.destination)
            else:
                await admin.delete_topics([each.destination])
