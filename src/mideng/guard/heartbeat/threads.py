"""Lease renewal while a sync body runs: a timer thread and renewal workers per Guard.

The async side is ``mideng.guard.heartbeat.tasks``; both follow one schedule
(``mideng.guard.heartbeat.schedule``), and the package's docstring says what a failed renewal
means to each.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from mideng.guard.heartbeat.schedule import STATS, Lease
from mideng.observability import logs

# How long an idle timer thread or worker waits before it looks again (and, still idle, exits).
_IDLE = 5.0
# Renewals in flight at once; each hung store call holds one worker until its driver's
# timeout. Beats beyond it wait for a free worker, so the bound is generous.
_MAX_WORKERS = 64
_INF = float("inf")


class Beat(Lease):
    # ``lock`` is held while a renewal runs: stopping a beat waits for an in-flight renewal, so
    # once the body's claim is completed or released no heartbeat of it is still talking to
    # the store (and a store closed right after is never used by this thread).
    __slots__ = ("busy", "lock")

    def __init__(self, lease: float, renew: Callable[[], Any], what: object, now: float) -> None:
        super().__init__(lease, renew, what, now)
        self.lock = threading.Lock()
        self.busy = False  # queued for or held by a worker


class Heartbeats:
    """Live beats in a dict (O(1) to add and drop), a timer thread and renewal workers.

    The timer sleeps until the earliest due beat (a new beat wakes it only when due sooner,
    which one with the usual period never is) and hands due beats to workers; it never calls
    the store itself, so no renewal can make another beat late.
    """

    def __init__(self) -> None:
        self.reset_after_fork()
        _ALL.add(self)

    def reset_after_fork(self) -> None:
        # A forked child has none of its parent's threads: it starts its own on demand.
        # A beat not yet due is a tuple (see ``start``), made a Beat by the timer.
        self._beats: dict[int, Beat | tuple[float, float, Callable[[], object], object, float]] = {}
        self._ids = itertools.count()
        lock = threading.Lock()
        # The conditions' own lock, taken directly on the per-call paths (start, stop): a
        # Condition's ``with`` runs two Python-level calls around it.
        self._lock = lock
        self._cond = threading.Condition(lock)  # the timer waits here
        self._work = threading.Condition(lock)  # idle workers wait here
        self._queue: deque[Beat] = deque()
        self._thread: threading.Thread | None = None
        self._workers: set[threading.Thread] = set()
        self._idle = 0
        self._restarts = 0
        self._wake_at = _INF
        self._stopping = False

    def start(
        self, lease: float, renew: Callable[[], object], what: object = None
    ) -> Callable[[], None]:
        """Begin renewing every ``lease / 3``; returns the function that stops it.

        Most bodies end long before their first renewal: until then the table holds a plain
        tuple (due, lease, renew, what, started), and the timer makes it a ``Beat`` (with its
        lock) only when it falls due."""
        now = time.monotonic()
        due = now + lease / 3
        ident = next(self._ids)
        with self._lock:
            self._beats[ident] = (due, lease, renew, what, now)
            if self._thread is None:
                if not self._stopping:
                    self._spawn_timer()
            elif due < self._wake_at:
                self._cond.notify()
        return functools.partial(self._stop, ident)

    def _stop(self, ident: int) -> None:
        with self._lock:
            entry = self._beats.pop(ident, None)
        if type(entry) is Beat:
            # Made when it fell due: wait for a renewal in flight, and let none start after.
            with entry.lock:
                entry.cancelled = True

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the threads and wait for them (at interpreter exit: a daemon thread caught
        inside a driver's C code while the interpreter tears down can crash the process)."""
        with self._cond:
            self._stopping = True
            threads = [t for t in (self._thread, *self._workers) if t is not None]
            self._cond.notify_all()
            self._work.notify_all()
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    # -- the timer ------------------------------------------------------------------------------
    def _spawn_timer(self) -> None:  # the lock is held
        self._thread = threading.Thread(target=self._serve, name="mideng-heartbeat", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            if self._restarts:  # a timer that keeps dying must not spin a core
                time.sleep(min(1.0, 0.01 * 2 ** min(self._restarts, 7)))
            self._loop()
        except BaseException as exc:
            logs.heartbeat_thread_died(exc)
            STATS.add("restarts")
            with self._cond:
                self._thread = None
                self._restarts += 1
                if self._beats and not self._stopping:
                    self._spawn_timer()

    def _loop(self) -> None:
        with self._cond:
            while True:
                if self._stopping:
                    self._thread = None
                    return
                if not self._beats:
                    # The thread wakes then anyway: a beat due later (any lease over 15 s)
                    # must not wake it now. Waking a thread costs a context switch, and a
                    # caller making one call at a time empties the table on every call.
                    self._wake_at = time.monotonic() + _IDLE
                    self._cond.wait(_IDLE)
                    if not self._beats:
                        self._thread = None
                        return
                    continue
                now = time.monotonic()
                soonest = _INF
                for ident, entry in list(self._beats.items()):
                    if isinstance(entry, tuple):
                        if entry[0] > now:
                            soonest = min(soonest, entry[0])
                            continue
                        beat = Beat(entry[1], entry[2], entry[3], entry[4])
                        beat.ident = ident
                        self._beats[ident] = beat
                    else:
                        beat = entry
                    if beat.busy:
                        continue
                    if beat.due <= now:
                        beat.busy = True
                        self._queue.append(beat)
                    elif beat.due < soonest:
                        soonest = beat.due
                if self._queue:
                    self._dispatch()
                self._restarts = 0
                self._wake_at = soonest
                # Never an infinite timeout (every beat may be busy): a bounded wait always.
                self._cond.wait(min(soonest - now, _IDLE))

    def _dispatch(self) -> None:  # the lock is held
        missing = len(self._queue) - self._idle
        while missing > 0 and len(self._workers) < _MAX_WORKERS:
            worker = threading.Thread(target=self._work_loop, name="mideng-renew", daemon=True)
            self._workers.add(worker)
            worker.start()
            missing -= 1
        self._work.notify(len(self._queue))

    # -- the workers ----------------------------------------------------------------------------
    def _work_loop(self) -> None:
        try:
            while (beat := self._next()) is not None:
                try:
                    _renew(beat)
                finally:
                    self._done(beat)
        finally:
            with self._cond:
                self._workers.discard(threading.current_thread())

    def _next(self) -> Beat | None:
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._idle += 1
                woken = self._work.wait(_IDLE)
                self._idle -= 1
                if not woken and not self._queue:
                    return None
            return self._queue.popleft()

    def _done(self, beat: Beat) -> None:
        with self._cond:
            beat.busy = False
            if beat.cancelled:
                self._beats.pop(beat.ident, None)
            elif beat.due < self._wake_at:
                self._cond.notify()


def _renew(beat: Beat) -> None:
    with beat.lock:
        if beat.cancelled:
            return
        sent = time.monotonic()
        error: Exception | None = None
        try:
            beat.renew()
        except Exception as exc:
            error = exc
        beat.settle(sent, time.monotonic(), error)


_ALL: weakref.WeakSet[Heartbeats] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for heartbeats in list(_ALL):
        heartbeats.reset_after_fork()


def _shutdown_all() -> None:
    for heartbeats in list(_ALL):
        heartbeats.shutdown()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_shutdown_all)
