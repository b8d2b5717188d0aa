"""Lease renewal while a body runs: one timer thread per Guard (sync), loop timers (async).

A body shorter than a third of its lease never touches the store for a heartbeat: the sync
side only adds itself to a table the timer thread looks at, the async side only arms a loop
timer. A holder that is killed or stopped stops renewing, so its lease runs out and a take-over
becomes possible.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable

from mideng.errors import IdempotencyError

log = logging.getLogger("mideng")
# How long the timer thread waits with no beats before it looks again (and, still with none,
# exits).
_IDLE = 5.0


class Beat:
    # ``lock`` is held while a renewal runs: stopping a beat waits for an in-flight renewal, so
    # once the body's claim is completed or released no heartbeat of it is still talking to
    # the store (and a store closed right after is never used by this thread).
    __slots__ = ("cancelled", "due", "lock", "lost", "period", "renew")

    def __init__(self, period: float, renew: Callable[[], object]) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.lost = False
        self.period = period
        self.renew = renew
        self.due = time.monotonic() + period


class Heartbeats:
    """Live beats in a dict (O(1) to add and drop) served by one daemon thread.

    The thread sleeps until the earliest due beat; a new beat wakes it only when it is due
    sooner than that, which a beat with the usual period never is.
    """

    def __init__(self) -> None:
        self._reset()
        _ALL.add(self)

    def _reset(self) -> None:
        # A forked child has none of its parent's threads: it starts its own timer on demand.
        self._beats: dict[int, Beat] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wake_at = float("inf")
        self._stopping = False

    def start(self, period: float, renew: Callable[[], object]) -> Callable[[], None]:
        """Begin renewing; returns the function that stops it."""
        beat = Beat(period, renew)
        ident = next(self._ids)
        with self._cond:
            self._beats[ident] = beat
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(
                    target=self._serve, name="mideng-heartbeat", daemon=True
                )
                self._thread.start()
            elif beat.due < self._wake_at:
                self._cond.notify()

        def stop() -> None:
            with beat.lock:
                beat.cancelled = True
            with self._cond:
                self._beats.pop(ident, None)

        return stop

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the timer thread and wait for it (at interpreter exit: a daemon thread caught
        inside a driver's C code while the interpreter tears down can crash the process)."""
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _serve(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    self._thread = None
                    return
                if not self._beats:
                    # The thread wakes then anyway: a beat due later (any lease over 15 s)
                    # must not wake it now. Waking a thread costs a context switch, and a
                    # caller making one call at a time empties the table on every call.
                    self._wake_at = time.monotonic() + _IDLE
                    self._cond.wait(timeout=_IDLE)
                    if not self._beats:
                        self._thread = None
                        return
                now = time.monotonic()
                due = [b for b in self._beats.values() if b.due <= now]
                if not due:
                    self._wake_at = min(b.due for b in self._beats.values())
                    self._cond.wait(timeout=self._wake_at - now)
                    continue
            for beat in due:
                _renew_once(beat)


_ALL: weakref.WeakSet[Heartbeats] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for heartbeats in list(_ALL):
        heartbeats._reset()


def _shutdown_all() -> None:
    for heartbeats in list(_ALL):
        heartbeats.shutdown()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_shutdown_all)


def _renew_once(beat: Beat) -> None:
    with beat.lock:
        if beat.cancelled or beat.lost:
            return
        _renew_locked(beat)


def _renew_locked(beat: Beat) -> None:
    try:
        beat.renew()
    except IdempotencyError as exc:
        # Lost lease or store trouble: stop renewing; the completion will be fenced anyway.
        beat.lost = True
        beat.due = float("inf")
        log.warning("mideng heartbeat stopped: %s", exc)
        return
    beat.due = time.monotonic() + beat.period


class AsyncBeat:
    __slots__ = ("cancelled", "due", "period", "renew", "task")

    def __init__(self, period: float, renew: Callable[[], Awaitable[object]], due: float) -> None:
        self.cancelled = False
        self.period = period
        self.renew = renew
        self.due = due
        self.task: asyncio.Task[None] | None = None  # a renewal in flight


class _LoopBeats:
    """One event loop's beats, served by one loop timer set for the earliest due.

    As on the sync side, a beat with the usual period arms nothing: a timer per call would be
    cancelled when the body returns and stay in the loop's timer heap until the loop sweeps
    it, and every other timer of the loop (each socket timeout of a client) sifts past the
    hundreds that pile up, at a Python-level comparison per step.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.beats: dict[int, AsyncBeat] = {}
        self.ids = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        self.at = float("inf")

    def start(self, period: float, renew: Callable[[], Awaitable[object]]) -> Callable[[], None]:
        beat = AsyncBeat(period, renew, self.loop.time() + period)
        ident = next(self.ids)
        self.beats[ident] = beat
        self._arm(beat.due)

        def stop() -> None:
            beat.cancelled = True
            self.beats.pop(ident, None)
            if beat.task is not None and not beat.task.done():
                beat.task.cancel()

        return stop

    def _arm(self, due: float) -> None:
        if due < self.at:
            if self.timer is not None:
                self.timer.cancel()
            self.at = due
            self.timer = self.loop.call_at(due, self._tick)

    def _tick(self) -> None:
        self.timer, self.at = None, float("inf")
        now = self.loop.time()
        for beat in list(self.beats.values()):
            if beat.task is not None or beat.cancelled:
                continue  # renewing (it re-arms when done), or stopped by a lost lease
            if beat.due <= now:
                beat.task = self.loop.create_task(self._renew(beat))
            else:
                self._arm(beat.due)

    async def _renew(self, beat: AsyncBeat) -> None:
        try:
            await beat.renew()
        except IdempotencyError as exc:
            # Lost lease or store trouble: stop renewing; the completion is fenced anyway.
            log.warning("mideng heartbeat stopped: %s", exc)
            beat.cancelled = True
            return
        finally:
            beat.task = None
        if not beat.cancelled:
            beat.due = self.loop.time() + beat.period
            self._arm(beat.due)


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBeats] = (
    weakref.WeakKeyDictionary()
)


def start_async(period: float, renew: Callable[[], Awaitable[object]]) -> Callable[[], None]:
    """Begin renewing on the running loop; returns the function that stops it."""
    loop = asyncio.get_running_loop()
    beats = _LOOPS.get(loop)
    if beats is None:
        beats = _LOOPS[loop] = _LoopBeats(loop)
    return beats.start(period, renew)
