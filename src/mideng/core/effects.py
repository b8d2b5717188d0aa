"""Code that sync and async callers both need, written once: a generator of effects.

A procedure that does I/O (a store call, a pause) is written as a generator. Where it needs
I/O it yields an ``Effect`` — one call, as a blocking function and as a coroutine function,
with its arguments — and receives the call's answer, or has the call's error thrown in at
that ``yield``. ``run`` carries the effects out with blocking calls, ``arun`` with ``await``;
the procedure, every decision it makes between two calls, exists once. (``mideng.db`` drives
SQL statements the same way; this is the same idea for anything with a sync and an async
twin: a store's operations, a pause.)

    def forget_all(store, keys) -> Effects[int]:
        gone = 0
        for scope, key in keys:
            gone += (yield call(store.forget, store.aforget, scope, key))
        return gone

    run(forget_all(store, keys))            # blocking
    await arun(forget_all(store, keys))     # on the event loop

Errors: whatever an effect raises is thrown in at its ``yield`` — on the async side a
``CancelledError`` that reaches the awaited call too — so a procedure that must undo or finish
something before it gives up says so where the call is (a rollback; a write finished with a
``shielded`` effect, below). A procedure that handles only ``Exception`` lets an interrupt
(KeyboardInterrupt, SystemExit) or a cancellation pass through it unchanged.

``shielded(effect)``: ``arun`` carries it to its end however often the task is cancelled
meanwhile, then throws the (first) cancellation in; ``run`` makes it as any other.

A procedure whose I/O is one operation its caller hands it, as a blocking and as a coroutine
function, can be a coroutine function instead: it awaits what it was handed. On the event loop
that is the operation's own coroutine, awaited with no driver between; the blocking side hands
it a coroutine that makes the blocking call and never suspends, and ``completed`` carries the
procedure out without an event loop. (``mideng.http.exchange``: the Guard's drive or adrive.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


class Effect(NamedTuple, Generic[T]):
    """One call a procedure asks its driver to make: ``sync(*args, **kwargs)`` from ``run``,
    ``await aio(*args, **kwargs)`` from ``arun``; ``shield``: carried to its end by ``arun``
    however often its task is cancelled meanwhile."""

    sync: Callable[..., T]
    aio: Callable[..., Awaitable[T]]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    shield: bool = False

    def __repr__(self) -> str:
        name = getattr(self.sync, "__qualname__", repr(self.sync))
        return f"Effect({name}{', shielded' if self.shield else ''})"


#: A procedure: yields effects, receives their answers, returns a T.
Effects = Generator[Effect[Any], Any, T]


def call(
    sync: Callable[P, T], aio: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
) -> Effect[T]:
    """The effect of calling ``sync`` (blocking) or ``aio`` (awaited) with these arguments;
    mypy checks them against both."""
    return Effect(sync, aio, args, kwargs)


def shielded(effect: Effect[T]) -> Effect[T]:
    """``effect``, carried to its end by ``arun`` even when its task is cancelled meanwhile."""
    return effect._replace(shield=True)


def either(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Effect[Any]:
    """A call to a method that is blocking on one object and a coroutine on its twin (a sync
    or an async connection handed to the procedure): the same method serves whichever loop
    runs the procedure, which is the one that matches the object."""
    return Effect(method, method, args, kwargs)


def pause(seconds: float) -> Effect[None]:
    """Sleep ``seconds``: ``time.sleep`` from ``run``, ``asyncio.sleep`` from ``arun``."""
    return Effect(time.sleep, asyncio.sleep, (seconds,), {})


def answer(value: T) -> Effects[T]:
    """A procedure that makes no call and returns ``value``: where a procedure is asked for
    and what it has to do needs no I/O."""
    yield from ()  # nothing to carry out
    return value


def run(procedure: Effects[T]) -> T:
    """Carry ``procedure`` out with blocking calls; its return value."""
    try:
        effect = next(procedure)
        while True:
            try:
                answer = effect.sync(*effect.args, **effect.kwargs)
            except BaseException as exc:
                effect = procedure.throw(exc)
            else:
                effect = procedure.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        procedure.close()


async def arun(procedure: Effects[T]) -> T:
    """Carry ``procedure`` out on the running event loop; its return value."""
    try:
        effect = next(procedure)
        while True:
            try:
                if effect.shield:
                    answer = await _to_its_end(effect)
                else:
                    answer = await effect.aio(*effect.args, **effect.kwargs)
            except BaseException as exc:
                effect = procedure.throw(exc)
            else:
                effect = procedure.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        procedure.close()


def completed(procedure: Coroutine[Any, Any, T]) -> T:
    """The return value of ``procedure``, a coroutine every await of which is over at once (a
    blocking call made in place): carried out here, without an event loop."""
    try:
        suspended = procedure.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    procedure.close()
    raise RuntimeError(f"a blocking procedure awaited something that suspends: {suspended!r}")


async def _to_its_end(effect: Effect[T]) -> T:
    """Await ``effect`` to its end whatever cancels the awaiting task meanwhile; then its
    answer, its own error, or the first cancellation that arrived while it ran."""
    task = asyncio.ensure_future(effect.aio(*effect.args, **effect.kwargs))
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    answer = task.result()  # a task cancelled itself (its loop closing) raises CancelledError
    if cancelled is not None:
        raise cancelled
    return answer
