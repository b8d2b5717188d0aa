"""A TCP proxy on the test's event loop whose ``cut()`` drops every connection through it at
once (a reset, as a network blip or a broker restart does to its clients); new connections
go through again, so a client that reconnects finds its server."""

from __future__ import annotations

import asyncio
import contextlib


class CutProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> CutProxy:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await self._server.wait_closed()

    def cut(self) -> None:
        """Abort every live connection, both sides; how many there were is added to cuts."""
        if self._writers:
            self.cuts += 1
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def cut_from_thread(self) -> int:
        """``cut()`` from a thread other than the proxy's loop's, once it is done; 1 when it
        cut live connections, 0 when there were none."""

        async def cut() -> int:
            before = self.cuts
            self.cut()
            return self.cuts - before

        return asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update({writer, up_writer})
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()  # one side gone: the other goes too
