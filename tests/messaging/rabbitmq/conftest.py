from __future__ import annotations

import asyncio
from typing import Any

from mideng.messaging.headers import IDEMPOTENCY_KEY
from tests.brokers import AMQP_URL, BrokerNames, broker_names  # noqa: F401  (fixture)


class RabbitSide:
    """A fresh durable queue the storm's consumers share."""

    broker = "rabbitmq"
    url = AMQP_URL
    lease = 2.0

    def __init__(self, names: BrokerNames, prefetch: int = 20) -> None:
        self.queue = names.rabbitmq_queue()
        self.prefetch = prefetch

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {"queue": self.queue, "prefetch": self.prefetch}

    def publish(self, messages: list[tuple[str, bytes]]) -> None:
        asyncio.run(self._publish(messages))

    async def _publish(self, messages: list[tuple[str, bytes]]) -> None:
        import aio_pika

        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(self.queue, durable=True)
            for n, (key, body) in enumerate(messages):
                await channel.default_exchange.publish(
                    aio_pika.Message(body, headers={IDEMPOTENCY_KEY: key}, message_id=f"m{n}"),
                    routing_key=self.queue,
                )

    def counts(self) -> tuple[int, int]:
        """(ready, consumers) as the broker reports them."""
        return asyncio.run(self._counts())

    async def _counts(self) -> tuple[int, int]:
        import aio_pika

        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(self.queue, passive=True)
            result = queue.declaration_result
            return result.message_count or 0, result.consumer_count or 0

    def settled(self) -> bool:
        return self.counts()[0] == 0

    def state(self) -> str:
        ready, consumers = self.counts()
        return f"{ready} ready, {consumers} consumers"
