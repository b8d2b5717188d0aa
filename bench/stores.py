"""The stores the HTTP cases run the middleware on, each opened on names of its own and with the
cleanup that removes what the run wrote; None (and a line on stderr) when its server is not
there."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from typing import Any

from mideng import open_store
from mideng.stores.base import Store


def redis_store(url: str) -> tuple[Store, Callable[[], None]] | None:
    try:
        import redis
    except ImportError:
        return None
    prefix = f"mideng-bench-{uuid.uuid4().hex[:8]}"
    try:
        store = open_store(url, prefix=prefix)
        client = redis.Redis.from_url(url)
        client.ping()
    except Exception as exc:  # any failure (no server, no store module) drops the Redis rows
        print(f"redis rows skipped: {exc}", file=sys.stderr)
        return None

    def cleanup() -> None:
        for name in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(name)
        client.close()

    return store, cleanup


def sqlite_store() -> tuple[Store, Callable[[], None]]:
    """The embedded default, on a file of its own (removed with its folder afterwards)."""
    import shutil
    import tempfile

    from mideng.stores.sqlite import SQLiteStore

    folder = tempfile.mkdtemp(prefix="mideng-bench-http-")
    store = SQLiteStore(os.path.join(folder, "http.db"))

    def cleanup() -> None:
        store.close()
        shutil.rmtree(folder, ignore_errors=True)

    return store, cleanup


def postgresql_store(url: str) -> tuple[Store, Callable[[], None]] | None:
    table = f"mideng_bench_http_{uuid.uuid4().hex[:8]}"
    try:
        store = open_store(url, table=table)
    except Exception as exc:
        print(f"postgresql rows skipped: {exc}", file=sys.stderr)
        return None

    def cleanup() -> None:
        engine: Any = store.engine  # type: ignore[attr-defined]
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        store.close()

    return store, cleanup
