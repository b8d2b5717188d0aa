"""Redis Streams: XADD to the stream named by the destination.

The entry's ``body`` field is the body and every header is a field of its own (the consumer
side reads them back the same way). Redis replies once the entry is in the stream.

Every read waits at most ``timeout`` seconds (redis-py's ``socket_timeout`` and
``socket_connect_timeout``, unless the URL sets them): redis-py before 8.0 waits for ever, so
a server that took the connection and then answered nothing held the relay's start for good.
"""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.publish import Outgoing

BODY = "body"


class RedisPublisher:
    def __init__(self, url: str, *, maxlen: int | None = None, timeout: float = 5.0) -> None:
        try:
            import redis.asyncio
        except ImportError as exc:
            raise ConfigurationError("redis is not installed; pip install 'mideng[redis]'") from exc
        self.url = url
        self.maxlen = maxlen
        self.timeout = timeout
        self._redis: Any = redis.asyncio
        self._client: Any = None

    async def start(self) -> None:
        self._client = self._redis.Redis.from_url(
            self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
        )
        await self._client.ping()

    async def publish(self, message: Outgoing) -> None:
        if BODY in message.headers:
            raise ConfigurationError(f"a header may not be named {BODY!r}: it is the body field")
        fields: dict[str, Any] = {BODY: message.body, **message.headers}
        await self._client.xadd(message.destination, fields, maxlen=self.maxlen, approximate=True)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
