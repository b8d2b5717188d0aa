"""Stores that stop at a chosen await until the test lets them go, so a test can cancel the
task waiting there: ``gate(store, "acomplete")`` makes the store's next ``acomplete`` wait.

``before=True`` (the default) stops before the store is asked (the write never started);
``before=False`` stops after it answered (the write landed, its answer not yet seen: a
cancellation there is one that cut a call short in flight). Only the first ``times`` calls
stop; later ones (a write done again) pass straight through.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


class Gate:
    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.go = asyncio.Event()
        self.calls = 0


def gate(store: Any, name: str, *, before: bool = True, times: int = 1) -> Gate:
    """Make ``store.<name>`` stop at its first ``times`` calls until ``Gate.go`` is set."""
    original = getattr(store, name)
    stop = Gate()

    async def gated(*args: Any, **kwargs: Any) -> Any:
        stop.calls += 1
        if stop.calls > times:
            return await original(*args, **kwargs)
        if before:
            stop.reached.set()
            await stop.go.wait()
            return await original(*args, **kwargs)
        answer = await original(*args, **kwargs)
        stop.reached.set()
        await stop.go.wait()
        return answer

    setattr(store, name, gated)
    return stop


async def cancel_at(task: asyncio.Task[Any], stop: Gate) -> None:
    """Cancel ``task`` once it waits at ``stop``; return when it has ended (cancelled)."""
    await stop.reached.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return
    raise AssertionError("the task was not cancelled")


def gate_class(store: Any, name: str, *, before: bool = True, times: int = 1) -> Gate:
    """``gate``, on the store's class (a subclass made for this store): for callers that take
    the class's own operation, as the Guard's loops do while metrics are on."""
    holder = types.SimpleNamespace(**{name: getattr(type(store), name)})  # the plain function
    stop = gate(holder, name, before=before, times=times)
    gated = getattr(holder, name)

    async def operation(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await gated(self, *args, **kwargs)

    store.__class__ = type(f"Gated{type(store).__name__}", (type(store),), {name: operation})
    return stop


async def cancelled_at_completion(store: Any, consume: Coroutine[Any, Any, Any]) -> None:
    """Run ``consume`` until its first completion (one message's, or a batch's) reaches
    ``store``, cancel it there, let the completion written again pass, and see it raise its
    cancellation: the broker adapters' shared scenario."""
    one, many = gate(store, "acomplete"), gate(store, "acomplete_many")
    task = asyncio.ensure_future(consume)
    waits = [asyncio.ensure_future(g.reached.wait()) for g in (one, many)]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()
    task.cancel()
    one.go.set()  # the completion written again (by either call) passes
    many.go.set()
    try:
        await task
    except asyncio.CancelledError:
        return
    raise AssertionError("the consume was not cancelled")


def run_closing(store: Any, scenario: Callable[[], Awaitable[None]]) -> None:
    """``asyncio.run(scenario())``, the store closed on the same loop afterwards."""

    async def main() -> None:
        try:
            await scenario()
        finally:
            await store.aclose()

    asyncio.run(main())
