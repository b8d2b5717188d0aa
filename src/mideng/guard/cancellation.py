"""What an async guarded call still writes when its task is cancelled at a store call.

A cancellation (a client gone, an ``asyncio.timeout`` run out, a consumer stopping) arrives
at whatever the task awaits. A settling write it cuts short is done again to its end by
mideng.guard.settling; this module holds what the drivers do when it cuts a claim short, and
``through``, which carries a write to its end for the consumers' own writes.

A claim cut short may have landed with its answer lost: then the key is held by a call that
is gone, until its lease runs out (under ``on_expiry="unknown"``, never: the next caller
would find it UNKNOWN though nothing ran). ``give_back`` looks for that claim, by its owner,
and releases it. A claim still in flight at the store when the look is made can land after
it; that one is left to its lease.

None of this is on the way of a call that is not cancelled: the drivers catch the
cancellation and call here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mideng.core.flow import Call
from mideng.core.record import PROCESSING, Ticket
from mideng.errors import IdempotencyError
from mideng.observability import logs

T = TypeVar("T")


async def through(start: Callable[[], Awaitable[T]]) -> T:
    """``await start()``, carried to its end however often the awaiting task is cancelled
    meanwhile; its result, or its own error. The caller raises its cancellation after."""
    task = asyncio.ensure_future(start())
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            continue  # the write goes on; the cancellation the caller holds is raised after
    return task.result()  # a task cancelled itself (its loop closing) raises CancelledError


async def give_back(store: Any, call: Call) -> None:
    """The claim of ``call`` was cut short: if it landed, release it (the body never ran)."""

    async def own() -> None:
        record = await store.aget(call.scope, call.key)
        if record is not None and record.status is PROCESSING and record.owner == call.owner:
            await store.arelease(Ticket.of(record))

    try:
        await through(own)
    except IdempotencyError as exc:  # left to its lease
        logs.unsettled(call, asyncio.CancelledError(), exc)
