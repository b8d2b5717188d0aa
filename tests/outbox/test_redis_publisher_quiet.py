"""The Redis publisher gives up on a server that stops answering. Without a socket timeout
(redis-py before 8.0 sets none) redis-py waits for a reply for ever: the relay's start (the
publisher's PING) hung for good on a server that took the connection and never answered, and
each publish held its key until the batch's lease ended. The publisher now sets one itself."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from mideng.messaging.publish import open_publisher, outgoing


class QuietServer:
    """Accepts connections and reads what comes, answering nothing."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._served: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> QuietServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        await asyncio.gather(*self._served, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self._served.append(task)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass


def test_start_and_publish_give_up_on_a_server_that_never_answers() -> None:
    from redis.exceptions import RedisError

    async def main() -> tuple[float, float]:
        async with QuietServer() as server:
            publisher = open_publisher(f"redis://127.0.0.1:{server.port}/0", timeout=0.5)
            began = time.monotonic()
            # The 60 s bound only keeps a hang from holding the test (it would raise the
            # builtin TimeoutError, not redis-py's error): the publisher's own timeout ends
            # each call long before.
            with pytest.raises(RedisError):
                await asyncio.wait_for(publisher.start(), 60)
            started = time.monotonic() - began
            began = time.monotonic()
            try:
                with pytest.raises(RedisError):
                    await asyncio.wait_for(
                        publisher.publish(outgoing("orders", b"{}", key="k")), 60
                    )
            finally:
                await publisher.close()
            return started, time.monotonic() - began

    started, published = asyncio.run(main())
    assert started < 30
    assert published < 30
