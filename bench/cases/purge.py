"""Purge of a large record table on PostgreSQL, MariaDB and SQLite: its time, and claims'
latency while it runs against before it.

    .venv/bin/python -m bench purge [--rows 10000000] [--expired 0.3] [--only mariadb]

Each store's table is filled by one bulk statement per million rows (generate_series, MariaDB's
sequence engine, a recursive CTE): keys in 20 scopes, a 100-byte result, ``--expired`` of the
rows expired with expiries in an order unrelated to their keys' (an index walk in expiry order
visits the table's pages in no order), the rest live for a day. Then, with another process claiming
new keys on its own connection all along: claims for ``--window`` seconds before, then
``store.purge()`` (no limit) timed, the claims during it, and the claims' 50th and 99th
percentiles in each span. On MariaDB, the buffer pool's reads from disk during the purge
(``Innodb_buffer_pool_reads``, server-wide). Tables are dropped after, unless ``--keep``.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import statistics
import time
import uuid
from typing import Any

from bench.report import RESULTS, command, parser, write
from bench.services import MYSQL_URL, POSTGRES_URL, reachable
from mideng.core.record import ClaimRequest
from mideng.stores.base import Store
from mideng.stores.sql import SQLStore
from mideng.stores.sqlite import SQLiteStore

TABLE = "bench_purge_records"
SQLITE_FILE = "/tmp/mideng-bench-purge.db"
CHUNK = 1_000_000
TARGET_S = {"postgresql": 60.0, "sqlite": 60.0, "mariadb": 120.0}


def _expiry(i: str, n: int, now: float) -> str:
    """The row's expiry: expired (in a scattered order) for ``i % 10 < tenths``, else live."""
    return (
        f"CASE WHEN {i} % 10 < :tenths THEN {now - 10.0} - (({i} * 7919) % {n}) / 1000.0 "
        f"ELSE {now + 86400.0} + {i} / 1000.0 END"
    )


def _columns(k: str) -> str:
    return f"(scope, {k}, status, fence, owner, result, codec, created_at, updated_at, expires_at)"


def fill(family: str, store: Store, rows: int, tenths: int) -> None:
    now = time.time()
    payload = "x" * 100
    for lo in range(0, rows, CHUNK):
        hi = min(lo + CHUNK, rows) - 1
        started = time.perf_counter()
        if family == "sqlite":
            import sqlite3

            db = sqlite3.connect(SQLITE_FILE)
            db.execute(
                f"INSERT INTO {TABLE} {_columns('key')} WITH RECURSIVE g(i) AS "
                f"(SELECT {lo} UNION ALL SELECT i + 1 FROM g WHERE i < {hi}) "
                f"SELECT 's' || (i % 20), 'k' || i, 'succeeded', 1, 'o', "
                f"CAST('{payload}' AS BLOB), 'json', {now}, {now}, "
                f"{_expiry('i', rows, now).replace(':tenths', str(tenths))} FROM g"
            )
            db.commit()
            db.close()
        else:
            from sqlalchemy import create_engine, text

            engine = create_engine(POSTGRES_URL if family == "postgresql" else MYSQL_URL)
            with engine.begin() as conn:
                if family == "postgresql":
                    source = f"generate_series({lo}, {hi}) AS i"
                    scope, key, blob = "'s' || (i % 20)", "'k' || i", f"'{payload}'::bytea"
                    k, i = "key", "i"
                else:
                    source = f"seq_{lo}_to_{hi}"
                    scope, key, blob = "concat('s', seq % 20)", "concat('k', seq)", f"'{payload}'"
                    k, i = "`key`", "seq"
                conn.execute(
                    text(
                        f"INSERT INTO {TABLE} {_columns(k)} SELECT {scope}, {key}, "
                        f"'succeeded', 1, 'o', {blob}, 'json', {now}, {now}, "
                        f"{_expiry(i if k != 'key' else 'i::bigint', rows, now)} FROM {source}"
                    ),
                    {"tenths": tenths},
                )
            engine.dispose()
        print(f"{family}: rows {lo:,}..{hi:,} in {time.perf_counter() - started:.1f} s")
    if family == "postgresql":
        _server_sql(family, f"VACUUM ANALYZE {TABLE}")
        _server_sql(family, "CHECKPOINT")  # the fill's dirty buffers written before the purge
    elif family == "mariadb":
        _server_sql(family, f"ANALYZE TABLE {TABLE}")
        _settled()


def _settled(limit: float = 300.0) -> None:
    """Wait (up to ``limit`` seconds) for InnoDB to write the pages the fill dirtied: with
    them still in the buffer pool, the purge's batches would wait for room in the redo log
    behind the fill's own writes."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        dirty = int(
            _server_sql("mariadb", "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")[0][1]
        )
        if dirty < 1000:
            break
        time.sleep(2.0)
    print(f"mariadb: dirty pages written in {time.perf_counter() - started:.0f} s")


def _server_sql(family: str, sql: str) -> list[Any]:
    from sqlalchemy import create_engine, text

    url = POSTGRES_URL if family == "postgresql" else MYSQL_URL
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        res = conn.execute(text(sql))
        found = list(res.all()) if res.returns_rows else []
    engine.dispose()
    return found


def _pool_reads() -> int:
    return int(_server_sql("mariadb", "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'")[0][1])


def _opened(family: str) -> Store:
    if family == "sqlite":
        return SQLiteStore(SQLITE_FILE, table=TABLE)
    return SQLStore.from_url(POSTGRES_URL if family == "postgresql" else MYSQL_URL, table=TABLE)


def _claiming(family: str, stop: Any, out: Any) -> None:
    """In a process of its own (as an application beside ``mideng purge``): claim new keys
    one after another until ``stop``, then send each claim's start and latency in ms."""
    store, spent = _opened(family), []
    while not stop.is_set():
        began = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process
        store.claim(ClaimRequest("bench", uuid.uuid4().hex, uuid.uuid4().hex, 30, 3600))
        spent.append((began, (time.perf_counter() - began) * 1000))
    store.close()
    out.send(spent)


