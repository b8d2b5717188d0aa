"""Lease renewal while an async body runs: one loop timer per event loop, a task per renewal.

The schedule is ``mideng.guard.heartbeat.schedule``'s, as on the sync side
(``mideng.guard.heartbeat.threads``); a renewal still unanswered when the lease it protects has
run out is abandoned and tried again.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from mideng.core.event_loop import running_loop
from mideng.guard.heartbeat.schedule import Lease

_INF = float("inf")


class AsyncBeat(Lease):
    """A lease renewed on an event loop, one of ``beats`` (the loop's). A renewal is
    ``store.aheartbeat(what, lease, ttl)`` when ``store`` is given (``renew_store``), else
    ``renew()``; ``task`` is the renewal in flight, if any."""

    __slots__ = ("beats", "store", "task", "ttl")

    def __init__(
        self,
        beats: _LoopBeats,
        lease: float,
        renew: Callable[[], Awaitable[object]],
        what: object,
        now: float,
        store: Any = None,
        ttl: float | None = None,
    ) -> None:
        super().__init__(lease, renew, what, now)
        self.beats = beats
        self.task: asyncio.Task[None] | None = None
        self.store = store
        self.ttl = ttl

    def stop(self) -> None:
        self.beats.stop(self.ident)


#: A beat not yet due: (due, lease, renew, what, started, store, ttl). Most bodies end before
#: their first renewal; the loop's timer makes an AsyncBeat of one only when it falls due.
Pending = tuple[float, float, Callable[[], Awaitable[object]], object, float, Any, float | None]


class _LoopBeats:
    """One event loop's beats, served by one loop timer set for the earliest due.

    As on the sync side, a beat with the usual period arms nothing: a timer per call would be
    cancelled when the body returns and stay in the loop's timer heap until the loop sweeps
    it, and every other timer of the loop (each socket timeout of a client) sifts past the
    hundreds that pile up, at a Python-level comparison per step.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.beats: dict[int, AsyncBeat | Pending] = {}
        self.ids = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        self.at = _INF

    def start(
        self,
        lease: float,
        renew: Callable[[], Awaitable[object]],
        what: object,
        store: Any = None,
        ttl: float | None = None,
    ) -> Callable[[], None]:
        """Renew every ``lease / 3`` from now; the function that stops it."""
        now = self.loop.time()
        due = now + lease / 3
        ident = next(self.ids)
        self.beats[ident] = (due, lease, renew, what, now, store, ttl)
        if due < self.at:  # else the loop's timer is due first, and finds this one then
            self.arm(due)
        return functools.partial(self.stop, ident)

    def hold(
        self, lease: float, renew: Callable[[], Awaitable[object]], what: object, since: float
    ) -> AsyncBeat:
        """Renew a lease granted no earlier than ``since``; the beat says whether it holds."""
        beat = AsyncBeat(self, lease, renew, what, since)
        beat.ident = ident = next(self.ids)
        self.beats[ident] = beat
        if beat.due < self.at:
            self.arm(beat.due)
        return beat

    def stop(self, ident: int) -> None:
        entry = self.beats.pop(ident, None)
        if isinstance(entry, AsyncBeat):
            entry.cancelled = True
            task = entry.task
            if task is not None and not task.done():
                task.cancel()

    def arm(self, due: float) -> None:
        """Make the loop's timer fire by ``due`` (loop time), if it is set for later."""
        if due < self.at:
            if self.timer is not None:
                self.timer.cancel()
            self.at = due
            self.timer = self.loop.call_at(due, self._tick)

    def _tick(self) -> None:
        self.timer, self.at = None, _INF
        now = self.loop.time()
        for ident, entry in list(self.beats.items()):
            if not isinstance(entry, AsyncBeat):
                due, lease, renew, what, started, store, ttl = entry
                if due > now:
                    self.arm(due)
                    continue
                beat = AsyncBeat(self, lease, renew, what, started, store, ttl)
                beat.ident = ident
                self.beats[ident] = beat
            else:
                beat = entry
            if beat.task is not None or beat.cancelled:
                continue  # renewing (it re-arms when done), or stopped
            if beat.due > now:
                self.arm(beat.due)
                continue
            try:
                beat.task = self.loop.create_task(self._renew(beat))
            except Exception as exc:
                # Counted as a failed renewal: settle schedules the next try (never sooner than
                # the retry floor), so a loop that keeps refusing tasks is not spun.
                beat.settle(now, now, exc)
                self.arm(beat.due)

    async def _renew(self, beat: AsyncBeat) -> None:
        sent = self.loop.time()
        error: Exception | None = None
        try:
            # A renewal still unanswered when the lease it protects ends is abandoned and
            # tried again (a fresh connection may answer where a half-dead one never will).
            limit = max(beat.deadline - sent, beat.period)
            store = beat.store
            renewal = (
                beat.renew() if store is None else store.aheartbeat(beat.what, beat.lease, beat.ttl)
            )
            await asyncio.wait_for(renewal, limit)
        except Exception as exc:
            error = exc
        finally:
            beat.task = None
        if beat.cancelled:
            return
        if beat.settle(sent, self.loop.time(), error):
            self.arm(beat.due)
        else:
            self.beats.pop(beat.ident, None)


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBeats] = (
    weakref.WeakKeyDictionary()
)


def start_async(
    lease: float, renew: Callable[[], Awaitable[object]], what: object = None
) -> Callable[[], None]:
    """Begin renewing every ``lease / 3`` on the running loop; returns the stop function."""
    return _loop_beats().start(lease, renew, what)


def renew_store(lease: float, store: Any, ticket: object, ttl: float | None) -> Callable[[], None]:
    """``start_async(lease, lambda: store.aheartbeat(ticket, lease, ttl), ticket)``, with the
    beat holding the store and the arguments instead of a closure made per guarded call."""
    return _loop_beats().start(lease, _by_store, ticket, store, ttl)


def _by_store() -> Awaitable[object]:  # a store's beat's ``renew``: _renew calls the store
    raise AssertionError("a store's beat renews through its store")


def hold_async(
    lease: float,
    renew: Callable[[], Awaitable[object]],
    what: object = None,
    since: float | None = None,
) -> AsyncBeat:
    """Begin renewing a lease the store granted no earlier than ``since`` (the loop's time when
    the claim was sent; now when not given); the beat says whether it still holds."""
    beats = _loop_beats()
    return beats.hold(lease, renew, what, beats.loop.time() if since is None else since)


# The beats of the loop that asked last: every guarded call asks, nearly always from the same
# loop, and WeakKeyDictionary.get is a Python-level call.
# Read once per call: loops in other threads may replace it in between.
_LAST: list[_LoopBeats | None] = [None]


def _loop_beats() -> _LoopBeats:
    loop = running_loop()
    last = _LAST[0]
    if last is not None and last.loop is loop:
        return last
    beats = _LOOPS.get(loop)
    if beats is None:
        beats = _LOOPS[loop] = _LoopBeats(loop)
    _LAST[0] = beats
    return beats
