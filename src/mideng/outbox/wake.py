"""What the relay waits on between batches: PostgreSQL's NOTIFY, or a poll interval.

The outbox table's trigger NOTIFYs when rows are inserted, and PostgreSQL delivers that only
when the inserting transaction commits; the relay listens on a connection of its own and wakes
at once. Notifications that arrive during a batch stay queued on that connection, so none is
missed between two waits. The poll interval still bounds every wait: a row whose retry time
has come, or a key another relay let go of, sends no notification.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mideng.observability import logs

#: How often a wait looks at its stop event (seconds).
SLICE = 0.25


class Poll:
    """Wait the poll interval (or until stopped)."""

    async def start(self) -> None:
        return None

    async def wait(self, timeout: float, stop: asyncio.Event) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout)

    async def close(self) -> None:
        return None


class Listen(Poll):
    """LISTEN on a psycopg connection; falls back to polling while it cannot connect."""

    def __init__(self, conninfo: str, channel: str) -> None:
        self.conninfo = conninfo
        self.channel = channel
        self._connection: Any = None

    async def start(self) -> None:
        import psycopg

        try:
            self._connection = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
            await self._connection.execute(f'LISTEN "{self.channel}"')
        except psycopg.Error as exc:
            logs.listen_unavailable(exc)
            await self.close()

    async def wait(self, timeout: float, stop: asyncio.Event) -> None:
        import psycopg

        if self._connection is None or self._connection.closed:
            await self.start()
            if self._connection is None:
                await super().wait(timeout, stop)
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Short slices rather than a cancelled read: a stop request is seen within one, and
        # a notification that arrives between two slices waits on the socket for the next.
        while not stop.is_set():
            left = deadline - loop.time()
            if left <= 0:
                return
            try:
                async for _ in self._connection.notifies(timeout=min(left, SLICE), stop_after=1):
                    return
            except psycopg.Error as exc:
                logs.listen_lost(exc)
                await self.close()
                return

    async def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
            self._connection = None
