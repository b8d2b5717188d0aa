"""The Redis store's own connection path: reuse without probes, and never a stale reply."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.connection

from mideng import Guard
from mideng.core.record import ClaimRequest, Outcome
from mideng.errors import StoreUnavailableError
from mideng.stores.redis import RedisStore
from mideng.stores.redis.direct import AsyncDirectSender, DirectSender, pack
from tests.redis_cluster import Server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    own = Server().start()
    yield own
    own.cleanup()


def store_for(server: Server, **options: Any) -> RedisStore:
    store = RedisStore.from_url(server.url, prefix=f"direct-{uuid.uuid4().hex[:8]}", **options)
    assert isinstance(store, RedisStore)
    return store


def claim(key: str) -> ClaimRequest:
    return ClaimRequest("pay", key, uuid.uuid4().hex, 30.0, 60.0)


def sender_of(store: RedisStore) -> DirectSender:
    store.get("pay", "connect")
    assert store._sync is not None
    assert isinstance(store._sync.direct, DirectSender)
    return store._sync.direct


def kill_clients(server: Server) -> None:
    """Close every normal client connection on the server but this one."""
    with redis.Redis(port=server.port) as admin:
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")


class Probes:
    """Counts redis-py's connection probes (can_read) on sync connections."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        original = redis.connection.AbstractConnection.can_read

        def can_read(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return original(conn, *args, **kwargs)

        monkeypatch.setattr(redis.connection.AbstractConnection, "can_read", can_read)


def test_a_reused_connection_is_not_probed(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_for(server)
    sender = sender_of(store)
    probes = Probes(monkeypatch)
    for i in range(50):
        assert store.claim(claim(f"k{i}")).outcome is Outcome.ACQUIRED
    assert probes.n == 0
    assert len(sender.free) == 1  # one thread, one connection, used 50 times
    store.close()


def test_an_idle_connection_is_probed_and_a_closed_one_replaced(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_for(server)
    sender = sender_of(store)
    sender.idle_probe = 0.0  # every connection counts as idle
    kill_clients(server)
    probes = Probes(monkeypatch)
    assert store.claim(claim("after-kill")).outcome is Outcome.ACQUIRED
    assert probes.n >= 1
    store.close()


def test_a_connection_closed_between_calls_fails_closed_once(server: Server) -> None:
    # The window no probe closes: the server drops a connection just after its last use.
    store = store_for(server)
    guard = Guard(store)
    sender_of(store).idle_probe = 3600.0
    ran: list[str] = []
    kill_clients(server)
    with pytest.raises(StoreUnavailableError):
        guard.run("pay", "w", lambda: ran.append("w"))
    assert ran == []
    guard.run("pay", "w", lambda: ran.append("w"))
    assert ran == ["w"]
    store.close()


def test_a_late_reply_never_answers_the_next_call(server: Server) -> None:
    store = store_for(server, socket_timeout=0.3)
    sender_of(store)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(StoreUnavailableError) as info:
            store.claim(claim("late"))
        assert isinstance(info.value.__cause__, redis.exceptions.TimeoutError)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    # The claim may still run once the server wakes; its reply must go nowhere. Had the
    # abandoned connection been reused, this read would decode the claim's reply.
    for _ in range(3):
        assert store.get("pay", "never-claimed") is None
    store.close()


def test_a_forked_child_never_writes_to_its_parents_socket(server: Server) -> None:
    store = store_for(server)
    sender = sender_of(store)
    assert len(sender.free) == 1
    pid = os.fork()
    if pid == 0:  # the child: its own connection, its own replies
        code = 1
        try:
            if sender.free == []:
                ok = all(
                    store.claim(req).record.owner == req.owner
                    for req in (claim(f"child-{i}") for i in range(200))
                )
                code = 0 if ok else 2
        finally:
            os._exit(code)
    mine = [claim(f"parent-{i}") for i in range(200)]
    owners = [store.claim(req).record.owner for req in mine]
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert owners == [req.owner for req in mine]
    store.close()


def test_driver_retries_keep_redis_pys_own_path(server: Server) -> None:
    store = store_for(server, retries=2)
    store.get("pay", "x")
    assert store._sync is not None
    assert store._sync.direct is None
    store.close()


# -- asyncio ----------------------------------------------------------------------------------
async def async_sender_of(store: RedisStore) -> AsyncDirectSender:
    await store.aget("pay", "connect")
    conn = store._async[asyncio.get_running_loop()]
    assert isinstance(conn.direct, AsyncDirectSender)
    return conn.direct


@pytest.mark.anyio
async def test_async_reuse_and_a_closed_connection_replaced(server: Server) -> None:
    store = store_for(server)
    sender = await async_sender_of(store)
    for i in range(20):
        assert (await store.aclaim(claim(f"a{i}"))).outcome is Outcome.ACQUIRED
    assert len(sender.free) == 1
    kill_clients(server)
    # Wait until the event loop has read the close; then the sender must notice it.
    deadline = time.monotonic() + 5
    conn = sender.free[0]
    probe = getattr(conn, "can_read", None) or conn.can_read_destructive  # redis-py < 8

    async def closed_seen() -> bool:
        try:
            return bool(await probe())
        except Exception:  # redis-py 8.2 raises ConnectionError for a stream at its end
            return True

    while not await closed_seen():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    assert (await store.aclaim(claim("after-kill"))).outcome is Outcome.ACQUIRED
    await store.aclose()


@pytest.mark.anyio
async def test_async_cancelled_read_never_answers_the_next_call(server: Server) -> None:
    store = store_for(server)
    await async_sender_of(store)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(store.aclaim(claim("cancelled")), 0.2)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    for _ in range(3):
        assert await store.aget("pay", "never-claimed") is None
    await store.aclose()


def _redis_pys(*args: Any) -> bytes:
    connection: Any = redis.connection.Connection  # untyped in redis-py
    return b"".join(connection().pack_command(*args))


class _Text(str):
    pass


class _Blob(bytes):
    pass


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 6000, 6001, 70000])
def test_pack_sends_what_redis_py_packs(size: int) -> None:
    # The same bytes redis-py's own packer makes, for every kind and length of argument the
    # store sends (a large one as its own buffer), whatever the buffers' boundaries.
    args = (
        "FCALL",
        "x" * size,
        b"\x00" * size,
        "é" * size,
        _Text("sub"),
        _Blob(b"sub"),
        size,
        -7,
        "",
    )
    mine = b"".join(pack(args))
    assert mine == _redis_pys(*args)
    assert b"".join(pack(("FUNCTION LOAD", "x"))) == _redis_pys("FUNCTION", "LOAD", "x")


def test_pack_refuses_what_it_cannot_send() -> None:
    with pytest.raises(TypeError):
        pack(("SET", "k", 1.5))


@pytest.mark.anyio
async def test_async_commands_are_written_without_redis_pys_send(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py's send makes a Task, a future and a timer per command (asyncio.wait_for); an
    # open connection's command is written to its stream here instead.
    sends: list[int] = []
    real = redis.asyncio.connection.AbstractConnection.send_packed_command

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        sends.append(1)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.connection.AbstractConnection, "send_packed_command", counted)
    store = store_for(server)
    await async_sender_of(store)
    before = len(sends)
    for i in range(20):
        assert (await store.aclaim(claim(f"w{i}"))).outcome is Outcome.ACQUIRED
    assert len(sends) == before
    # A closed stream takes redis-py's own path, which connects again (and sends its
    # connection's set-up commands).
    sender = await async_sender_of(store)
    sender.free[0]._writer.transport.close()
    await asyncio.sleep(0)
    assert (await store.aclaim(claim("reopened"))).outcome is Outcome.ACQUIRED
    assert len(sends) > before
    await store.aclose()


@pytest.mark.anyio
async def test_async_a_write_left_in_the_buffer_is_waited_for_with_the_timeout(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A command the socket did not take at once (the server stopped reading, say) is waited
    # for no longer than socket_timeout: the call fails closed and the connection is dropped.
    store = store_for(server, socket_timeout=0.2)
    sender = await async_sender_of(store)
    conn = sender.free[0]
    transport = conn._writer.transport

    async def stuck() -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(transport, "get_write_buffer_size", lambda: 1)
    monkeypatch.setattr(conn._writer, "drain", stuck)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        await store.aclaim(claim("stuck"))
    assert time.monotonic() - started < 5
    assert conn not in sender.free  # disconnected, handed back to the pool to reconnect
    monkeypatch.undo()
    assert (await store.aclaim(claim("after"))).outcome is Outcome.ACQUIRED
    await store.aclose()
