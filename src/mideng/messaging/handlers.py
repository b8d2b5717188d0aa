"""Running a consumer's handler: awaited, or a ``def`` in a thread; and in turn, so an adapter
that decides two batches at once still runs one handler at a time, in the order the messages
were read.

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
import contextvars
import functools
import inspect
from contextvars import ContextVar
from typing import Any

from mideng.core.event_loop import running_loop
from mideng.guard.cancellation import through


class Turn:
    """One batch's place in line: ``after`` is done when the batch before it has run its
    handlers; ``done`` when this one has."""

    __slots__ = ("after", "done")

    def __init__(self, before: Turn | None) -> None:
        self.after: asyncio.Future[None] | None = None if before is None else before.done
        self.done: asyncio.Future[None] = running_loop().create_future()

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


TURN: ContextVar[Turn | None] = ContextVar("mideng_handler_turn", default=None)


async def run_handler(handler: Any, coroutine: bool, message: Any) -> asyncio.CancelledError | None:
    """``handler(message)``: awaited, or run in a thread when it is a ``def``, in its turn.

    None, or the cancellation that arrived while a ``def`` ran in its thread and returned: a
    thread can't be stopped, so the handler's run is waited for, and the caller completes it
    before it raises that cancellation (released while the thread ran on, the key would let a
    redelivery run the handler beside it). A ``def`` that failed meanwhile raises the
    cancellation: that run is given back, as a cancelled one is."""
    turn = TURN.get()
    if turn is not None and turn.after is not None:
        await turn.after  # the batch before has run its last handler
        turn.after = None
    if coroutine:
        await handler(message)
        return None
    # asyncio.to_thread, with the thread's future shielded from the task's cancellation.
    call = functools.partial(contextvars.copy_context().run, handler, message)
    thread = running_loop().run_in_executor(None, call)
    try:
        done = await asyncio.shield(thread)
    except asyncio.CancelledError as cancelled:
        try:
            done = await through(lambda: thread)
        except Exception:
            raise cancelled from None
        if inspect.isawaitable(done):  # its coroutine not started: nothing ran
            if inspect.iscoroutine(done):
                done.close()
            raise
        return cancelled
    if inspect.isawaitable(done):
        await done  # a def that hands back a coroutine (a lambda over an async def)
    return None


def handlers_done() -> None:
    """This batch has run its last handler: the next batch's may start."""
    turn = TURN.get()
    if turn is not None:
        turn.finish()
