"""NATS JetStream: subject = destination, ``Nats-Msg-Id`` = the message id.

JetStream acknowledges a publish once the stream stored it, and drops a message whose
``Nats-Msg-Id`` it saw within the stream's duplicate window: a re-publish after a crash is
then not stored twice. A subject no stream captures fails the publish.
"""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.publish import Outgoing

MSG_ID = "Nats-Msg-Id"


class NatsPublisher:
    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        try:
            import nats
        except ImportError as exc:
            raise ConfigurationError(
                "nats-py is not installed; pip install 'mideng[nats]'"
            ) from exc
        self.url = url
        self.timeout = timeout
        self._nats: Any = nats
        self._client: Any = None
        self._jetstream: Any = None

    async def start(self) -> None:
        self._client = await self._nats.connect(self.url, connect_timeout=self.timeout)
        self._jetstream = self._client.jetstream(timeout=self.timeout)

    async def publish(self, message: Outgoing) -> None:
        headers = {**message.headers, MSG_ID: message.message_id}
        await self._jetstream.publish(message.destination, message.body, headers=headers)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
