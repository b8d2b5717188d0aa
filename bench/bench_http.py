"""Idempotency middleware cost on a trivial FastAPI endpoint, against the bare endpoint, against
idemkit's ASGI middleware, and against the store's own calls, in one run.

    .venv/bin/python bench/bench_http.py [--calls 300] [--rounds 9] [--redis URL] [--postgresql URL]

The app is driven in-process through its ASGI interface (no sockets, no HTTP client), so the
numbers are the middleware's own cost: reading the key and the body, the fingerprint, the store
round trips, capturing, storing and sending the response. "first" is a POST with a new key (the
endpoint runs, its response is stored); "replay" is a POST with a key whose response is stored.

"store's own cost" is what the middleware can't avoid on that store, called directly with what a
request sends: a first request's claim and completion (with a stored response of the same size),
a replay's claim. The middleware's cost over its store is then, for a first request, its time
minus the bare endpoint minus the store's own; for a replay, its time minus the store's own.

Contenders run interleaved, one batch each per round, so a change in the machine's load hits all
of them alike; each figure is the median over the rounds of the batch means. The duplicate warning
log line is silenced (it measures the logging setup).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import platform
import statistics
import sys
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastapi import FastAPI

from mideng import Guard, open_store
from mideng.core.record import ClaimRequest, Ticket
from mideng.http.asgi import IdempotencyMiddleware
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from tests.services import POSTGRES_URL, REDIS_URL

RESULTS = Path(__file__).parent / "results" / "http.md"
BODY = b'{"item": "book", "qty": 2, "note": "gift wrap"}'
# What the middleware stores for the endpoint's response, JSON-encoded: the same bytes per call.
STORED = (
    b'{"status":201,"headers":[["content-type","application/json"]],'
    b'"body":"eyJvcmRlciI6Im8tMSIsInN0YXR1cyI6ImNyZWF0ZWQifQ=="}'
)
KeyOf = Callable[[int], bytes | None]
Batch = Callable[[list[int]], Awaitable[None]]


def endpoint_app() -> FastAPI:
    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def create() -> dict[str, Any]:
        return {"order": "o-1", "status": "created"}

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


def requests(app: Any, key_of: KeyOf) -> Batch:
    async def batch(numbers: list[int]) -> None:
        for n in numbers:
            status = await call(app, key_of(n))
        assert status == 201, status

    return batch


def middleware_cases(app: Any, label: str) -> tuple[tuple[str, Batch], tuple[str, Batch]]:
    run = uuid.uuid4().hex[:8]
    replay_key = f'"replay-{run}"'.encode()
    return (
        (f"{label}, first request", requests(app, lambda n: f'"{run}-{n}"'.encode())),
        (f"{label}, replay", requests(app, lambda n: replay_key)),
    )


def mideng_app(store: Store) -> Any:
    app = endpoint_app()
    app.add_middleware(IdempotencyMiddleware, guard=Guard(store))
    return app


def idemkit_app() -> Any:
    import idemkit

    app = endpoint_app()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its warning that a memory backend is for tests
        app.add_middleware(
            idemkit.IdempotencyMiddleware,
            backend=idemkit.InMemoryBackend(),
            config=idemkit.HttpConfig(scope=lambda request: "bench", scope_mode="single_tenant"),
        )
    return app


def store_cases(store: Store, label: str) -> tuple[tuple[str, Batch], tuple[str, Batch]]:
    """The store calls a request makes, made directly: claim + complete, and a replay's claim."""
    scope, run = "http:bench-own", uuid.uuid4().hex[:8]

    def request(key: str, owner: str) -> ClaimRequest:
        return ClaimRequest(scope, key, owner, 60.0, 86400.0)

    async def firsts(numbers: list[int]) -> None:
        for n in numbers:
            claim = await store.aclaim(request(f"{run}-{n}", f"o-{run}-{n}"))
            await store.acomplete(Ticket.of(claim.record), STORED, "json", 86400.0)

    replayed = f"{run}-replay"

    async def replays(numbers: list[int]) -> None:
        for n in numbers:
            claim = await store.aclaim(request(replayed, f"o-{run}-r{n}"))
            if claim.acquired:  # the warm-up's first: stored for all the others to replay
                await store.acomplete(Ticket.of(claim.record), STORED, "json", 86400.0)
        assert claim.outcome.value == "replay", claim

    return (
        (f"{label}: store's own cost, first request", firsts),
        (f"{label}: store's own cost, replay", replays),
    )


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


