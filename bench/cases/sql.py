"""SQL store (PostgreSQL, MariaDB) against the raw driver floor and idemkit, in one run.

    .venv/bin/python -m bench sql [--rounds 120] [--calls 25] [--warm 200]

Every number is the median of per-call wall times (µs) over ``--rounds`` batches of ``--calls``
calls per contender, after a warm-up; the contenders take turns, batch by batch, in a new
order every round.
"first" is a call on a new key (the body runs and its result is stored); "duplicate" is a call
on a key whose result is stored (it is replayed).

The raw floor is what any SQL idempotency scheme must at least do, on a table of the same
layout, through the very connection the (first) mideng store uses (see ``shared_cursor``):
first call = ``INSERT … ON CONFLICT DO NOTHING`` (PostgreSQL) / ``INSERT IGNORE`` (MariaDB) of
a claim row, then an ``UPDATE`` that stores a record-sized result; duplicate = one ``SELECT``
of the stored row and the decoding of its result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import time
import uuid
from typing import Any

from bench.contenders import RESULT, ACase, Case, aguard_case, guard_case
from bench.report import RESULTS, case_table, command, parser, write
from bench.services import MYSQL_URL, POSTGRES_URL, reachable
from bench.timing import run_async, run_sync
from mideng import Guard
from mideng.stores.sql import SQLStore

NOTES = """## Reading the numbers

- The floor runs on the connection the (first) mideng store uses, so both talk to the same
  server process (PostgreSQL) or thread (MariaDB). On this 2-CPU VM a round trip has taken
  from about 55 µs (client and server on one CPU) to 280 µs depending on where the OS runs the
  two sides and on the host's load, and that moves between runs and even with other threads in
  the process; Python around
  the statements costs a fixed number of µs, so its ratio is largest when round trips are
  fastest. Compare within one table.
- mideng's claim on PostgreSQL and MariaDB is two plain statements in an order learned per
  scope (docs/stores-sql.md): a scope of new keys inserts first, so a first call is the
  floor's two statements (claim insert, completing update; fenced, on the database clock, and
  on MariaDB both answered by an OK packet, as the floor's are); a scope of duplicates reads
  first, so a duplicate is one read. The batches here alternate between the two kinds; the
  first three calls of each batch still run in the other order (a median barely sees them).
- A MariaDB duplicate reads the row packed into two columns; PyMySQL's per-column cost (about
  17 µs a column here) makes that cheaper than the floor's plain 16-column SELECT.
- The "MySQL 8 statements" table runs the store as it runs on MySQL 8 (no RETURNING), on
  MariaDB. It is a second store with a connection, and so a server thread, of its own, so its
  floor runs on that connection too: measured against the first store's floor, the placement
  of two server threads on two CPUs, not the code, made it 1.26-1.28x in two runs. A Guard
  call sends the same statements either way (the claim's `INSERT IGNORE` answers in its OK
  packet): read the gap between the two sync tables as this run's margin of error.
- The rest is Python around each store call: the Guard (key, owner, claim decision, codec,
  typed result, heartbeat registration) and the store's row handling, which a first call pays
  twice (claim and completion).
"""


# -- the contenders -------------------------------------------------------------------------
def raw_statements(t: str, mariadb: bool) -> tuple[str, str, str]:
    k = "`key`" if mariadb else "key"
    cols = (
        f"scope, {k}, status, fence, owner, fingerprint, lease_until, attempts, "
        f"request_id, created_at, updated_at, expires_at"
    )
    insert = (
        f"INSERT {'IGNORE ' if mariadb else ''}INTO {t} ({cols}) VALUES "
        f"(%s, %s, 'processing', 1, %s, NULL, %s, 1, NULL, %s, %s, %s)"
        f"{'' if mariadb else ' ON CONFLICT DO NOTHING'}"
    )
    update = (
        f"UPDATE {t} SET status = 'succeeded', result = %s, codec = 'json', "
        f"lease_until = NULL, updated_at = %s, expires_at = %s "
        f"WHERE scope = %s AND {k} = %s AND owner = %s AND fence = 1"
    )
    # The whole stored row: status, result and codec to replay, fingerprint to compare,
    # expiry and lease to judge, as any scheme must read them.
    select = (
        f"SELECT scope, {k}, status, fence, owner, fingerprint, lease_until, result, "
        f"codec, error, attempts, request_id, created_at, updated_at, expires_at "
        f"FROM {t} WHERE scope = %s AND {k} = %s"
    )
    return insert, update, select


def shared_cursor(store: SQLStore) -> Any:
    """The cursor of the connection the store itself uses (it keeps one between calls here).

    The floor runs on that very connection. Two connections are served by two server
    processes (PostgreSQL) or threads (MariaDB), and on a 2-CPU machine where each lands next
    to the client decides its round trip: measured here, the same SELECT took 59 µs on one
    connection and 125 µs on another in the same run, the gap flipping between runs. Sharing
    the connection leaves only the difference in what each side does.
    """
    cache = store.executor.cache
    held = cache.take(store.executor.checkout)  # (pooled connection, its cursor)
    cache.give(held, lambda extra: extra[0].close())
    return held[1]


def raw_case(store: SQLStore, table: str, mariadb: bool) -> Case:
    """The floor, on ``table`` through the store's own DB-API connection and cursor."""
    cur = shared_cursor(store)
    insert, update, select = raw_statements(table, mariadb)

    def first(key: str) -> object:
        owner, now = uuid.uuid4().hex, time.time()
        cur.execute(insert, ("raw", key, owner, now + 60, now, now, now + 86460))
        cur.execute(update, (json.dumps(RESULT).encode(), now, now + 86400, "raw", key, owner))
        return RESULT

    def duplicate(key: str) -> object:
        cur.execute(select, ("raw", key))
        row = cur.fetchone()
        return json.loads(row[7])

    return Case(f"raw floor ({'PyMySQL' if mariadb else 'psycopg'})", first, duplicate)


