"""The HTTP middlewares against bare applications, floors, idemkit and their stores, timed.

The ASGI middleware's cost on a trivial FastAPI endpoint, against the bare endpoint, against
idemkit's ASGI middleware, against hand-written floors (bench/cases/http_floor.py) and against
the store's own calls (memory, the SQLite default, Redis, PostgreSQL), in one run; the WSGI
and Django middlewares against their own bare applications in the same run.

    .venv/bin/python -m bench http [--calls 300] [--rounds 9] [--redis URL] [--postgresql URL]
        [--waits] [--no-sync] [--no-write]

The app is driven in-process through its ASGI interface (no sockets, no HTTP client), so the
numbers are the middleware's own cost: reading the key and the body, the fingerprint, the store
round trips, capturing, storing and sending the response. "first" is a POST with a new key (the
endpoint runs, its response is stored); "replay" is a POST with a key whose response is stored.

"store's own cost" is what the middleware can't avoid on that store, called directly with what a
request sends: a first request's claim and completion (with a stored response of the same size),
a replay's claim. "the bare endpoint between its store's calls" is a first request's unavoidable
part done in its order: the claim, the bare endpoint, the completion. The middleware's cost over
its store is, for a first request, its time minus that row (and, reckoned as before, its time
minus the bare endpoint minus the store's own cost timed apart); for a replay, its time minus
the store's own cost. The two first-request figures differ because Python run after a network
wait runs slower than the same Python run back to back (on this machine, tens of µs per
request); ``--waits`` shows it without a server store: the memory rows with a Redis PING before
each store call, against the PINGs alone.

Contenders run interleaved, one batch each per round, so a change in the machine's load hits all
of them alike; each figure is the median over the rounds of the batch means. The duplicate warning
log line is silenced (it measures the logging setup).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from bench.cases.http_floor import floor_cases, floor_lines
from bench.cases.http_sync import django_cases, wsgi_cases
from bench.report import RESULTS, command, parser, write
from bench.services import POSTGRES_URL, REDIS_URL
from bench.stores import postgresql_store, redis_store, sqlite_store
from bench.timing import Batch, interleaved
from bench.web import endpoint_app, middleware_cases, mideng_app, requests, store_cases
from mideng.core.record import ClaimRequest, Ticket
from mideng.stores.memory import MemoryStore


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


class PingingStore(MemoryStore):
    """The memory store with a Redis PING before each claim and completion: the middleware's
    own Python (the memory store's), with a network wait where a server store has one."""

    def __init__(self, ping: Callable[[], Awaitable[object]]) -> None:
        super().__init__()
        self.ping = ping

    async def aclaim(self, req: ClaimRequest) -> Any:
        await self.ping()
        return await super().aclaim(req)

    async def acomplete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Any:
        await self.ping()
        return await super().acomplete(ticket, result, codec, ttl)


def waits_cases(url: str) -> list[tuple[str, Batch]]:
    """--waits: the memory rows with a Redis PING per store call, and the PINGs alone."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)

    async def ping() -> object:
        return await client.execute_command("PING")  # type: ignore[no-untyped-call]

    def pings(count: int) -> Batch:
        async def batch(numbers: list[int]) -> None:
            for _ in numbers:
                for _ in range(count):
                    await ping()

        return batch

    return [
        *middleware_cases(mideng_app(PingingStore(ping)), "mideng + memory store, PINGs"),
        ("PINGs: two", pings(2)),
        ("PINGs: one", pings(1)),
    ]


def over_stores(m: dict[str, float], stores: list[str]) -> list[str]:
    """What the middleware costs over its store, reckoned both ways (see the module's doc)."""
    lines = [
        "| store | first request, over the endpoint between its store's calls µs "
        "| first, over the endpoint and the store's calls timed apart µs | replay µs |",
        "|---|---:|---:|---:|",
    ]
    for label in stores:
        mw = "mideng + memory store" if label == "memory" else f"mideng + {label} store"
        first = m[f"{mw}, first request"]
        around = first - m[f"{label}: the bare endpoint between its store's calls"]
        apart = first - m["bare endpoint"] - m[f"{label}: store's own cost, first request"]
        replay = m[f"{mw}, replay"] - m[f"{label}: store's own cost, replay"]
        lines.append(f"| {label} | {around:.1f} | {apart:.1f} | {replay:.1f} |")
    if "PINGs: two" in m:
        mw = "mideng + memory store, PINGs"
        first = m[f"{mw}, first request"] - m["bare endpoint"] - m["PINGs: two"]
        replay = m[f"{mw}, replay"] - m["PINGs: one"]
        lines.append(f"| memory, a Redis PING per store call | | {first:.1f} | {replay:.1f} |")
    return lines


def sync_ratios(m: dict[str, float]) -> list[str]:
    lines = ["| middleware | first request x its bare application | replay x |", "|---|---:|---:|"]
    for bare, mw in (
        ("WSGI bare application", "WSGI mideng + memory store"),
        ("Django bare view", "Django mideng + memory store"),
    ):
        if bare in m:
            first, replay = m[f"{mw}, first request"], m[f"{mw}, replay"]
            lines.append(f"| {mw} | {first / m[bare]:.2f} | {replay / m[bare]:.2f} |")
    return lines


async def measure(args: argparse.Namespace) -> str:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    logging.getLogger("idemkit").setLevel(logging.ERROR)
    cases: list[tuple[str, Batch]] = [("bare endpoint", requests(endpoint_app(), lambda n: None))]
    cases += middleware_cases(mideng_app(MemoryStore()), "mideng + memory store")
    cases += middleware_cases(idemkit_app(), "idemkit + its memory backend")
    cases += floor_cases()
    cases += store_cases(MemoryStore(), "memory")
    if not args.no_sync:
        cases += wsgi_cases() + django_cases()
    cleanups: list[Callable[[], None]] = []
    stores: list[str] = ["memory"]
    for label, opened in (
        ("SQLite", sqlite_store()),
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
    if args.waits:
        cases += waits_cases(args.redis)
    try:
        m = await interleaved(cases, args.calls, args.rounds)
    finally:
        for cleanup in cleanups:
            cleanup()
    bare = m["bare endpoint"]
    lines = ["| case | µs/call | x bare endpoint |", "|---|---:|---:|"]
    lines += [f"| {name} | {us:.1f} | {us / bare:.2f} |" for name, us in m.items()]
    lines += [*floor_lines(m), "", *over_stores(m, stores), "", *sync_ratios(m)]
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


def main(argv: list[str]) -> None:
    options = parser("http", __doc__)
    options.add_argument("--calls", type=int, default=300)
    options.add_argument("--rounds", type=int, default=9)
    options.add_argument("--redis", default=REDIS_URL)
    options.add_argument("--postgresql", default=POSTGRES_URL)
    options.add_argument("--no-write", action="store_true", help="print only")
    options.add_argument("--no-sync", action="store_true", help="no WSGI and Django rows")
    options.add_argument(
        "--waits", action="store_true", help="memory rows with a Redis PING per store call"
    )
    arguments = options.parse_args(argv)
    table = asyncio.run(measure(arguments))
    load = os.getloadavg()
    header = (
        f"Python {platform.python_version()} on {platform.machine()}, {platform.system()}; "
        f"Redis and PostgreSQL on localhost; {arguments.rounds} interleaved rounds of "
        f"{arguments.calls} calls per contender; load average {load[0]:.2f} / {load[1]:.2f} "
        f"on {os.cpu_count()} CPUs."
    )
    print(header + "\n\n" + table)
    if not arguments.no_write:
        shown = ["--calls", str(arguments.calls), "--rounds", str(arguments.rounds)]
        shown += ["--waits"] * arguments.waits + ["--no-sync"] * arguments.no_sync
        write(
            RESULTS / "http.md",
            f"# HTTP middleware\n\nCommand: `{command('http', shown)}`  \n{header}\n\n{table}",
        )
