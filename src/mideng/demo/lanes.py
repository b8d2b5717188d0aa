"""Where the demo's messages go on each broker: one lane (a queue, a subject and its stream,
a stream and its group, a topic) per consumer, made before the relay publishes and removed
after, named with the run's own suffix."""

from __future__ import annotations

import asyncio
import contextlib
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


async def prepare(broker: str, url: str, lanes: list[Lane]) -> None:
    """Make the lanes, so a message published before its consumer starts is kept."""
    if broker == "rabbitmq":
        aio_pika = require("aio_pika", "rabbitmq")
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()
            for each in lanes:
                await channel.declare_queue(each.destination, durable=True)
    elif broker == "nats":
        nats = require("nats", "nats")
        client = await nats.connect(url)
        try:
            jetstream = client.jetstream()
            for each in lanes:
                await jetstream.add_stream(
                    name=each.options["stream"], subjects=[each.options["subject"]]
                )
        finally:
            await client.close()
    elif broker == "redis_streams":
        client = require("redis.asyncio", "redis").from_url(url)
        try:
            for each in lanes:
                await client.xgroup_create(
                    each.destination, each.options["group"], id="0", mkstream=True
                )
        finally:
            await client.aclose()
    elif broker == "kafka":
        kafka = require("aiokafka.admin", "kafka")
        admin = kafka.AIOKafkaAdminClient(bootstrap_servers=url.split("://", 1)[1])
        await admin.start()
        try:
            await admin.create_topics([kafka.NewTopic(e.destination, 1, 1) for e in lanes])
        finally:
            await admin.close()


async def remove(broker: str, url: str, lanes: list[Lane]) -> None:
    """Remove the lanes; what cannot be removed is left (the names are the run's own)."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(_remove(broker, url, lanes), 10)


async def _remove(broker: str, url: str, lanes: list[Lane]) -> None:
    if broker == "rabbitmq":
        aio_pika = require("aio_pika", "rabbitmq")
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()
            for each in lanes:
                await channel.queue_delete(each.destination)
    elif broker == "nats":
        nats = require("nats", "nats")
        client = await nats.connect(url)
        try:
            for each in lanes:
                await client.jetstream().delete_stream(each.options["stream"])
        finally:
            await client.close()
    elif broker == "redis_streams":
        client = require("redis.asyncio", "redis").from_url(url)
        try:
            await client.delete(*[each.destination for each in lanes])
        finally:
            await client.aclose()
    elif broker == "kafka":
        kafka = require("aiokafka.admin", "kafka")
        admin = kafka.AIOKafkaAdminClient(bootstrap_servers=url.split("://", 1)[1])
        await admin.start()
        try:
            await admin.delete_topics([each.destination for each in lanes])
        finally:
            await admin.close()
