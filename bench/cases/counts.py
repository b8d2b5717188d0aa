"""``mideng stats`` and the dashboard's overview at 1M and 10M records, on PostgreSQL, MariaDB
and SQLite: the survey's counts (estimated and exact) and the overview page's server time.

    .venv/bin/python -m bench counts [--records 1000000] [--repeats 7] [--only sqlite]
        [--keep] [--exact]
    .venv/bin/python -m bench counts --claims

Each store's table is filled by one bulk statement (``generate_series`` on PostgreSQL, the
SEQUENCE engine on MariaDB, a recursive CTE on SQLite): records in 20 scopes, last written over
the past two hours, 98.8% succeeded, 1% failed, 0.1% processing (half of them with their lease
run out), 0.02% UNKNOWN. Then, ``--repeats`` times after one warm-up: the survey ``mideng
stats`` takes (estimated above ``ESTIMATE_ABOVE`` records), the exact one with ``--exact``, and
on SQLite and PostgreSQL the overview page through the ASGI app in this process. The tables are
dropped afterwards unless ``--keep``. ``--claims`` times instead what SQLite's unresolved
index and row-count triggers cost a first call (dropped from a second store's table).
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from bench.report import RESULTS, command, parser, write
from bench.services import MYSQL_URL, POSTGRES_URL, reachable
from mideng.dashboard import app
from mideng.stores.registry import open_store
from mideng.stores.survey import SurveyStore

TABLE = "bench_counts_records"
SCOPES = 20
SQLITE_FILE = "/tmp/mideng-bench-counts.db"
STATS_TARGET_MS, OVERVIEW_TARGET_MS = 300.0, 200.0

#: The row of record ``i`` in SQL (shared by the three fills): its scope, key and status.
_STATUS = (
    "CASE WHEN i % 100 = 0 THEN 'failed' WHEN i % 1000 = 1 THEN 'processing' "
    "WHEN i % 5000 = 2 THEN 'unknown' ELSE 'succeeded' END"
)
_LEASE = "CASE WHEN i % 1000 = 1 THEN {now} + CASE WHEN i % 2000 = 1 THEN 600 ELSE -600 END END"


def _select(scope: str, key: str, blob: Callable[[str], str], now: float) -> str:
    """The SELECT list of record ``i`` (module docstring), in one database's spelling."""
    ok, error = blob('{"ok": true}'), blob('{"type": "E"}')
    return (
        f"{scope}, {key}, {_STATUS}, 1, 'owner', 'fp', {_LEASE.format(now=now)}, "
        f"CASE WHEN i % 100 <> 0 THEN {ok} END, CASE WHEN i % 100 <> 0 THEN 'json' END, "
        f"CASE WHEN i % 100 = 0 THEN {error} END, "
        f"1, NULL, {now} - (i % 7200), {now} - (i % 7200), {now} + 86400"
    )


def fill_postgresql(url: str, n: int, now: float) -> None:
    engine = create_engine(url)
    rows = _select(
        f"'scope' || lpad((i % {SCOPES})::text, 2, '0')",
        "'key-' || lpad(i::text, 9, '0')",
        lambda s: f"convert_to('{s}', 'UTF8')",
        now,
    )
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {TABLE} SELECT {rows} FROM generate_series(0, {n - 1}) i"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"VACUUM ANALYZE {TABLE}"))
    engine.dispose()


def fill_mysql(url: str, n: int, now: float) -> None:
    engine = create_engine(url)
    rows = _select(
        f"concat('scope', lpad(i % {SCOPES}, 2, '0'))",
        "concat('key-', lpad(i, 9, '0'))",
        lambda s: f"'{s}'",
        now,
    )
    step = 1_000_000  # a transaction per million rows: InnoDB's undo log stays small
    with engine.connect() as conn:
        for lo in range(0, n, step):
            hi = min(n, lo + step) - 1
            conn.execute(
                text(
                    f"INSERT INTO {TABLE} SELECT {rows} FROM (SELECT seq AS i FROM "
                    f"seq_{lo}_to_{hi}) AS s"
                )
            )
            conn.commit()
        conn.execute(text(f"ANALYZE TABLE {TABLE}"))
    engine.dispose()


