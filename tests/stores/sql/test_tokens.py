"""SQLStore's entry-layer primitives (anti-resubmit tokens, debounce windows) and its async
side, on PostgreSQL and MariaDB."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from mideng.core.record import Outcome, Resolution, Status, Ticket
from tests.stores.sql.test_store import _store, family, req, table

__all__ = ["family", "table"]  # fixtures, used by name


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- tokens and debounce ------------------------------------------------------------------
def test_one_token_one_winner_among_100_threads(family: str, table: str) -> None:
    store = _store(family, table, pool_size=20, max_overflow=0, pool_timeout=30)
    try:
        store.put_token("submit", "user-1", "tok-abc", 60)
        barrier = threading.Barrier(100)
        wins: list[bool] = []
        lock = threading.Lock()

        def take() -> None:
            barrier.wait()
            won = store.take_token("submit", "user-1", "tok-abc")
            with lock:
                wins.append(won)

        threads = [threading.Thread(target=take) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(wins) == [False] * 99 + [True]
    finally:
        store.close()


def test_tokens_bind_a_value_and_expire(family: str, table: str) -> None:
    store = _store(family, table)
    try:
        store.put_token("submit", "user-1", "old", 60)
        store.put_token("submit", "user-1", "new", 60)  # replaces
        assert not store.take_token("submit", "user-1", "old")
        assert not store.take_token("submit", "user-2", "new")
        assert store.take_token("submit", "user-1", "new")
        store.put_token("submit", "user-1", "short", 0.1)
        time.sleep(0.2)
        assert not store.take_token("submit", "user-1", "short")
    finally:
        store.close()


def test_hit_is_a_sliding_window(family: str, table: str) -> None:
    store = _store(family, table)
    try:
        assert store.hit("create", "user-1", 0.5, 2) is None
        assert store.hit("create", "user-1", 0.5, 2) is None
        wait = store.hit("create", "user-1", 0.5, 2)
        assert wait is not None
        assert 0 < wait <= 0.5
        assert store.hit("create", "user-2", 0.5, 2) is None  # per key
        time.sleep(wait + 0.05)
        assert store.hit("create", "user-1", 0.5, 2) is None
    finally:
        store.close()


def test_hits_from_many_threads_never_exceed_the_limit(family: str, table: str) -> None:
    store = _store(family, table, pool_size=10, max_overflow=0, pool_timeout=30)
    try:
        barrier = threading.Barrier(20)
        allowed: list[bool] = []
        lock = threading.Lock()

        def hit() -> None:
            barrier.wait()
            ok = store.hit("create", "user-1", 30, 3) is None
            with lock:
                allowed.append(ok)

        threads = [threading.Thread(target=hit) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert allowed.count(True) == 3
    finally:
        store.close()


# -- async --------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_async_side_does_everything_natively(family: str, table: str) -> None:
    store = _store(family, table)
    try:
        claim = await store.aclaim(req("a", lease=0.2))
        assert claim.acquired
        assert (await store.aclaim(req("a"))).outcome is Outcome.IN_PROGRESS
        beat = await store.aheartbeat(Ticket.of(claim.record), 0.2, 60)
        assert beat == await store.aget("pay", "a")
        done = await store.acomplete(Ticket.of(claim.record), b'"ok"', "json", 60)
        assert done.status is Status.SUCCEEDED
        assert done == await store.aget("pay", "a")
        assert (await store.aclaim(req("a"))).outcome is Outcome.REPLAY
        await store.aput_token("submit", "u", "t", 60)
        assert await store.atake_token("submit", "u", "t")
        assert not await store.atake_token("submit", "u", "t")
        assert await store.ahit("create", "u", 5, 1) is None
        assert await store.ahit("create", "u", 5, 1) is not None
        assert await store.aforget("pay", "a")
        stuck = await store.aclaim(req("stuck", lease=0.05))
        await anyio.sleep(0.1)  # the lease runs out
        assert [r.key for r in await store.aunresolved()] == ["stuck"]
        settled = await store.aresolve("pay", "stuck", Resolution(b"1", "json", False, 0.05))
        assert settled.fence == stuck.record.fence
        assert settled.status is Status.SUCCEEDED
        await anyio.sleep(0.1)  # its retention runs out
        assert await store.apurge() >= 1
    finally:
        await store.aclose()
