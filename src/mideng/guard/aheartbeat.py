"""Lease renewal while an async body runs: one loop timer per event loop, a task per renewal.

The schedule is ``mideng.guard.lease``'s, as on the sync side; a renewal still unanswered when
the lease it protects has run out is abandoned and tried again.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from mideng.core.loops import running_loop
from mideng.guard.lease import Lease

_INF = float("inf")
_new = object.__new__


class AsyncBeat(Lease):
    """A lease renewed on an event loop; made by ``_LoopBeats.start``, which sets Lease's own
    fields, ``beats`` (the loop's beats), ``task`` (a renewal in flight, None), and ``store``
    and ``ttl`` (``renew_store``'s: a renewal is ``store.aheartbeat(what, lease, ttl)``; store
    None: it is ``renew()``)."""

    __slots__ = ("beats", "store", "task", "ttl")
    beats: _LoopBeats
    task: asyncio.Task[None] | None
    store: Any
    ttl: float | None

    def stop(self) -> None:
        self.cancelled = True
        self.beats.beats.pop(self.ident, None)
        task = self.task
        if task is not None and not task.done():
            task.cancel()


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
        self.at = _INF

    def start(
        self,
        lease: float,
        renew: Callable[[], Awaitable[object]],
        what: object,
        since: float | None = None,
        store: Any = None,
        ttl: float | None = None,
    ) -> AsyncBeat:
        now = self.loop.time() if since is None else since
        # AsyncBeat(lease, renew, what, now), its fields set here: every guarded call makes
        # one, and a class call with Lease.__init__ is two frames (tests compare the two).
        beat = _new(AsyncBeat)
        beat.lease, beat.renew, beat.what = lease, renew, what
        beat.period = period = lease / 3
        beat.deadline, beat.due = now + lease, now + period
        beat.failures, beat.lapsed, beat.cancelled = 0, False, False
        beat.beats, beat.task, beat.store, beat.ttl = self, None, store, ttl
        beat.ident = ident = next(self.ids)
        self.beats[ident] = beat
        if beat.due < self.at:  # else the loop's timer is due first, and finds this one then
            self.arm(beat.due)
        return beat

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
        for beat in list(self.beats.values()):
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
    return _loop_beats().start(lease, renew, what).stop


def renew_store(lease: float, store: Any, ticket: object, ttl: float | None) -> Callable[[], None]:
    """``start_async(lease, lambda: store.aheartbeat(ticket, lease, ttl), ticket)``: the beat
    holds the store and the arguments instead of a closure made per guarded call, and looks
    ``aheartbeat`` up as the closure did, when it renews."""
    loop = running_loop()  # asyncio.get_running_loop() without its getpid() system call
    beats = _LAST[0]  # _loop_beats()'s usual case inline
    if beats is None or beats.loop is not loop:
        beats = _loop_beats()
    # beats.start(lease, _by_store, ticket, None, store, ttl), spelt here: every async first
    # call makes its beat here, and the call passes six arguments (tests compare the two).
    now = loop.time()
    beat = _new(AsyncBeat)
    beat.lease, beat.renew, beat.what = lease, _by_store, ticket
    beat.period = period = lease / 3
    beat.deadline, beat.due = now + lease, now + period
    beat.failures, beat.lapsed, beat.cancelled = 0, False, False
    beat.beats, beat.task, beat.store, beat.ttl = beats, None, store, ttl
    beat.ident = ident = next(beats.ids)
    beats.beats[ident] = beat
    if beat.due < beats.at:  # else the loop's timer is due first, and finds this one then
        beats.arm(beat.due)
    return beat.stop


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
    return _loop_beats().start(lease, renew, what, since)


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
