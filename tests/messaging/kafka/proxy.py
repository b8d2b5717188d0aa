"""A TCP proxy in front of a Kafka broker that can stop answering, to test what a consumer
does with a broker that keeps a request waiting (a hung broker, or one holding a SyncGroup
whose leader left).

Told to withhold some APIs (``withhold(LEAVE_GROUP)``), a connection that carries such a
request forwards nothing more either way from then on while staying open: the client waits
for an answer until its own timeout. The proxy runs its own event loop in a thread, so the
clients it serves can block theirs.
"""

from __future__ import annotations

import asyncio
import socket
import threading

#: Kafka API keys (the first field of every request's header).
OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 11, 12, 13, 14


class Proxy:
    """Listens on ``port`` at once; forwards to the broker given to ``start``."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen()
        self.port: int = self._socket.getsockname()[1]
        self._withheld: frozenset[int] = frozenset()
        #: The API key of each request held back, in order.
        self.held: list[int] = []
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, sock=self._socket), self._loop
        ).result(10)

    def withhold(self, *api_keys: int) -> None:
        """Requests of these APIs (none: every request is forwarded again) go unanswered."""
        self._withheld = frozenset(api_keys)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream = await asyncio.open_connection("127.0.0.1", self._upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, upstream))
        held = asyncio.Event()
        try:
            await asyncio.gather(
                self._requests(reader, upstream, held),
                self._responses(upstream_reader, writer, held),
                return_exceptions=True,
            )
        finally:
            for end in (writer, upstream):
                end.close()
                self._writers.discard(end)

    async def _requests(
        self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, held: asyncio.Event
    ) -> None:
        try:
            while True:
                size = await reader.readexactly(4)
                request = await reader.readexactly(int.from_bytes(size, "big", signed=True))
                api_key = int.from_bytes(request[:2], "big", signed=True)
                if api_key in self._withheld:
                    held.set()
                    self.held.append(api_key)
                    # From here on the broker "says nothing": the client's bytes are read
                    # (so its closing is seen) and dropped.
                    while await reader.read(65536):
                        pass
                    return
                upstream.write(size + request)
                await upstream.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            upstream.close()

    async def _responses(
        self, upstream: asyncio.StreamReader, writer: asyncio.StreamWriter, held: asyncio.Event
    ) -> None:
        try:
            while data := await upstream.read(65536):
                if held.is_set():
                    continue
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            return
        finally:
            writer.close()
