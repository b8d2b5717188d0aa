"""The SQL store's connection cache: each connection with its cursor, kept checked out of
SQLAlchemy's pool between operations (one cache for the store's threads, one per event loop).

Checking a connection out of SQLAlchemy's pool and back in costs more Python than a short
statement's own client side (and, on the async side, two greenlet switches). So the store keeps
the connections it used: an operation pops one from a list and pushes it back. They stay
checked out of the pool, so the pool's limits still hold: the store never has more than
``pool_size + max_overflow`` (``capacity``), keeps at most ``pool_size`` idle (``keep``; the
rest go back to the pool, which closes overflow ones), and a caller that finds all of them busy
waits here, up to ``pool_timeout``, for one to come back. Waiting here and not in the pool
matters: connections come back to this list, never to the pool, so a caller waiting in the
pool would wait for nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any


class Exhausted(Exception):
    """Every connection the store may hold is busy, for longer than ``pool_timeout``."""


class _Limits:
    def __init__(self, capacity: int, keep: int, timeout: float) -> None:
        self.capacity = capacity
        self.keep = keep
        self.timeout = timeout
        self.free: list[Any] = []
        self.owned = 0  # checked out of the pool by this store: in use or in ``free``

    def exhausted(self) -> Exhausted:
        return Exhausted(
            f"all {self.capacity} connections busy for {self.timeout:g} s "
            "(pool_size + max_overflow; size them for your concurrency)"
        )


class ConnectionCache(_Limits):
    """The sync store's connections (shared by its threads)."""

    def __init__(self, capacity: int, keep: int, timeout: float) -> None:
        super().__init__(capacity, keep, timeout)
        self.waiters = 0
        self._cond = threading.Condition(threading.Lock())

    def take(self, checkout: Callable[[], Any]) -> Any:
        try:
            return self.free.pop()  # atomic: no lock on the common path
        except IndexError:
            pass
        with self._cond:
            deadline = time.monotonic() + self.timeout
            self.waiters += 1
            try:
                # ``waiters`` is counted before ``free`` is looked at, and give() pushes before
                # it looks at ``waiters``: one of the two always sees the other.
                while not self.free and self.owned >= self.capacity:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self.exhausted()
                    self._cond.wait(remaining)
            finally:
                self.waiters -= 1
            if self.free:
                return self.free.pop()
            self.owned += 1
        try:
            return checkout()
        except BaseException:
            self.drop()
            raise

    def give(self, conn: Any, close: Callable[[Any], None]) -> None:
        """Keep ``conn`` after a clean operation (or hand it back to the pool)."""
        self.free.append(conn)
        if self.waiters or len(self.free) > self.keep:
            self.given(close)

    def given(self, close: Callable[[Any], None]) -> None:
        """After a connection came back to ``free``: wake a waiter, or hand one back to the
        pool if more than ``keep`` are idle (``give`` calls this when either is so)."""
        if self.waiters:
            with self._cond:
                self._cond.notify()
        elif len(self.free) > self.keep:
            try:
                extra = self.free.pop()
            except IndexError:
                return
            self.drop()
            close(extra)

    def drop(self) -> None:
        """A connection was invalidated or never made: room for a new one."""
        with self._cond:
            self.owned -= 1
            self._cond.notify()

    def clear(self) -> list[Any]:
        with self._cond:
            free, self.free = self.free, []
            self.owned -= len(free)
            return free


class AsyncConnectionCache(_Limits):
    """The same for one event loop's async engine (one loop: no thread races)."""

    def __init__(self, capacity: int, keep: int, timeout: float) -> None:
        super().__init__(capacity, keep, timeout)
        self._room: asyncio.Event | None = None  # set when a connection comes back

    async def take(self, checkout: Callable[[], Awaitable[Any]]) -> Any:
        if self.free:
            return self.free.pop()
        if self.owned >= self.capacity:
            deadline = time.monotonic() + self.timeout
            while not self.free and self.owned >= self.capacity:
                room = self._room = self._room or asyncio.Event()
                room.clear()
                remaining = deadline - time.monotonic()
                try:
                    await asyncio.wait_for(room.wait(), max(remaining, 0))
                except asyncio.TimeoutError:
                    raise self.exhausted() from None
            if self.free:
                return self.free.pop()
        self.owned += 1
        try:
            return await checkout()
        except BaseException:
            self.drop()
            raise

    def give(self, conn: Any) -> Any | None:
        """Keep ``conn``; returns an extra connection for the caller to close, if any."""
        self.free.append(conn)
        if self._room is not None:
            self._room.set()
        if len(self.free) > self.keep:
            self.owned -= 1
            return self.free.pop()
        return None

    def drop(self) -> None:
        self.owned -= 1
        if self._room is not None:
            self._room.set()

    def clear(self) -> list[Any]:
        free, self.free = self.free, []
        self.owned -= len(free)
        return free


def limits(engine_options: Mapping[str, Any]) -> tuple[int, int, float]:
    """(capacity, keep, timeout) for a cache in front of an engine with these options. With
    ``pool_pre_ping`` it keeps none idle: every operation goes through the pool, which pings."""
    keep = 0 if engine_options["pool_pre_ping"] else int(engine_options["pool_size"])
    capacity = int(engine_options["pool_size"]) + int(engine_options["max_overflow"])
    return capacity, keep, float(engine_options["pool_timeout"])


def cursor_of(pooled: Any, cursor_class: type | None = None) -> Any:
    """The pooled connection's own cursor, made once: a new psycopg cursor per statement
    costs a noticeable share of a short read. ``pooled``: SQLAlchemy's pooled connection
    wrapper. ``cursor_class``: the driver's default if None."""
    conn = pooled.driver_connection
    kept = pooled.info.get("mideng.cursor")
    if kept is None or kept[0] is not conn:
        cursor = conn.cursor() if cursor_class is None else conn.cursor(cursor_class)
        kept = pooled.info["mideng.cursor"] = (conn, cursor)
    return kept[1]
