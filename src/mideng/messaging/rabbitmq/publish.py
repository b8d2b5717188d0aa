"""RabbitMQ (aio-pika): publisher confirms, and a message that reaches no queue is an error.

The routing key is the destination; on the default exchange (unless ``exchange`` is given)
that is the queue's name. Messages are persistent and published ``mandatory``: a message no
queue accepts comes back from the broker and fails the publish, instead of being confirmed
and dropped.
"""

from __future__ import annotations

from typing import Any

from mideng.messaging.publish import Outgoing
from mideng.stores.registry import require


class AmqpPublisher:
    def __init__(self, url: str, *, exchange: str | None = None, timeout: float = 30.0) -> None:
        self.url = url
        self.exchange_name = exchange or ""
        self.timeout = timeout
        self._aio_pika = require("aio_pika", "rabbitmq")
        self._connection: Any = None
        self._exchange: Any = None

    async def start(self) -> None:
        self._connection = await self._aio_pika.connect_robust(self.url, timeout=self.timeout)
        channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        if self.exchange_name:
            # ensure: a passive declare, so a misspelt exchange fails at start, not per message
            self._exchange = await channel.get_exchange(self.exchange_name, ensure=True)
        else:
            self._exchange = channel.default_exchange

    async def publish(self, message: Outgoing) -> None:
        aio_pika = self._aio_pika
        await self._exchange.publish(
            aio_pika.Message(
                message.body,
                headers=dict(message.headers),
                message_id=message.message_id,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=message.destination,
            mandatory=True,
            timeout=self.timeout,
        )

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
