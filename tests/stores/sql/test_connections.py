"""The SQL store's connection cache: bounded like the pool, and waiters are woken."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

from mideng.stores.sql.connections import AsyncConnectionCache, ConnectionCache, Exhausted


class Source:
    """Stands in for SQLAlchemy's pool: counts what was checked out and closed."""

    def __init__(self) -> None:
        self.made = itertools.count(1)
        self.opened = 0
        self.closed: list[int] = []

    def checkout(self) -> int:
        self.opened += 1
        return next(self.made)

    async def acheckout(self) -> int:
        await asyncio.sleep(0)
        return self.checkout()


def test_threads_share_at_most_capacity_connections() -> None:
    kept, source = ConnectionCache(capacity=3, keep=2, timeout=30), Source()
    busy: set[int] = set()
    peak = [0]
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def work() -> None:
        barrier.wait()
        for _ in range(200):
            conn = kept.take(source.checkout)
            with lock:
                assert conn not in busy  # never handed to two callers at once
                busy.add(conn)
                peak[0] = max(peak[0], len(busy))
            with lock:
                busy.discard(conn)
            kept.give(conn, source.closed.append)

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert peak[0] <= 3
    assert source.opened <= 3
    assert kept.owned == len(kept.free) <= 2  # the overflow one went back to the pool
    assert source.opened - len(source.closed) == kept.owned


def test_all_busy_for_longer_than_the_timeout_is_exhausted() -> None:
    kept, source = ConnectionCache(capacity=1, keep=1, timeout=0.05), Source()
    held = kept.take(source.checkout)
    with pytest.raises(Exhausted, match="all 1 connections busy"):
        kept.take(source.checkout)
    kept.give(held, source.closed.append)
    assert kept.take(source.checkout) == held


def test_a_dropped_connection_makes_room_for_a_waiter() -> None:
    kept, source = ConnectionCache(capacity=1, keep=1, timeout=30), Source()
    first = kept.take(source.checkout)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(kept.take(source.checkout)))
    waiter.start()
    while not kept.waiters:  # parked on the condition
        threading.Event().wait(0.001)
    kept.drop()  # first was invalidated
    waiter.join(30)
    assert got == [2]
    assert first == 1


def test_a_failed_checkout_gives_its_room_back() -> None:
    kept = ConnectionCache(capacity=1, keep=1, timeout=0.05)

    def refused() -> int:
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError):
        kept.take(refused)
    assert kept.owned == 0
    assert kept.take(Source().checkout) == 1


def test_async_tasks_share_at_most_capacity_connections() -> None:
    async def main() -> tuple[int, int]:
        kept, source = AsyncConnectionCache(capacity=2, keep=1, timeout=30), Source()
        busy: set[int] = set()
        peak = 0

        async def work() -> None:
            nonlocal peak
            for _ in range(50):
                conn = await kept.take(source.acheckout)
                assert conn not in busy
                busy.add(conn)
                peak = max(peak, len(busy))
                await asyncio.sleep(0)
                busy.discard(conn)
                extra = kept.give(conn)
                if extra is not None:
                    source.closed.append(extra)

        await asyncio.gather(*(work() for _ in range(20)))
        assert kept.owned == len(kept.free) == 1
        return peak, source.opened - len(source.closed)

    peak, still_open = asyncio.run(main())
    assert peak == 2
    assert still_open == 1


def test_async_exhausted_after_the_timeout() -> None:
    async def main() -> None:
        kept, source = AsyncConnectionCache(capacity=1, keep=1, timeout=0.05), Source()
        await kept.take(source.acheckout)
        with pytest.raises(Exhausted):
            await kept.take(source.acheckout)

    asyncio.run(main())
