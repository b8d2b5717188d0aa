"""Run the same test body through the sync driver or the async driver.

Async calls all go to one event loop on a background thread (as in a real service), so stores
with loop-bound async clients are exercised the way users run them; sync bodies run in a worker
thread there so a blocking body never stalls the loop's heartbeats.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from mideng import Guard

R = TypeVar("R")


class Runner:
    mode = "sync"

    def call(
        self, guard: Guard, scope: str, key: str, body: Callable[[], R], payload: Any = None
    ) -> R:
        return guard.run(scope, key, body, payload=payload)

    def do(self, coro_fn: Callable[[], Coroutine[Any, Any, R]], sync_fn: Callable[[], R]) -> R:
        return sync_fn()

    def close(self) -> None:
        pass


class AsyncRunner(Runner):
    mode = "async"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def call(
        self, guard: Guard, scope: str, key: str, body: Callable[[], R], payload: Any = None
    ) -> R:
        @functools.wraps(body)
        async def async_body() -> R:
            return await asyncio.to_thread(body)

        return self.submit(guard.arun(scope, key, async_body, payload=payload))

    def do(self, coro_fn: Callable[[], Coroutine[Any, Any, R]], sync_fn: Callable[[], R]) -> R:
        return self.submit(coro_fn())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