def fill_sqlite(path: str, n: int, now: float) -> None:
    import sqlite3

    conn = sqlite3.connect(path)
    rows = _select(
        f"'scope' || substr('0' || (i % {SCOPES}), -2)",
        "'key-' || substr('00000000' || i, -9)",
        lambda s: f"CAST('{s}' AS BLOB)",
        now,
    )
    conn.execute(
        f"INSERT INTO {TABLE} WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c "
        f"WHERE i < {n - 1}) SELECT {rows} FROM c"
    )
    conn.commit()
    conn.close()


def prepare(family: str, n: int) -> str:
    """The store's URL, its table filled with ``n`` records (again unless it holds them)."""
    if family == "sqlite":
        url, db = f"sqlite:///{SQLITE_FILE}?table={TABLE}", f"sqlite:///{SQLITE_FILE}"
    else:
        db = POSTGRES_URL if family == "postgresql" else MYSQL_URL
        url = f"{db}?table={TABLE}"
    engine = create_engine(db)
    with engine.begin() as conn:
        have = 0
        try:
            have = conn.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar_one()
        except Exception:
            conn.rollback()
    if have != n:
        drop(family)
        open_store(url).close()  # the tables, at this mideng's version
        print(f"{family}: filling {n:,} records", flush=True)
        started = time.perf_counter()
        if family == "sqlite":
            fill_sqlite(SQLITE_FILE, n, time.time())
        elif family == "postgresql":
            fill_postgresql(db, n, time.time())
        else:
            fill_mysql(db, n, time.time())
        print(f"{family}: filled in {time.perf_counter() - started:.0f} s", flush=True)
    engine.dispose()
    return url


def drop(family: str) -> None:
    if family == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(SQLITE_FILE + suffix):
                os.remove(SQLITE_FILE + suffix)
        return
    engine = create_engine(POSTGRES_URL if family == "postgresql" else MYSQL_URL)
    with engine.begin() as conn:
        for t in (TABLE, f"{TABLE}_steps"):
            conn.execute(text(f"DROP TABLE IF EXISTS {t}"))
    engine.dispose()


def time_survey(url: str, repeats: int, exact: bool) -> tuple[list[float], Any]:
    """ms per survey as ``mideng stats`` takes it, and the last survey."""
    store = open_store(url)
    assert isinstance(store, SurveyStore)
    found = store.survey(None, grace=60.0, biggest=0, spread=False, exact=exact)
    spent = []
    for _ in range(repeats):
        started = time.perf_counter()
        found = store.survey(None, grace=60.0, biggest=0, spread=False, exact=exact)
        spent.append((time.perf_counter() - started) * 1000)
    store.close()
    return spent, found


async def time_overview(url: str, repeats: int) -> list[float]:
    dashboard = app(url)
    transport = httpx.ASGITransport(app=dashboard)
    spent = []
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        reply = await client.get("/")  # warm-up: connections, plans, templates
        assert reply.status_code == 200, reply.text[:300]
        for _ in range(repeats):
            started = time.perf_counter()
            reply = await client.get("/")
            spent.append((time.perf_counter() - started) * 1000)
    await dashboard.aclose()
    return spent


