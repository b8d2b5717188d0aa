from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.brokers import NATS_URL, BrokerNames, NatsNames, broker_names  # noqa: F401
from tests.helpers.storm import headers_of


class NatsSide:
    """A fresh stream (``subject`` and ``subject.>``) and the durable the consumers share."""

    broker = "nats"
    url = NATS_URL
    lease = 10.0

    def __init__(self, names: NatsNames, *, ack_wait: float = 2.0, batch: int = 10) -> None:
        self.names = names
        self.ack_wait = ack_wait
        self.batch = batch
        asyncio.run(self._create())

    async def _create(self) -> None:
        import nats

        client = await nats.connect(self.url)
        try:
            await client.jetstream().add_stream(
                name=self.names.stream, subjects=[self.names.subject, self.names.wildcard]
            )
        finally:
            await client.close()

    def publish(self, messages: list[tuple[str, bytes]], subject: str | None = None) -> None:
        asyncio.run(self._publish(messages, subject or self.names.subject))

    async def _publish(self, messages: list[tuple[str, bytes]], subject: str) -> None:
        import nats

        client = await nats.connect(self.url)
        try:
            jetstream = client.jetstream()
            for key, body in messages:
                await jetstream.publish(subject, body, headers=headers_of(key))
        finally:
            await client.close()

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {
            "stream": self.names.stream,
            "subject": self.names.subject,
            "durable": self.names.durable,
            "batch": self.batch,
            "ack_wait": self.ack_wait,
            "fetch_timeout": 0.5,
        }

    def info(self) -> Any:
        return asyncio.run(self._info())

    async def _info(self) -> Any:
        import nats
        from nats.js.errors import NotFoundError

        client = await nats.connect(self.url)
        try:
            try:
                return await client.jetstream().consumer_info(self.names.stream, self.names.durable)
            except NotFoundError:
                return None
        finally:
            await client.close()

    def state(self) -> str:
        info = self.info()
        if info is None:
            return "no durable"
        return f"{info.num_pending} pending, {info.num_ack_pending} unacked"

    def settled(self) -> bool:
        info = self.info()
        return info is not None and info.num_pending == 0 and info.num_ack_pending == 0


@pytest.fixture
def nats_side(broker_names: BrokerNames) -> NatsSide:  # noqa: F811
    return NatsSide(broker_names.nats())