async def measure(cases: list[tuple[str, Batch]], calls: int, rounds: int) -> dict[str, float]:
    numbers = iter(range(10**12))
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for round_ in range(rounds + 1):  # round 0 warms up (and stores the replay keys)
        for name, batch in cases:
            chunk = [next(numbers) for _ in range(calls)]
            gc.collect()
            start = time.perf_counter()
            await batch(chunk)
            if round_:
                times[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


async def main(args: argparse.Namespace) -> str:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    logging.getLogger("idemkit").setLevel(logging.ERROR)
    cases: list[tuple[str, Batch]] = [("bare endpoint", requests(endpoint_app(), lambda n: None))]
    cases += middleware_cases(mideng_app(MemoryStore()), "mideng + memory store")
    cases += middleware_cases(idemkit_app(), "idemkit + its memory backend")
    cases += store_cases(MemoryStore(), "memory")
    cleanups: list[Callable[[], None]] = []
    stores: list[str] = ["memory"]
    for label, opened in (
        ("Redis", redis_store(args.redis)),
        ("PostgreSQL", postgresql_store(args.postgresql)),
    ):
        if opened is None:
            continue
        store, cleanup = opened
        cleanups.append(cleanup)
        stores.append(label)
        cases += middleware_cases(mideng_app(store), f"mideng + {label} store")
        cases += store_cases(store, label)
    try:
        m = await measure(cases, args.calls, args.rounds)
    finally:
        for cleanup in cleanups:
            cleanup()
    bare = m["bare endpoint"]
    lines = ["| case | µs/call | x bare |", "|---|---:|---:|"]
    lines += [f"| {name} | {us:.1f} | {us / bare:.2f} |" for name, us in m.items()]
    lines += [
        "",
        "| store | middleware over its store, first request µs | replay µs |",
        "|---|---:|---:|",
    ]
    for label in stores:
        key = "memory store" if label == "memory" else f"{label} store"
        own = label if label != "memory" else "memory"
        first = (
            m[f"mideng + {key}, first request"]
            - bare
            - m[f"{own}: store's own cost, first request"]
        )
        replay = m[f"mideng + {key}, replay"] - m[f"{own}: store's own cost, replay"]
        lines.append(f"| {label} | {first:.1f} | {replay:.1f} |")
    mem_first, mem_replay = (
        m["mideng + memory store, first request"],
        m["mideng + memory store, replay"],
    )
    kit_first, kit_replay = (
        m["idemkit + its memory backend, first request"],
        m["idemkit + its memory backend, replay"],
    )
    lines += [
        "",
        "idemkit's middleware against mideng's, both on memory: "
        f"{kit_first / mem_first:.2f}x the time on first requests, "
        f"{kit_replay / mem_replay:.2f}x on replays.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--redis", default=REDIS_URL)
    parser.add_argument("--postgresql", default=POSTGRES_URL)
    parser.add_argument("--no-write", action="store_true", help="print only")
    arguments = parser.parse_args()
    table = asyncio.run(main(arguments))
    load = os.getloadavg()
    header = (
        f"Python {platform.python_version()} on {platform.machine()}, {platform.system()}; "
        f"Redis and PostgreSQL on localhost; {arguments.rounds} interleaved rounds of "
        f"{arguments.calls} calls per contender; load average {load[0]:.2f} / {load[1]:.2f} "
        f"on {os.cpu_count()} CPUs."
    )
    print(header + "\n\n" + table)
    if not arguments.no_write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(
            "# HTTP middleware\n\n"
            f"Command: `.venv/bin/python bench/bench_http.py --calls {arguments.calls} "
            f"--rounds {arguments.rounds}`  \n{header}\n\n{table}\n",
            encoding="utf-8",
        )