def claim_cost(rounds: int, calls: int) -> dict[str, float]:
    """µs per first call of a guarded function on SQLite, with schema version 3's unresolved
    index and row-count triggers and with them dropped: what they cost the claim path.
    Interleaved rounds, medians."""
    import gc
    import itertools
    import logging
    import sqlite3
    import tempfile
    from pathlib import Path

    from mideng import Guard
    from mideng.stores.sqlite import SQLiteStore

    logging.getLogger("mideng").setLevel(logging.ERROR)
    keys = (f"k{i}" for i in itertools.count())
    with tempfile.TemporaryDirectory() as tmp:
        handlers = {}
        for name in ("version 3", "version 2"):
            path = str(Path(tmp) / f"{name.replace(' ', '')}.db")  # one file each
            store = SQLiteStore(path, table="claims")
            if name == "version 2":  # no unresolved index, no row count
                with sqlite3.connect(path) as conn:
                    conn.execute("DROP INDEX claims_unresolved")
                    conn.execute("DROP TRIGGER claims_rows_in")
                    conn.execute("DROP TRIGGER claims_rows_out")
            guard = Guard(store)

            @guard.idempotent("pay", key="{trade_no}")
            def handle(trade_no: str) -> dict[str, str]:
                return {"order": trade_no, "status": "paid"}

            handlers[name] = handle
        times: dict[str, list[float]] = {name: [] for name in handlers}
        for round_ in range(rounds + 1):  # round 0 warms up
            for name, handle in handlers.items():
                batch = [next(keys) for _ in range(calls)]
                gc.collect()
                started = time.perf_counter()
                for key in batch:
                    handle(key)
                if round_:
                    times[name].append((time.perf_counter() - started) / calls * 1e6)
    return {name: statistics.median(spent) for name, spent in times.items()}


def _cell(spent: list[float] | None, target: float) -> str:
    if not spent:
        return "-"
    median = statistics.median(spent)
    return f"{median:.1f}{' ✗' if median > target else ''} ({max(spent):.1f})"


def main(argv: list[str]) -> None:
    options = parser("counts", __doc__)
    options.add_argument("--records", type=int, default=1_000_000)
    options.add_argument("--repeats", type=int, default=7)
    options.add_argument("--only", choices=("sqlite", "postgresql", "mysql"), default=None)
    options.add_argument("--keep", action="store_true", help="keep the tables afterwards")
    options.add_argument("--exact", action="store_true", help="also time the exact survey")
    options.add_argument(
        "--claims",
        action="store_true",
        help="only time SQLite's first calls with/without version 3's index and triggers",
    )
    args = options.parse_args(argv)
    if args.claims:
        cost = claim_cost(15, 1000)
        load = os.getloadavg()[0]
        print(f"SQLite first call, µs (median of 15 rounds of 1000; load {load:.1f}): {cost}")
        return
    families = [args.only] if args.only else ["sqlite", "postgresql", "mysql"]
    rows = []
    for family in families:
        if family != "sqlite" and not reachable(family):
            print(f"{family}: not reachable, skipped")
            continue
        url = prepare(family, args.records)
        stats, found = time_survey(url, args.repeats, False)
        exact = time_survey(url, args.repeats, True)[0] if args.exact else None
        overview = None
        if family != "mysql":
            overview = asyncio.run(time_overview(url, args.repeats))
        label = "estimated" if found.estimated else "exact"
        rows.append(
            f"| {family} | {found.total:,} ({label}) | {_cell(stats, STATS_TARGET_MS)} | "
            f"{_cell(exact, STATS_TARGET_MS)} | {_cell(overview, OVERVIEW_TARGET_MS)} |"
        )
        print(rows[-1], flush=True)
        if not args.keep:
            drop(family)
    out = [
        "# Counts benchmark",
        "",
        f"Command: `{command('counts', argv)}`",
        "",
        f"Python {platform.python_version()}, {platform.machine()}; {args.records:,} records; "
        f"ms, median (slowest) of {args.repeats}.",
        "",
        "| store | total counted | stats | stats --exact | overview page |",
        "|---|---:|---:|---:|---:|",
        *rows,
    ]
    text_out = "\n".join(out)
    write(RESULTS / f"counts-{args.records}.md", text_out)
    print(text_out)