def _bench_scope(arguments: Any) -> str:
    return "bench"


def idemkit_sync_case(backend: Any) -> Case:
    from idemkit import MethodConfig, idempotent_sync

    config = MethodConfig(key_fields=["order"], scope=_bench_scope)

    @idempotent_sync(backend=backend, config=config)  # type: ignore[untyped-decorator]
    def pay(order: str) -> dict[str, str]:
        return RESULT

    return Case("idemkit idempotent_sync (Postgres)", pay, pay)


async def araw_case(store: SQLStore, table: str, mariadb: bool) -> ACase:
    """The async floor: the same three statements on the store's own async connection."""
    await store.aget("bench", "-")  # the loop's engine keeps a connection, with its cursor
    entry = await store.aexecutor.loop_engine()
    assert len(entry.cache.free) == 1
    cur = entry.cache.free[0][1]
    insert, update, select = raw_statements(table, mariadb)

    async def first(key: str) -> object:
        owner, now = uuid.uuid4().hex, time.time()
        await cur.execute(insert, ("raw", key, owner, now + 60, now, now, now + 86460))
        await cur.execute(
            update, (json.dumps(RESULT).encode(), now, now + 86400, "raw", key, owner)
        )
        return RESULT

    async def duplicate(key: str) -> object:
        await cur.execute(select, ("raw", key))
        row = await cur.fetchone()
        return json.loads(row[7])

    name = "asyncmy" if mariadb else "psycopg async"
    return ACase(f"raw floor ({name})", first, duplicate)


def aidemkit_case(backend: Any) -> ACase:
    from idemkit import MethodConfig, idempotent

    config = MethodConfig(key_fields=["order"], scope=_bench_scope)

    @idempotent(backend=backend, config=config)  # type: ignore[untyped-decorator]
    async def pay(order: str) -> dict[str, str]:
        return RESULT

    return ACase("idemkit idempotent (Postgres, asyncpg)", pay, pay)


def idemkit_backend(url: str, table: str) -> Any:
    """idemkit's Postgres backend on its own table, created with idemkit's own DDL.

    Its pool binds to the loop that first uses it, so the sync facade (a background loop) and
    the async run each get their own backend.
    """
    import asyncpg  # type: ignore[import-untyped]
    from idemkit import PostgresBackend
    from idemkit.backends.postgres import _schema_sql

    dsn = url.replace("postgresql+psycopg://", "postgresql://")

    async def create() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(_schema_sql(table))
        finally:
            await conn.close()

    asyncio.run(create())
    return PostgresBackend.from_url(dsn, table=table, min_size=1, max_size=4)


# -- running --------------------------------------------------------------------------------
def drop(store: SQLStore, *tables: str) -> None:
    with store.engine.connect() as conn:
        for name in tables:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


def bench_postgresql(url: str, args: argparse.Namespace) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    store = SQLStore.from_url(url, table=f"bench_mideng_{tag}")
    raw_store = SQLStore.from_url(url, table=f"bench_raw_{tag}")
    idemkit_table = f"bench_idemkit_{tag}"
    backend = idemkit_backend(url, idemkit_table)
    guard = Guard(store)
    floor = raw_case(store, raw_store.table, mariadb=False)
    cases = [
        floor,
        guard_case("mideng SQLStore (psycopg)", guard),
        idemkit_sync_case(idemkit_backend(url, idemkit_table)),
    ]
    acases = [aguard_case("mideng SQLStore (psycopg async)", guard), aidemkit_case(backend)]

    async def run_all_async() -> None:
        acases.insert(0, await araw_case(store, raw_store.table, mariadb=False))
        await run_async(acases, args.calls, args.rounds, args.warm)
        await store.aclose()
        await backend.aclose()

    try:
        run_sync(cases, args.calls, args.rounds, args.warm)
        asyncio.run(run_all_async())
    finally:
        drop(raw_store, store.table, raw_store.table, idemkit_table)
        store.close()
        raw_store.close()
    with raw_store.engine.connect() as conn:
        version = conn.exec_driver_sql("SHOW server_version").scalar()
    raw_store.close()
    return [
        f"## PostgreSQL {version}",
        "",
        *case_table("Sync (Guard.run; idemkit's sync facade)", cases, floor),
        *case_table("Async (Guard.arun; idemkit's native async)", acases, acases[0]),
    ]


