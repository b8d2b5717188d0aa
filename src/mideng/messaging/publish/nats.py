"""NATS JetStream: subject = destination, ``Nats-Msg-Id`` = the message id.

JetStream acknowledges a publish once the stream stored it, and drops a message whose
``Nats-Msg-Id`` it saw within the stream's duplicate window: a re-publish after a crash is
then not stored twice. A subject no stream captures fails the publish.

nats-py reconnects by itself, but once it gives up (``max_reconnect_attempts``, 60 by
default, 2 s apart) its client is closed for good. The relay keeps one publisher for its whole
life, so a publish that finds the client closed connects a new one rather than failing, and
every row after it, for ever.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.publish import Outgoing

MSG_ID = "Nats-Msg-Id"


class NatsPublisher:
    """``options`` go to ``nats.connect`` (``user``, ``password``, ``tls``,
    ``max_reconnect_attempts`` ...)."""

    def __init__(self, url: str, *, timeout: float = 10.0, **options: Any) -> None:
        try:
            import nats
        except ImportError as exc:
            raise ConfigurationError(
                "nats-py is not installed; pip install 'mideng[nats]'"
            ) from exc
        self.url = url
        self.timeout = timeout
        self.options = {"connect_timeout": timeout, **options}
        self._nats: Any = nats
        self._client: Any = None
        self._jetstream: Any = None
        # Keys publish side by side: one of them connects, the others wait for its client.
        self._connecting = asyncio.Lock()

    async def start(self) -> None:
        self._client = await self._nats.connect(self.url, **self.options)
        self._jetstream = self._client.jetstream(timeout=self.timeout)

    async def publish(self, message: Outgoing) -> None:
        if self._client is not None and self._client.is_closed:
            async with self._connecting:
                if self._client is not None and self._client.is_closed:
                    await self.start()
        headers = {**message.headers, MSG_ID: message.message_id}
        await self._jetstream.publish(message.destination, message.body, headers=headers)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
