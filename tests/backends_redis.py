"""Redis entries of the store matrix: standalone, a 3-master cluster, and the hybrid store.

Every test gets its own key prefix; the cleanup deletes that prefix's keys, so tests can share
one Redis with each other and with anyone else using it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from mideng.stores.hybrid.batch import HybridBatch
from mideng.stores.redis import RedisStore
from mideng.stores.sqlite import SQLiteStore
from tests.backends import Backend, Ctx, Opened
from tests.redis_cluster import cluster
from tests.services import REDIS_URL, need


def delete_prefix(client: Any, prefix: str) -> None:
    """Delete every key under ``prefix`` (on every master of a cluster)."""
    for name in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(name)
    client.close()


@contextmanager
def own_prefix(label: str) -> Iterator[tuple[RedisStore, redis.Redis]]:
    """A store on the standalone Redis under a prefix of its own, and a client of that Redis;
    the prefix's keys are deleted after."""
    need("redis")
    prefix = f"mideng-{label}-{uuid.uuid4().hex[:10]}"
    store, client = RedisStore.from_url(REDIS_URL, prefix=prefix), redis.Redis.from_url(REDIS_URL)
    try:
        yield store, client
    finally:
        store.close()
        delete_prefix(client, prefix)


def expiry_ms(client: Any, name: str) -> int:
    """The key's absolute expiry in epoch ms; -1 when it never expires."""
    return int(client.execute_command("PEXPIRETIME", name))


def _prefix(ctx: Ctx) -> str:
    return f"mideng-test-{ctx.suffix}"


def _redis(ctx: Ctx) -> Opened:
    prefix = _prefix(ctx)
    ctx.cleanups.append(lambda: delete_prefix(redis.Redis.from_url(REDIS_URL), prefix))
    return Opened(RedisStore.from_url(REDIS_URL, prefix=prefix), REDIS_URL, {"prefix": prefix})


def _redis_cluster(ctx: Ctx) -> Opened:
    url = cluster().url
    prefix = _prefix(ctx)
    ctx.cleanups.append(lambda: delete_prefix(cluster().client(), prefix))
    return Opened(RedisStore.from_url(url, prefix=prefix), url, {"prefix": prefix})


def _hybrid(ctx: Ctx) -> Opened:
    prefix = _prefix(ctx)
    ctx.cleanups.append(lambda: delete_prefix(redis.Redis.from_url(REDIS_URL), prefix))
    durable = f"sqlite:///{ctx.tmp / f'hybrid-{ctx.suffix}.db'}"
    store = HybridBatch(
        fast=RedisStore.from_url(REDIS_URL, prefix=prefix), durable=SQLiteStore.from_url(durable)
    )
    # Another process opens the same pair through the Redis URL's durable= option.
    return Opened(store, REDIS_URL, {"prefix": prefix, "durable": durable})


BACKENDS: list[Backend] = [
    Backend("redis", _redis, service="redis"),
    Backend("redis-cluster", _redis_cluster),
    Backend("hybrid", _hybrid, service="redis"),
]
