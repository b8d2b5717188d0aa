"""Handlers take turns: an adapter that decides two batches at once still runs one handler
at a time, in the order the messages were read.

The Redis Streams adapter decides a batch while the next one is read and decided, so that
one batch's store round trips overlap the other's Python. Its handlers must not overlap for
that: a handler may hold what cannot be used twice at once (one database connection, state
kept between messages), and every adapter has always run its handlers one at a time, in the
order it read the messages. So each batch the adapter decides gets a ``Turn`` (in ``TURN``,
for the batch's task: tasks copy the context) that follows the one before it: the batch's
first handler waits until the batch before has run its last (``handlers_done``, or the end
of its decision). Everything else of the two batches (reading, keys, claims, completions,
acks) overlaps. Elsewhere ``TURN`` is unset and ``run_handler`` waits for nothing.
"""

from __future__ import annotations

import asyncio
import inspect
from contextvars import ContextVar
from typing import Any


class Turn:
    """One batch's place in line: ``after`` is done when the batch before it has run its
    handlers; ``done`` when this one has."""

    __slots__ = ("after", "done")

    def __init__(self, before: Turn | None) -> None:
        self.after: asyncio.Future[None] | None = None if before is None else before.done
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


TURN: ContextVar[Turn | None] = ContextVar("mideng_handler_turn", default=None)


async def run_handler(handler: Any, coroutine: bool, message: Any) -> None:
    """``handler(message)``: awaited, or run in a thread when it is a ``def``, in its turn."""
    turn = TURN.get()
    if turn is not None and turn.after is not None:
        await turn.after  # the batch before has run its last handler
        turn.after = None
    if coroutine:
        await handler(message)
    elif inspect.isawaitable(done := await asyncio.to_thread(handler, message)):
        await done  # a def that hands back a coroutine (a lambda over an async def)


def handlers_done() -> None:
    """This batch has run its last handler: the next batch's may start."""
    turn = TURN.get()
    if turn is not None:
        turn.finish()
