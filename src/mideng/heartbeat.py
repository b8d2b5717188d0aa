"""Lease renewal while a body runs: one timer thread per Guard (sync), loop timers (async).

A body shorter than a third of its lease never touches the store for a heartbeat: the sync
side only pushes onto a heap, the async side only arms a loop timer. A holder that is killed or
stopped stops renewing, so its lease runs out and a take-over becomes possible.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from mideng.errors import IdempotencyError

log = logging.getLogger("mideng")


class Beat:
    __slots__ = ("cancelled", "lost")

    def __init__(self) -> None:
        self.cancelled = False
        self.lost = False

    def cancel(self) -> None:
        self.cancelled = True


class Heartbeats:
    """A heap of due renewals served by one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, float, Beat, Callable[[], object]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def start(self, period: float, renew: Callable[[], object]) -> Beat:
        beat = Beat()
        with self._cond:
            heapq.heappush(
                self._heap, (time.monotonic() + period, next(self._seq), period, beat, renew)
            )
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="mideng-heartbeat", daemon=True
                )
                self._thread.start()
            elif self._heap[0][3] is beat:
                self._cond.notify()
        return beat

    def _serve(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][3].cancelled:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait(timeout=5.0)
                    if not self._heap:
                        self._thread = None
                        return
                    continue
                due = self._heap[0][0]
                delay = due - time.monotonic()
                if delay > 0:
                    self._cond.wait(timeout=delay)
                    continue
                _, _, period, beat, renew = heapq.heappop(self._heap)
            if _renew_once(beat, renew):
                with self._cond:
                    heapq.heappush(
                        self._heap,
                        (time.monotonic() + period, next(self._seq), period, beat, renew),
                    )


def _renew_once(beat: Beat, renew: Callable[[], object]) -> bool:
    if beat.cancelled:
        return False
    try:
        renew()
    except IdempotencyError as exc:
        # Lost lease or store trouble: stop renewing; the completion will be fenced anyway.
        beat.lost = True
        log.warning("mideng heartbeat stopped: %s", exc)
        return False
    return not beat.cancelled


class AsyncBeat(Beat):
    __slots__ = ("handle", "task")

    def __init__(self) -> None:
        super().__init__()
        self.handle: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.handle is not None:
            self.handle.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()


def start_async(period: float, renew: Callable[[], Awaitable[object]]) -> AsyncBeat:
    loop = asyncio.get_running_loop()
    beat = AsyncBeat()

    async def fire() -> None:
        try:
            await renew()
        except IdempotencyError as exc:
            beat.lost = True
            log.warning("mideng heartbeat stopped: %s", exc)
            return
        if not beat.cancelled:
            beat.handle = loop.call_later(period, spawn)

    def spawn() -> None:
        if not beat.cancelled:
            beat.task = loop.create_task(fire())

    beat.handle = loop.call_later(period, spawn)
    return beat
