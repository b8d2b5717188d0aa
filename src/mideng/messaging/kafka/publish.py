"""Kafka (aiokafka): topic = destination, message key = the business key.

A key always hashes to one partition, and the relay publishes a key's messages one after the
other, each acknowledged by every in-sync replica (``acks="all"``) before the next: so a key's
messages sit in its partition in the order they were written.
"""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.publish import Outgoing, check_options
from mideng.stores.registry import require


def bootstrap(url: str) -> str:
    """``kafka://host:port[,host:port]`` or a plain ``host:port`` list."""
    servers = url.split("://", 1)[1] if "://" in url else url
    servers = servers.strip("/")
    if not servers:
        raise ConfigurationError(f"no Kafka bootstrap servers in {url!r}")
    return servers


class KafkaPublisher:
    """``timeout``: how long a request to a broker may wait for its answer (aiokafka's
    ``request_timeout_ms``); ``options`` go to ``AIOKafkaProducer``."""

    def __init__(self, url: str, *, timeout: float = 40.0, **options: Any) -> None:
        aiokafka = require("aiokafka", "kafka")
        check_options(aiokafka.AIOKafkaProducer, options, "Kafka's producer")
        self.servers = bootstrap(url)
        self.options = {"acks": "all", "request_timeout_ms": round(timeout * 1000), **options}
        self._aiokafka: Any = aiokafka
        self._producer: Any = None

    async def start(self) -> None:
        producer = self._aiokafka.AIOKafkaProducer(bootstrap_servers=self.servers, **self.options)
        try:
            await producer.start()
        except BaseException:
            # A producer that could not bootstrap still holds its client's tasks and sockets.
            await producer.stop()
            raise
        self._producer = producer

    async def publish(self, message: Outgoing) -> None:
        await self._producer.send_and_wait(
            message.destination,
            message.body,
            key=None if message.key is None else message.key.encode(),
            headers=[(name, value.encode()) for name, value in message.headers.items()],
        )

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
