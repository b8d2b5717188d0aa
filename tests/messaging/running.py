"""Run an adapter's ``consume`` in-process until a condition holds, then stop it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def consume_until(
    consume: Callable[[asyncio.Event], Awaitable[None]],
    condition: Callable[[], Awaitable[bool]],
    timeout: float = 20.0,
) -> float:
    """Start ``consume(stop)``, poll ``condition``, set stop; returns how long stopping took."""
    stop = asyncio.Event()
    task = asyncio.ensure_future(consume(stop))
    deadline = time.monotonic() + timeout
    try:
        while not await condition():
            if task.done():
                await task  # it died: raise its error
                raise AssertionError("consume returned before the condition held")
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for the condition")
            await asyncio.sleep(0.05)
    finally:
        stop.set()
    began = time.monotonic()
    await asyncio.wait_for(task, 15)
    return time.monotonic() - began
