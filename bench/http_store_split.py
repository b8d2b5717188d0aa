"""Where a first request's time goes on a network store: its store calls and the rest.

    .venv/bin/python bench/http_store_split.py [--store redis|postgresql] [--calls 200]

bench_http.py's "mideng + <store> store, first request" row and its "the bare endpoint between
its store's calls" row, interleaved for ``--rounds`` rounds of ``--calls`` requests, with the
store's ``aclaim`` and ``acomplete`` timed where the request makes them: per case the median
request, the median claim and completion, and the rest (the request less those two), in µs.
The rest of the bare endpoint's case is the endpoint and the bench's own loop; what the
middleware's rest has beyond it is its own Python, as run between two network waits.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_http
import http_stores
from tests.services import POSTGRES_URL, REDIS_URL

Timed = dict[str, list[float]]


def timing(store: Any, spent: Timed) -> None:
    """The store's two calls, each timed into ``spent`` as it is made."""

    def timed(name: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def run(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                spent[name].append(time.perf_counter() - began)

        return run

    store.aclaim = timed("claim", store.aclaim)
    store.acomplete = timed("complete", store.acomplete)


async def measure(store: Any, calls: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    spent: Timed = {"claim": [], "complete": []}
    timing(store, spent)
    first, _ = bench_http.middleware_cases(bench_http.mideng_app(store), "first")
    around = bench_http.store_cases(store, "own")[1]
    cases = {"middleware, first request": first[1], "bare endpoint between the calls": around[1]}
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    start = 0
    for batch in cases.values():  # warm-up
        await batch(list(range(start, start + 50)))
        start += 50
    for _ in range(rounds):
        for name, batch in cases.items():
            spent["claim"].clear()
            spent["complete"].clear()
            began = time.perf_counter()
            await batch(list(range(start, start + calls)))
            start += calls
            whole = (time.perf_counter() - began) / calls
            rows[name].append(
                (whole, statistics.median(spent["claim"]), statistics.median(spent["complete"]))
            )
    return {
        name: tuple(statistics.median(r[i] for r in runs) * 1e6 for i in range(3))  # type: ignore[misc]
        for name, runs in rows.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=("redis", "postgresql"), default="postgresql")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    logging.getLogger("mideng").setLevel(logging.ERROR)
    opened = (
        http_stores.redis_store(REDIS_URL)
        if args.store == "redis"
        else http_stores.postgresql_store(POSTGRES_URL)
    )
    if opened is None:
        raise SystemExit(f"no {args.store} server")
    store, cleanup = opened
    try:
        found = asyncio.run(measure(store, args.calls, args.rounds))
    finally:
        cleanup()
    print(f"{args.store}: {args.rounds} rounds of {args.calls} requests per case, medians, µs\n")
    print("| case | request | claim | completion | rest |")
    print("|---|---:|---:|---:|---:|")
    for name, (whole, claim, complete) in found.items():
        rest = whole - claim - complete
        print(f"| {name} | {whole:.1f} | {claim:.1f} | {complete:.1f} | {rest:.1f} |")


if __name__ == "__main__":
    main()
