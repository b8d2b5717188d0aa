"""The key layout's version per prefix (stores.redis.layout): written where there is none, read
once per store with its first connection, a newer one refused naming the release to install."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mideng import Guard
from mideng.errors import SchemaVersionError
from mideng.stores.redis import RedisStore
from mideng.stores.redis.layout import LAYOUT
from mideng.version import __version__
from tests.backends_redis import delete_prefix
from tests.redis_cluster import Server, cluster
from tests.services import REDIS_URL, need


@pytest.fixture(params=["standalone", "cluster"])
def where(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, str]]:
    """A server's URL, a client of it and a prefix of this test's own."""
    if request.param == "standalone":
        need("redis")
        url, client = REDIS_URL, redis.Redis.from_url(REDIS_URL)
    else:
        url, client = cluster().url, cluster().client()
    prefix = f"mideng-layout-{uuid.uuid4().hex[:10]}"
    yield url, client, prefix
    delete_prefix(client, prefix)


async def _body() -> str:
    return "async"


def _calls(store: RedisStore, key: str) -> tuple[Any, Any]:
    guard = Guard(store)
    sync = guard.run("pay", key, lambda: "sync")

    async def main() -> Any:
        try:
            return await guard.arun("pay", f"{key}-async", _body)
        finally:
            await store.aclose()

    return sync, asyncio.run(main())


@pytest.mark.parametrize("held", [None, "1 0.1.0"], ids=["none", "layout-1"])
def test_a_prefix_without_a_layout_or_in_layout_1_gets_this_one(
    where: tuple[str, Any, str], held: str | None
) -> None:
    """Layout 2 reads layout 1's records as they are, so a layout-1 prefix is moved to it: a
    layout-1 release then refuses the prefix instead of missing a result cut in pieces."""
    url, client, prefix = where
    assert LAYOUT == 2
    if held is not None:
        client.set(f"{prefix}:layout", held)
    store = RedisStore.from_url(url, prefix=prefix)
    try:
        assert _calls(store, "k") == ("sync", "async")
    finally:
        store.close()
    assert client.get(f"{prefix}:layout") == f"{LAYOUT} {__version__}".encode()


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_newer_layout_is_refused_naming_the_release(
    where: tuple[str, Any, str], side: str
) -> None:
    url, client, prefix = where
    client.set(f"{prefix}:layout", f"{LAYOUT + 1} 9.9.0")
    store = RedisStore.from_url(url, prefix=prefix)
    guard = Guard(store)

    def call() -> Any:
        if side == "sync":
            return guard.run("pay", "k", lambda: "sync")
        return asyncio.run(guard.arun("pay", "k", _body))

    try:
        with pytest.raises(SchemaVersionError, match=r"install mideng 9\.9\.0 or later"):
            call()
    finally:
        store.close()
    assert client.get(f"{prefix}:layout") == f"{LAYOUT + 1} 9.9.0".encode()
    assert client.exists(store.key("pay", "k")) == 0  # nothing written under it


def test_what_is_no_layout_is_refused(where: tuple[str, Any, str]) -> None:
    url, client, prefix = where
    client.set(f"{prefix}:layout", "mine")
    store = RedisStore.from_url(url, prefix=prefix)
    try:
        with pytest.raises(SchemaVersionError, match="not a key layout"):
            Guard(store).run("pay", "k", lambda: "sync")
    finally:
        store.close()


def test_the_layout_is_read_once_per_store_in_one_round_trip() -> None:
    """On a server of the test's own, which no one else sends EVAL (the operations are
    functions): one read for a store's whole life, its sync and async calls together."""
    server = Server().start()
    try:
        client = redis.Redis.from_url(server.url)
        store = RedisStore.from_url(server.url, prefix="p")
        try:
            for n in range(20):
                assert _calls(store, f"k{n}") == ("sync", "async")  # a new event loop each time
        finally:
            store.close()
        assert client.info("commandstats")["cmdstat_eval"]["calls"] == 1
        client.set("p:layout", f"{LAYOUT + 1} 9.9.0")
        later = RedisStore.from_url(server.url, prefix="p")
        try:
            with pytest.raises(SchemaVersionError):
                Guard(later).run("pay", "k", lambda: "sync")
        finally:
            later.close()
        client.close()
    finally:
        server.cleanup()
