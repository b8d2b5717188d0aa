"""Redis Streams: XADD to the stream named by the destination.

The entry's ``body`` field is the body and every header is a field of its own (the consumer
side reads them back the same way). Redis replies once the entry is in the stream.

Every connect and every read waits at most ``timeout`` seconds (redis-py's
``socket_connect_timeout`` and ``socket_timeout``; a URL's own are kept where they are
shorter). redis-py before 8.0 waits for ever, so a server that took the connection and then
answered nothing held the relay's start for good; and a cancelled read is no bound: redis-py
can swallow a cancellation that arrives just after it sent a command, and wait on for its
reply. So the relay gives the publisher it opens a ``timeout`` that ends a publish within
the key's lease on its own (mideng.outbox.relay).
"""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.publish import Outgoing

BODY = "body"
#: The URL options that bound a wait for the server.
_TIMEOUTS = ("socket_timeout", "socket_connect_timeout")


class RedisPublisher:
    def __init__(self, url: str, *, maxlen: int | None = None, timeout: float = 5.0) -> None:
        try:
            import redis.asyncio
            import redis.asyncio.connection
        except ImportError as exc:
            raise ConfigurationError("redis is not installed; pip install 'mideng[redis]'") from exc
        self.url = url
        self.maxlen = maxlen
        self.timeout = timeout
        self._redis: Any = redis.asyncio
        self._parse_url: Any = redis.asyncio.connection.parse_url
        self._client: Any = None

    async def start(self) -> None:
        self._client = self._redis.Redis.from_pool(self._redis.ConnectionPool(**self._options()))
        await self._client.ping()

    def _options(self) -> dict[str, Any]:
        """The URL's connection options, none of its waits longer than ``timeout``."""
        options: dict[str, Any] = self._parse_url(self.url)
        for name in _TIMEOUTS:
            given = options.get(name)
            options[name] = self.timeout if given is None else min(given, self.timeout)
        return options

    async def publish(self, message: Outgoing) -> None:
        if BODY in message.headers:
            raise ConfigurationError(f"a header may not be named {BODY!r}: it is the body field")
        fields: dict[str, Any] = {BODY: message.body, **message.headers}
        await self._client.xadd(message.destination, fields, maxlen=self.maxlen, approximate=True)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
