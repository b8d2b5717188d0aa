"""Round trips per request: bench_http.py's middleware rows against its "store's own cost" rows.

    .venv/bin/python bench/http_round_trips.py [--calls 200]

Counts, in this process, each command the Redis store sends (its direct sender's ``call``) and
each statement the PostgreSQL store executes (psycopg's ``AsyncCursor.execute``), over
``--calls`` requests after a warm-up, and prints them per request with the distinct commands
seen, so the middleware's store traffic can be compared with the rows it is measured against.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_http
import http_stores
from tests.services import POSTGRES_URL, REDIS_URL

seen: Counter[str] = Counter()


def count_redis() -> None:
    from mideng.stores.redis.direct import AsyncDirectSender

    call = AsyncDirectSender.call

    async def counted(self: Any, command: list[bytes]) -> Any:
        # The packed command's lines: *count, $length, FCALL (or EVALSHA), $length, its function.
        lines = b"".join(command)[:120].split(b"\r\n")
        seen[f"{lines[2].decode()} {lines[4].decode()}"] += 1
        return await call(self, command)

    AsyncDirectSender.call = counted  # type: ignore[method-assign]


def count_postgresql() -> None:
    import psycopg

    execute = psycopg.AsyncCursor.execute

    async def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen[str(query).split()[0]] += 1  # INSERT, SELECT, UPDATE (the table's name varies)
        return await execute(self, query, *args, **kwargs)

    psycopg.AsyncCursor.execute = counted  # type: ignore[method-assign]


async def per_request(batch: bench_http.Batch, calls: int, base: int) -> tuple[float, str]:
    await batch(list(range(base, base + 20)))  # warm-up: connections, scripts, replay keys
    seen.clear()
    await batch(list(range(base + 100, base + 100 + calls)))
    total = sum(seen.values())
    return total / calls, ", ".join(f"{name} x{n / calls:.2f}" for name, n in seen.items())


async def main(calls: int) -> None:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    opened: list[tuple[str, tuple[Any, Callable[[], None]] | None]] = [
        ("Redis", http_stores.redis_store(REDIS_URL)),
        ("PostgreSQL", http_stores.postgresql_store(POSTGRES_URL)),
    ]
    print("| store | case | round trips / request | commands |\n|---|---|---:|---|")
    for base, (label, got) in enumerate(opened):
        if got is None:
            continue
        store, cleanup = got
        try:
            rows = [
                *bench_http.middleware_cases(bench_http.mideng_app(store), "middleware"),
                *bench_http.store_cases(store, "own"),
            ]
            for name, batch in rows:
                n, what = await per_request(batch, calls, (base + 1) * 10**6)
                print(f"| {label} | {name} | {n:.2f} | {what} |")
        finally:
            cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200)
    count_redis()
    count_postgresql()
    asyncio.run(main(parser.parse_args().calls))