def bench_mariadb(url: str, args: argparse.Namespace) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    store = SQLStore.from_url(url, table=f"bench_mideng_{tag}")
    portable = SQLStore.from_url(url, table=f"bench_portable_{tag}", returning=False)
    raw_store = SQLStore.from_url(url, table=f"bench_raw_{tag}")
    portable_raw = SQLStore.from_url(url, table=f"bench_praw_{tag}")
    floor = raw_case(store, raw_store.table, mariadb=True)
    # The MySQL 8 statements' store has a connection (a server thread) of its own: its floor
    # runs on that connection too, as the first store's does on its own.
    portable_floor = raw_case(portable, portable_raw.table, mariadb=True)
    portable_floor.name = "raw floor (PyMySQL, on that store's connection)"
    cases = [floor, guard_case("mideng SQLStore (PyMySQL)", Guard(store))]
    portable_cases = [
        portable_floor,
        guard_case("mideng SQLStore (PyMySQL, MySQL 8 statements)", Guard(portable)),
    ]
    acases = [aguard_case("mideng SQLStore (asyncmy)", Guard(store))]

    async def run_all_async() -> None:
        acases.insert(0, await araw_case(store, raw_store.table, mariadb=True))
        await run_async(acases, args.calls, args.rounds, args.warm)
        await store.aclose()

    try:
        run_sync([*cases, *portable_cases], args.calls, args.rounds, args.warm)
        asyncio.run(run_all_async())
    finally:
        drop(raw_store, store.table, portable.table, raw_store.table, portable_raw.table)
        store.close()
        portable.close()
        portable_raw.close()
    with raw_store.engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT VERSION()").scalar()
    raw_store.close()
    return [
        f"## MariaDB {version}",
        "",
        "idemkit has no MySQL/MariaDB backend.",
        "",
        *case_table("Sync (Guard.run)", cases, floor),
        *case_table("Sync, MySQL 8 statements (Guard.run)", portable_cases, portable_floor),
        *case_table("Async (Guard.arun)", acases, acases[0]),
    ]


def bench_pinned(url: str, args: argparse.Namespace) -> None:
    """PostgreSQL sync, floor and mideng only, with this process and the server process behind
    the shared connection both pinned to CPU ``args.pinned``: round trips then stop depending
    on where the OS happens to run the two sides. Needs ``taskset`` and the right to set the
    server process's affinity (same host; root or the postgres user). Prints; writes nothing.
    """
    import os
    import subprocess

    tag = uuid.uuid4().hex[:8]
    store = SQLStore.from_url(url, table=f"bench_mideng_{tag}")
    raw_store = SQLStore.from_url(url, table=f"bench_raw_{tag}")
    floor = raw_case(store, raw_store.table, mariadb=False)
    cases = [floor, guard_case("mideng SQLStore (psycopg)", Guard(store))]
    server = shared_cursor(store).connection.info.backend_pid
    os.sched_setaffinity(0, {args.pinned})
    subprocess.run(
        ["taskset", "-p", "-c", str(args.pinned), str(server)], check=True, capture_output=True
    )
    try:
        run_sync(cases, args.calls, args.rounds, args.warm)
    finally:
        drop(raw_store, store.table, raw_store.table)
        store.close()
        raw_store.close()
    title = f"PostgreSQL sync, client and server process pinned to CPU {args.pinned}"
    print("\n".join(case_table(title, cases, floor)))


def main(argv: list[str]) -> None:
    options = parser("sql", __doc__)
    options.add_argument("--postgresql", default=POSTGRES_URL)
    options.add_argument("--mysql", default=MYSQL_URL)
    options.add_argument("--calls", type=int, default=25, help="calls per batch")
    options.add_argument("--rounds", type=int, default=120)
    options.add_argument("--warm", type=int, default=200)
    options.add_argument("--out", default=str(RESULTS / "sql.md"))
    options.add_argument(
        "--pinned",
        type=int,
        metavar="CPU",
        help="PostgreSQL sync only, client and server on this CPU",
    )
    args = options.parse_args(argv)
    # Duplicates log a warning each (by design); the peers log nothing, so neither do we here.
    logging.getLogger("mideng").setLevel(logging.ERROR)
    if args.pinned is not None:
        bench_pinned(args.postgresql, args)
        return

    sections: list[str] = []
    if reachable("postgresql"):
        sections += bench_postgresql(args.postgresql, args)
    if reachable("mysql"):
        sections += bench_mariadb(args.mysql, args)
    import psycopg
    import pymysql  # type: ignore[import-untyped]

    lines = [
        "# SQL store benchmark",
        "",
        f"Command: `{command('sql', argv)}`",
        "",
        f"Python {platform.python_version()}, psycopg {psycopg.__version__}, PyMySQL "
        f"{'.'.join(map(str, pymysql.VERSION[:3]))}, {platform.machine()}, "
        f"database on the same host (loopback); "
        f"{args.rounds} batches of {args.calls} calls per contender, interleaved; medians, "
        "µs per call.",
        "",
        *sections,
        NOTES,
    ]
    text = "\n".join(lines)
    print(text)
    write(args.out, text)
