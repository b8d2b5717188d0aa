"""Fault injection on a store's renewals, once per renewal whichever driver sends it.

Embedded stores' async renewals call the sync method (directly, or in a worker thread), so a
wrapper on both would fault one renewal twice — and a stall meant for the async side would
block the event loop. A context variable marks a renewal the async wrapper already handled;
it follows the call into ``asyncio.to_thread`` too.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from typing import Any

from mideng.core.record import Ticket

_HANDLED: contextvars.ContextVar[bool] = contextvars.ContextVar("handled", default=False)


def patch_renewals(store: Any, before: Callable[[Ticket], float]) -> None:
    """Call ``before(ticket)`` ahead of every renewal: it may raise (the renewal fails with
    that) or return seconds to stall first (a sleep, or an await on the async side)."""
    sync, native = store.heartbeat, store.aheartbeat

    def heartbeat(ticket: Ticket, lease: float, ttl: float | None) -> Any:
        if not _HANDLED.get():
            stall = before(ticket)
            if stall:
                time.sleep(stall)
        return sync(ticket, lease, ttl)

    async def aheartbeat(ticket: Ticket, lease: float, ttl: float | None) -> Any:
        stall = before(ticket)
        if stall:
            await asyncio.sleep(stall)
        token = _HANDLED.set(True)
        try:
            return await native(ticket, lease, ttl)
        finally:
            _HANDLED.reset(token)

    store.heartbeat, store.aheartbeat = heartbeat, aheartbeat
