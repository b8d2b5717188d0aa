"""NATS JetStream: subject = destination, ``Nats-Msg-Id`` = the message id.

JetStream acknowledges a publish once the stream stored it, and drops a message whose
``Nats-Msg-Id`` it saw within the stream's duplicate window: a re-publish after a crash is
then not stored twice. A subject no stream captures fails the publish.

A client tries each server ``CONNECT_ATTEMPTS`` times, ``RECONNECT_WAIT`` seconds apart, to
connect, and as many to reconnect once it lost its server; then it is closed for good, and
the next publish connects a new one rather than failing, and every row after it, for ever
(the relay keeps one publisher for its whole life). nats-py's own budget (61 attempts, 2 s
apart, each failure logged with its traceback) held a relay's start for two minutes on a
server it could not reach; now that is an error within about a second, each failed attempt
one log line.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.publish import Outgoing, check_options
from mideng.observability import logs

MSG_ID = "Nats-Msg-Id"
CONNECT_ATTEMPTS = 3
RECONNECT_WAIT = 0.5


async def _client_error(exc: Exception) -> None:
    """nats-py's report of an error of its own (a failed connect among them): one line."""
    logs.publisher_client_error("nats", exc)


class NatsPublisher:
    """``timeout``: how long a connect, and a publish's JetStream ack, may take. ``options``
    go to ``nats.connect`` (``user``, ``password``, ``tls``, ``max_reconnect_attempts`` ...)."""

    def __init__(self, url: str, *, timeout: float = 10.0, **options: Any) -> None:
        try:
            import nats
            from nats.aio.client import Client
        except ImportError as exc:
            raise ConfigurationError(
                "nats-py is not installed; pip install 'mideng[nats]'"
            ) from exc
        check_options(Client.connect, options, "nats.connect")
        self.url = url
        self.timeout = timeout
        self.options = {
            "connect_timeout": timeout,
            # nats-py counts the attempts after the first.
            "max_reconnect_attempts": CONNECT_ATTEMPTS - 1,
            "reconnect_time_wait": RECONNECT_WAIT,
            "error_cb": _client_error,
            **options,
        }
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
