"""A relay's publish to a Redis server that stops answering (SIGSTOP) ends within the key's
lease on its own, whether or not the relay's cancellation at the lease's end reaches it.

The relay stops starting a key's publishes in the last fifth of its lease and cancels what is
still in flight when the lease ends; redis-py can swallow that cancellation (one that comes
just after it sent a command, on a connection it reused) and wait on for the answer until its
own socket timeout. That was 5 s (or the URL's), whatever the lease: a publish outlived its
key's lease, and another relay could publish the key beside it. The publisher the relay opens
now waits for the server at most a tenth of the lease."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator

import pytest

from mideng.messaging.publish import outgoing
from mideng.outbox import Relay
from mideng.outbox.publishing import LAST_SHARE
from tests.outbox.conftest import Db
from tests.redis_cluster import Server

LEASE = 4.0  # its publisher waits 0.4 s for Redis; a key starts no publish in its last 0.8 s


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    own = Server().start()
    yield own
    own.cleanup()


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
@pytest.mark.parametrize("cancelled", [True, False], ids=["cancelled", "left_alone"])
@pytest.mark.parametrize("url_timeout", ["", "?socket_timeout=30"], ids=["default", "url_30s"])
def test_a_publish_to_a_stopped_redis_ends_within_the_lease(
    server: Server, db: Db, cancelled: bool, url_timeout: str
) -> None:
    process = server.proc
    assert process is not None

    async def main() -> float:
        relay = Relay(
            db.engine, server.url + url_timeout, table=db.table, lease=LEASE, listen=False
        )
        async with relay:
            # A connection made, and reused by the next publish.
            await relay.publisher.publish(outgoing("relay-bound", b"1", key="order:1"))
            process.send_signal(signal.SIGSTOP)
            began = time.monotonic()
            publish = asyncio.create_task(
                relay.publisher.publish(outgoing("relay-bound", b"2", key="order:1"))
            )
            await asyncio.sleep(0)  # the command is on its way
            if cancelled:
                publish.cancel()  # as the relay does at the lease's end
            await asyncio.wait({publish}, timeout=60)
            took = time.monotonic() - began
            process.send_signal(signal.SIGCONT)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await publish
            return took

    try:
        took = asyncio.run(main())
    finally:
        process.send_signal(signal.SIGCONT)
    # Started at the last moment a relay starts one, it ends before the lease does.
    assert took < LEASE * LAST_SHARE
