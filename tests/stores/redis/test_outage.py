"""Redis dies mid-run: the Redis store fails closed, the hybrid store keeps deduplicating."""

from __future__ import annotations

import logging
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mideng import Guard
from mideng.errors import InProgressError, StoreUnavailableError
from mideng.stores.hybrid import HybridStore
from mideng.stores.redis import RedisStore
from mideng.stores.sqlite import SQLiteStore
from tests.redis_cluster import Server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[Server]:
    """A Redis of this test's own (no persistence), to kill and bring back."""
    own = Server().start()
    yield own
    own.cleanup()


class Runs:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self._lock = threading.Lock()

    def body(self, key: str) -> str:
        with self._lock:
            self.keys.append(key)
        return f"done {key}"


def redis_store(server: Server) -> RedisStore:
    return RedisStore.from_url(
        server.url,
        prefix=f"outage-{uuid.uuid4().hex[:8]}",
        socket_timeout=0.5,
        socket_connect_timeout=0.5,
    )


def hybrid_store(server: Server, tmp_path: Path) -> HybridStore:
    # cooldown=0: every call tries Redis again, so the test sees each answer Redis gives.
    return HybridStore(
        fast=redis_store(server), durable=SQLiteStore(str(tmp_path / "durable.db")), cooldown=0.0
    )


def test_redis_store_fails_closed_while_down_and_recovers(server: Server) -> None:
    store = redis_store(server)
    guard = Guard(store)
    runs = Runs()
    assert guard.run("pay", "a", runs.body, "a") == "done a"

    server.kill()
    for key in ("a", "b"):
        with pytest.raises(StoreUnavailableError) as info:
            guard.run("pay", key, runs.body, key)
        assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)
    assert runs.keys == ["a"]

    server.start()
    assert guard.run("pay", "b", runs.body, "b") == "done b"
    assert guard.run("pay", "b", runs.body, "b") == "done b"
    # Redis came back empty (no persistence): it forgot "a", which now runs again. This is
    # why Redis alone is not for money paths, and what the hybrid store is for.
    assert guard.run("pay", "a", runs.body, "a") == "done a"
    assert runs.keys == ["a", "b", "a"]
    store.close()


def test_redis_killed_while_a_body_runs(server: Server) -> None:
    store = redis_store(server)
    guard = Guard(store)
    ran: list[str] = []

    def body() -> str:
        ran.append("charge")
        server.kill()
        return "charged"

    # The body ran but its result could not be stored: the caller is told, not lied to.
    with pytest.raises(StoreUnavailableError):
        guard.run("pay", "mid", body)
    with pytest.raises(StoreUnavailableError):
        guard.run("pay", "mid", body)
    assert ran == ["charge"]
    store.close()


def test_a_hung_redis_times_out_as_unavailable(server: Server) -> None:
    store = redis_store(server)
    guard = Guard(store)
    assert guard.run("pay", "h", lambda: 1) == 1
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(StoreUnavailableError) as info:
            guard.run("pay", "h2", lambda: 2)
        assert isinstance(info.value.__cause__, redis.exceptions.TimeoutError)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    store.close()


@pytest.mark.anyio
async def test_async_redis_store_fails_closed(server: Server) -> None:
    store = redis_store(server)
    guard = Guard(store)
    ran: list[int] = []

    async def body() -> int:
        ran.append(1)
        return len(ran)

    assert await guard.arun("pay", "x", body) == 1
    server.kill()
    with pytest.raises(StoreUnavailableError):
        await guard.arun("pay", "y", body)
    server.start()
    assert await guard.arun("pay", "y", body) == 2
    assert ran == [1, 1]
    await store.aclose()


def test_hybrid_keeps_deduplicating_while_redis_is_down(
    server: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = hybrid_store(server, tmp_path)
    guard = Guard(store, lease=30)
    runs = Runs()
    assert guard.run("pay", "before", runs.body, "before") == "done before"
    assert store.fast.get("pay", "before") is not None  # the copy Redis answers from

    server.kill()
    with caplog.at_level(logging.WARNING, logger="mideng"):
        # Finished before the outage: replayed from the durable store.
        assert guard.run("pay", "before", runs.body, "before") == "done before"
        # A new key runs exactly once.
        assert guard.run("pay", "new", runs.body, "new") == "done new"
        assert guard.run("pay", "new", runs.body, "new") == "done new"
        # A concurrent duplicate during the outage does not run.
        started, finish = threading.Event(), threading.Event()
        out: list[str] = []

        def held() -> str:
            started.set()
            assert finish.wait(30)
            return runs.body("held")

        holder = threading.Thread(target=lambda: out.append(guard.run("pay", "held", held)))
        holder.start()
        assert started.wait(30)
        with pytest.raises(InProgressError):
            guard.run("pay", "held", runs.body, "held")
        finish.set()
        holder.join(30)
        assert out == ["done held"]
        assert guard.run("pay", "held", runs.body, "held") == "done held"
    assert runs.keys == ["before", "new", "held"]
    warnings = [
        r
        for r in caplog.records
        if "redis unavailable, answering from durable store" in r.getMessage()
    ]
    assert len(warnings) == 1  # many failures, one warning per warn_every

    server.start()
    assert store.fast.get("pay", "new") is None  # Redis came back empty
    assert guard.run("pay", "new", runs.body, "new") == "done new"
    assert store.fast.get("pay", "new") is not None  # the durable replay put the copy back
    assert runs.keys == ["before", "new", "held"]
    store.close()


def test_hybrid_survives_a_flush(server: Server, tmp_path: Path) -> None:
    store = hybrid_store(server, tmp_path)
    guard = Guard(store)
    runs = Runs()
    for key in ("k1", "k2"):
        guard.run("pay", key, runs.body, key)
    redis.Redis(port=server.port).flushall()
    for key in ("k1", "k2"):
        assert guard.run("pay", key, runs.body, key) == f"done {key}"
    assert runs.keys == ["k1", "k2"]
    store.close()


def test_hybrid_tokens_and_hits_fall_back_to_the_durable_store(
    server: Server, tmp_path: Path
) -> None:
    store = hybrid_store(server, tmp_path)
    server.kill()
    store.put_token("submit", "u1", "tok", 60)
    assert store.take_token("submit", "u1", "tok") is True
    assert store.take_token("submit", "u1", "tok") is False
    assert store.hit("create", "u1", 30, 1) is None
    assert store.hit("create", "u1", 30, 1) is not None
    assert store.durable.get("token:submit", "u1") is None  # it was the durable store's token
    store.close()


@pytest.mark.anyio
async def test_async_hybrid_while_redis_is_down(server: Server, tmp_path: Path) -> None:
    store = hybrid_store(server, tmp_path)
    guard = Guard(store)
    ran: list[str] = []

    async def body() -> str:
        ran.append("x")
        return "paid"

    assert await guard.arun("pay", "a1", body) == "paid"
    server.kill()
    assert await guard.arun("pay", "a1", body) == "paid"
    assert await guard.arun("pay", "a2", body) == "paid"
    assert await guard.arun("pay", "a2", body) == "paid"
    await store.aput_token("submit", "u", "t", 60)
    assert await store.atake_token("submit", "u", "t") is True
    assert await store.ahit("create", "u", 30, 1) is None
    assert ran == ["x", "x"]
    server.start()
    assert await guard.arun("pay", "a2", body) == "paid"
    assert await store.fast.aget("pay", "a2") is not None
    assert ran == ["x", "x"]
    await store.aclose()