def _between(spent: list[tuple[float, float]], lo: float, hi: float) -> list[float]:
    return [ms for began, ms in spent if lo <= began < hi]


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def measure(family: str, args: Any) -> dict[str, Any]:
    if args.filled:
        pass  # the table a run with --keep left (or a run stopped mid-purge)
    elif family == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(SQLITE_FILE + suffix):
                os.remove(SQLITE_FILE + suffix)
    else:
        _server_sql(family, f"DROP TABLE IF EXISTS {TABLE}")
    store = _opened(family)
    if not args.filled:
        fill(family, store, args.rows, int(args.expired * 10))
    stop, (received, sent) = multiprocessing.Event(), multiprocessing.Pipe(duplex=False)
    claimer = multiprocessing.Process(target=_claiming, args=(family, stop, sent))
    claimer.start()
    time.sleep(1.0)  # its connection opened, its first claims made
    before_start = time.perf_counter()
    time.sleep(args.window)  # the claims before the purge
    reads = _pool_reads() if family == "mariadb" else None
    started = time.perf_counter()
    purged = store.purge()
    ended = time.perf_counter()
    reads = _pool_reads() - reads if reads is not None else None
    stop.set()
    spent = received.recv()
    claimer.join()
    before, during = _between(spent, before_start, started), _between(spent, started, ended)
    found = {
        "purged": purged,
        "seconds": ended - started,
        "before": (statistics.median(before), _percentile(before, 0.99), len(before)),
        "during": (statistics.median(during), _percentile(during, 0.99), len(during)),
        "pool_reads": reads,
    }
    store.close()
    if args.floor:
        found["floor"] = _floor(family, args)
    if not args.keep:
        if family == "sqlite":
            os.remove(SQLITE_FILE)
        else:
            _server_sql(family, f"DROP TABLE IF EXISTS {TABLE}")
            _server_sql(family, f"DROP TABLE IF EXISTS {TABLE}_steps")
    print(family, found)
    return found


def _floor(family: str, args: Any) -> float:
    """The table filled again and its expired rows deleted by one plain statement, without
    claims beside it: the least time the database takes to delete them (and a lock on all of
    them until it ends, which a purge must not take). Seconds."""
    store = _opened(family)
    if family == "sqlite":
        import sqlite3

        store.close()
        db = sqlite3.connect(SQLITE_FILE, isolation_level=None)
        db.execute(f"DELETE FROM {TABLE}")
        db.close()
        fill(family, _opened(family), args.rows, int(args.expired * 10))
        db = sqlite3.connect(SQLITE_FILE, isolation_level=None)
        started = time.perf_counter()
        db.execute(f"DELETE FROM {TABLE} WHERE expires_at <= {time.time()}")
        spent = time.perf_counter() - started
        db.close()
        return spent
    _server_sql(family, f"DELETE FROM {TABLE}")
    fill(family, store, args.rows, int(args.expired * 10))
    store.close()
    now = "@@timestamp" if family == "mariadb" else "date_part('epoch', now())"
    started = time.perf_counter()
    _server_sql(family, f"DELETE FROM {TABLE} WHERE expires_at <= {now}")
    return time.perf_counter() - started


def main(argv: list[str]) -> None:
    options = parser("purge", __doc__)
    options.add_argument("--rows", type=int, default=10_000_000)
    options.add_argument("--expired", type=float, default=0.3, help="in tenths: 0.1 … 1.0")
    options.add_argument("--window", type=float, default=10.0, help="claims before, seconds")
    options.add_argument("--only", choices=("postgresql", "mariadb", "sqlite"), default=None)
    options.add_argument("--keep", action="store_true", help="leave the tables filled")
    options.add_argument(
        "--floor", action="store_true", help="then fill again and time one plain DELETE"
    )
    options.add_argument(
        "--filled", action="store_true", help="purge the tables as they are, without filling"
    )
    args = options.parse_args(argv)
    families = [args.only] if args.only else ["postgresql", "mariadb", "sqlite"]
    results: dict[str, dict[str, Any]] = {}
    for family in families:
        if family != "sqlite" and not reachable("mysql" if family == "mariadb" else family):
            print(f"{family}: not reachable, skipped")
            continue
        results[family] = measure(family, args)
    out = [
        "# Purge benchmark",
        "",
        f"Command: `{command('purge', argv)}`",
        "",
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores; "
        f"{args.rows:,} rows, {args.expired:.0%} expired; claims of new keys on a second "
        "connection all along; claim latency in ms (median, p99, count).",
        "",
        "| store | purged | purge s | target s | claims before p50 / p99 | during p50 / p99 "
        "| p99 during / before | buffer pool reads | one DELETE s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for family, found in results.items():
        b, d = found["before"], found["during"]
        mark = " ✗" if found["seconds"] > TARGET_S[family] else ""
        reads = "-" if found["pool_reads"] is None else f"{found['pool_reads']:,}"
        floor = f"{found['floor']:.1f}" if "floor" in found else "-"
        out.append(
            f"| {family} | {found['purged']:,} | {found['seconds']:.1f}{mark} | "
            f"{TARGET_S[family]:.0f} | {b[0]:.2f} / {b[1]:.2f} ({b[2]:,}) | "
            f"{d[0]:.2f} / {d[1]:.2f} ({d[2]:,}) | {d[1] / b[1]:.2f} | {reads} | {floor} |"
        )
    text_out = "\n".join(out)
    write(RESULTS / "purge.md", text_out)
    print(text_out)
