"""The memory store's async claim, completion and release: the sync operations, run in place."""

from __future__ import annotations

import asyncio
import threading

from mideng.core.record import Claim, ClaimRequest, Outcome, Record, Status, Ticket
from mideng.stores.memory import MemoryStore


class Watched(MemoryStore):
    """Records the thread each sync operation runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def claim(self, req: ClaimRequest) -> Claim:
        self.threads.append(threading.get_ident())
        return super().claim(req)

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        self.threads.append(threading.get_ident())
        return super().complete(ticket, result, codec, ttl)

    def release(self, ticket: Ticket) -> None:
        self.threads.append(threading.get_ident())
        super().release(ticket)


def test_async_twins_run_the_sync_operations_on_the_loop_thread() -> None:
    store = Watched()

    async def flow() -> None:
        first = await store.aclaim(ClaimRequest("s", "done", "o-1", 60.0, None))
        assert first.outcome is Outcome.ACQUIRED
        record = await store.acomplete(Ticket.of(first.record), b"1", "json", None)
        assert record.status is Status.SUCCEEDED
        assert record.result == b"1"
        again = await store.aclaim(ClaimRequest("s", "done", "o-2", 60.0, None))
        assert again.outcome is Outcome.REPLAY
        assert again.record.result == b"1"

        held = await store.aclaim(ClaimRequest("s", "held", "o-3", 60.0, None))
        await store.arelease(Ticket.of(held.record))
        assert store.get("s", "held") is None

    asyncio.run(flow())
    # Each async call ran its sync operation once, on the thread running the loop.
    assert store.threads == [threading.get_ident()] * 5
