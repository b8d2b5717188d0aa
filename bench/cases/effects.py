"""A four-step operation against the same work as four hand-written guarded calls, timed.

The operation (``@guard.operation`` with four ``@guard.step`` calls: mark paid, issue coupon,
add points, send SMS, each trivial) against four ``guard.run`` calls, one per effect, each
with its own scope — what a service writes today to make each effect run once. A first call
uses a new order each time; a duplicate repeats a finished one. Batches of the contenders are
interleaved, medians per call. PostgreSQL and Redis on the loopback, sync.

Run: .venv/bin/python -m bench effects
"""

from __future__ import annotations

import logging
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from bench.report import parser
from bench.services import POSTGRES_URL, REDIS_URL
from mideng import Guard
from mideng.stores.redis import RedisStore
from mideng.stores.sql import SQLStore

ROUNDS, BATCH = 40, 25
EFFECTS = ("mark_paid", "issue_coupon", "add_points", "send_sms")


def contenders(guard: Guard) -> dict[str, tuple[Callable[[str], Any], Callable[[str], Any]]]:
    def effect(name: str) -> Callable[[str], str]:
        def run(order: str) -> str:
            return f"{name}:{order}"

        run.__name__ = name
        return run

    bodies = [effect(name) for name in EFFECTS]
    steps = [guard.step(name)(body) for name, body in zip(EFFECTS, bodies, strict=True)]

    @guard.operation("bench_pay", key="{order}")
    def operation(order: str) -> list[str]:
        return [step(order) for step in steps]

    def guarded(order: str) -> list[str]:
        return [
            guard.run(f"bench_{name}", order, body, order)
            for name, body in zip(EFFECTS, bodies, strict=True)
        ]

    return {"operation, 4 steps": (operation, operation), "4 guarded calls": (guarded, guarded)}


def measure(guard: Guard) -> list[tuple[str, float, float]]:
    cases = contenders(guard)
    firsts: dict[str, list[float]] = {name: [] for name in cases}
    duplicates: dict[str, list[float]] = {name: [] for name in cases}
    for name, (first, _) in cases.items():
        for i in range(50):  # warm-up: connections, statements, scripts
            first(f"warm-{name}-{i}")
        first(f"done-{name}")
    for round_ in range(ROUNDS):
        for name, (first, duplicate) in cases.items():
            start = time.perf_counter()
            for i in range(BATCH):
                first(f"{name}-{round_}-{i}")
            firsts[name].append((time.perf_counter() - start) / BATCH * 1e6)
            start = time.perf_counter()
            for _ in range(BATCH):
                duplicate(f"done-{name}")
            duplicates[name].append((time.perf_counter() - start) / BATCH * 1e6)
    return [
        (name, statistics.median(firsts[name]), statistics.median(duplicates[name]))
        for name in cases
    ]


def report(title: str, rows: list[tuple[str, float, float]]) -> str:
    base_first, base_dup = rows[1][1], rows[1][2]
    lines = [
        f"#### {title}",
        "",
        "| contender | first call µs | x 4 guarded | duplicate µs | x 4 guarded |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, first, dup in rows:
        lines.append(
            f"| {name} | {first:.1f} | {first / base_first:.2f} | {dup:.1f} | "
            f"{dup / base_dup:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser("effects", __doc__).parse_args(argv)
    logging.getLogger("mideng").setLevel(logging.ERROR)  # every duplicate logs a WARNING
    suffix = uuid.uuid4().hex[:8]
    print(f"Python {platform.python_version()}, {platform.machine()}; {ROUNDS} interleaved")
    print(f"batches of {BATCH} calls per contender; medians, µs per call.\n")
    sql = SQLStore.from_url(POSTGRES_URL, table=f"bench_fx_{suffix}")
    try:
        print(report("PostgreSQL (sync)", measure(Guard(sql, lease=30, heartbeat=False))))
    finally:
        with sql.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS bench_fx_{suffix}_steps")
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS bench_fx_{suffix}")
        sql.close()
    print()
    prefix = f"bench-fx-{suffix}"
    redis_store = RedisStore.from_url(REDIS_URL, prefix=prefix)
    try:
        print(report("Redis (sync)", measure(Guard(redis_store, lease=30, heartbeat=False))))
    finally:
        redis_store.close()
        client = redis.Redis.from_url(REDIS_URL)
        for name in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(name)
        client.close()
