"""The async direct sender never loses a connection to a cancellation while replacing it.

A connection the server closed while it sat on the sender's list is found dirty when next
taken, and closed there; closing waits a turn of the event loop for the transport. A task
cancelled in that turn (a timeout, a sibling's failure in a task group) must still hand the
connection back to redis-py's pool: a connection lost there counts against
``max_connections`` for ever, and once they are all lost every call fails.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from mideng.stores.redis import RedisStore
from mideng.stores.redis.direct import AsyncDirectSender
from tests.redis_cluster import Server


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    own = Server().start()
    yield own
    own.cleanup()


async def _closed_seen(conn: object) -> bool:
    probe = getattr(conn, "can_read", None) or conn.can_read_destructive  # type: ignore[attr-defined]
    try:
        return bool(await probe())
    except Exception:  # redis-py 8.2 raises for a stream at its end
        return True


def test_a_cancelled_take_gives_the_connection_back(server: Server) -> None:
    prefix = f"cancel-{uuid.uuid4().hex[:8]}"
    store = RedisStore.from_url(server.url, prefix=prefix, max_connections=1)
    assert isinstance(store, RedisStore)

    async def main() -> None:
        await store.aget("pay", "connect")
        direct = store._async[asyncio.get_running_loop()].direct
        assert isinstance(direct, AsyncDirectSender)
        for _ in range(3):
            conn = direct.free[0]
            with redis.Redis(port=server.port) as admin:
                admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            deadline = time.monotonic() + 5
            while not await _closed_seen(conn):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            task = asyncio.ensure_future(store.aget("pay", "k"))
            # Run the call until it has taken the dirty connection off the list and waits
            # for it to close; cancel it there.
            for _ in range(100):  # a turn of the loop each
                if conn not in direct.free or task.done():
                    break
                await asyncio.sleep(0)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The pool's only connection is back: the next call gets it.
            assert await store.aget("pay", "k") is None
        await store.aclose()

    try:
        asyncio.run(main())
    finally:
        store.close()
