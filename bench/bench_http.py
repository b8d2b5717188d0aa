"""Idempotency middleware overhead on a trivial FastAPI endpoint, as a ratio to the bare one.

    .venv/bin/python bench/bench_http.py [--calls 2000] [--rounds 5] [--redis redis://...]

The app is driven in-process through its ASGI interface (no sockets, no HTTP client), so the
numbers are the middleware's own cost: reading the key, the body and the fingerprint, the
store round trips, capturing and storing the response. "first" is a POST with a new key (the
endpoint runs, its response is stored); "replay" is a POST with a key whose response is stored.
Each row is the median over ``--rounds`` rounds of the mean µs per call of ``--calls`` calls,
after a warm-up. The duplicate warning log line is silenced: it measures the logging setup.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from mideng import Guard, open_store
from mideng.http.asgi import IdempotencyMiddleware
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore

RESULTS = Path(__file__).parent / "results" / "http.md"
BODY = b'{"item": "book", "qty": 2, "note": "gift wrap"}'
KeyOf = Callable[[int], bytes | None]


def endpoint_app() -> FastAPI:
    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def create() -> dict[str, Any]:
        return {"order": "o-1", "status": "created"}

    return app


def guarded(store: Store) -> FastAPI:
    app = endpoint_app()
    app.add_middleware(IdempotencyMiddleware, guard=Guard(store))
    return app


async def call(app: Any, key: bytes | None) -> int:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    if key is not None:
        headers.append((b"idempotency-key", key))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/orders",
        "raw_path": b"/orders",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("bench", 80),
        "extensions": {},
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def per_call_us(app: Any, key_of: KeyOf, calls: int, rounds: int) -> float:
    counter = iter(range(10**12))
    for _ in range(200):
        await call(app, key_of(next(counter)))
    means = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            status = await call(app, key_of(next(counter)))
        means.append((time.perf_counter() - start) / calls * 1e6)
        assert status == 201, status
    return statistics.median(means)


def fresh_keys() -> KeyOf:
    run = uuid.uuid4().hex[:8]
    return lambda i: f'"{run}-{i}"'.encode()


async def cases(
    store: Store, label: str, calls: int, rounds: int, bare: float
) -> list[tuple[str, float, float]]:
    app = guarded(store)
    first = await per_call_us(app, fresh_keys(), calls, rounds)
    replay_key = f'"replay-{uuid.uuid4().hex}"'.encode()
    await call(app, replay_key)
    replay = await per_call_us(app, lambda i: replay_key, calls, rounds)
    return [
        (f"middleware + {label}, first call", first, first / bare),
        (f"middleware + {label}, replay", replay, replay / bare),
    ]


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


async def main(args: argparse.Namespace) -> str:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    bare = await per_call_us(endpoint_app(), lambda i: None, args.calls, args.rounds)
    rows: list[tuple[str, float, float]] = [("bare endpoint", bare, 1.0)]
    rows += await cases(MemoryStore(), "memory store", args.calls, args.rounds, bare)
    opened = redis_store(args.redis)
    if opened is not None:
        store, cleanup = opened
        try:
            rows += await cases(store, "Redis store", args.calls, args.rounds, bare)
        finally:
            await store.aclose()
            cleanup()
    lines = ["| case | µs/call | x bare |", "|---|---:|---:|"]
    lines += [f"| {name} | {us:.1f} | {ratio:.2f} |" for name, us, ratio in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--no-write", action="store_true", help="print only")
    arguments = parser.parse_args()
    table = asyncio.run(main(arguments))
    print(table)
    if not arguments.no_write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(
            "# HTTP middleware overhead\n\n"
            "Trivial FastAPI endpoint driven in-process through ASGI (no sockets); the "
            "IdempotencyMiddleware in front of it with the memory store and the Redis store.\n"
            '"first" runs the endpoint and stores its response; "replay" returns the stored '
            "response without running it. Median over rounds of the mean µs per call.\n\n"
            f"Command: `.venv/bin/python bench/bench_http.py --calls {arguments.calls} "
            f"--rounds {arguments.rounds}`  \n"
            f"Python {platform.python_version()} on {platform.machine()}, "
            f"{platform.system()}; Redis on localhost.\n\n{table}\n",
            encoding="utf-8",
        )
