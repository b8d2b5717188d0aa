"""The dashboard's server time per page with 1,000,000 records and 100,000 outbox rows, on
SQLite and PostgreSQL.

    .venv/bin/python -m bench dashboard [--records 1000000] [--rows 100000] [--repeats 15]
        [--audit 100000] [--tables bench_dash]

The tables are filled once by bulk statements (kept between runs under fixed names; ``--fresh``
fills them again): records in 20 scopes, last written over the past two hours, 98% succeeded,
1% failed, 1,000 processing (half of them with their lease run out) and 200 UNKNOWN; outbox
rows 90% sent, 9% pending, 1% dead, to 10 destinations; ``--audit`` rows in the record table's
audit, by 10 operators, each on a target of its own. ``--tables`` names the tables (and the
SQLite file), so two runs on one server keep apart. Each page is requested through the
ASGI app in this process (httpx's ASGITransport: the app's whole work, reads and rendering,
without a socket), ``--repeats`` times after one warm-up; the median and the slowest, in ms.
"""

from __future__ import annotations

import asyncio
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from bench.report import RESULTS, command, parser, write
from bench.services import POSTGRES_URL, reachable
from mideng.dashboard import app
from mideng.outbox import Outbox
from mideng.stores.registry import open_store

SCOPES = 20
DESTINATIONS = 10
OPERATORS = 10
TARGET_MS = 200.0


@dataclass(frozen=True)
class Tables:
    """The tables a run fills and reads, named after ``name``."""

    name: str = "bench_dash"

    @property
    def records(self) -> str:
        return f"{self.name}_records"

    @property
    def outbox(self) -> str:
        return f"{self.name}_outbox"

    @property
    def sqlite_file(self) -> str:
        return f"/tmp/mideng-{self.name}.db"


def _record_rows(n: int, now: float) -> list[tuple[Any, ...]]:
    """Record ``n``'s row: its scope, key, status and times (module docstring)."""
    rows = []
    for i in range(n):
        status, lease = "succeeded", None
        if i % 100 == 0:
            status = "failed"
        elif i % 1000 == 1:
            status, lease = "processing", now + (600 if i % 2000 == 1 else -600)
        elif i % 5000 == 2:
            status = "unknown"
        at = now - (i % 7200)
        rows.append(
            (
                f"scope{i % SCOPES:02d}",
                f"key-{i:08d}",
                status,
                1,
                "owner",
                "fp",
                lease,
                b'{"ok": true}' if status == "succeeded" else None,
                "json" if status == "succeeded" else None,
                b'{"type": "E"}' if status == "failed" else None,
                1,
                f"req-{i % 50000}",
                at,
                at,
                now + 86400,
            )
        )
    return rows


def _outbox_rows(n: int, now: float) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        state = 1 if i % 100 < 90 else (0 if i % 100 < 99 else 2)
        rows.append(
            {
                "id": f"{i:08d}-0000-4000-8000-000000000000",
                "d": f"dest{i % DESTINATIONS}",
                "p": b'{"n": 1}',
                "s": state,
                "a": 5 if state == 2 else 0,
                "c": now - (n - i) * 0.05,
                "r": f"req-{i % 50000}",
            }
        )
    return rows


def fill_sqlite(t: Tables, args: Any, now: float) -> None:
    import sqlite3

    conn = sqlite3.connect(t.sqlite_file)
    cols = "?, " * 14 + "?"
    conn.executemany(f"INSERT INTO {t.records} VALUES ({cols})", _record_rows(args.records, now))
    conn.commit()
    conn.close()
    _fill_outbox(t, f"sqlite:///{t.sqlite_file}", args.rows, now)
    _fill_audit(t, f"sqlite:///{t.sqlite_file}", args.audit, now)


def fill_postgresql(t: Tables, args: Any, now: float) -> None:
    records = args.records
    engine = create_engine(POSTGRES_URL)
    s = f"'scope' || lpad((i % {SCOPES})::text, 2, '0')"
    status = (
        "CASE WHEN i % 100 = 0 THEN 'failed' WHEN i % 1000 = 1 THEN 'processing' "
        "WHEN i % 5000 = 2 THEN 'unknown' ELSE 'succeeded' END"
    )
    with engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO {t.records} SELECT {s}, 'key-' || lpad(i::text, 8, '0'), "
                f"{status}, 1, 'owner', 'fp', CASE WHEN i % 1000 = 1 THEN :now + "
                "CASE WHEN i % 2000 = 1 THEN 600 ELSE -600 END END, "
                "CASE WHEN i % 100 <> 0 THEN convert_to('{\"ok\": true}', 'UTF8') END, "
                "CASE WHEN i % 100 <> 0 THEN 'json' END, "
                "CASE WHEN i % 100 = 0 THEN convert_to('{\"type\": \"E\"}', 'UTF8') END, "
                "1, 'req-' || (i % 50000), :now - (i % 7200), :now - (i % 7200), "
                ":now + 86400 FROM generate_series(0, :n - 1) AS i"
            ),
            {"now": now, "n": records},
        )
        conn.execute(text(f"ANALYZE {t.records}"))
    engine.dispose()
    _fill_outbox(t, POSTGRES_URL, args.rows, now)
    _fill_audit(t, POSTGRES_URL, args.audit, now)


def _fill_audit(t: Tables, url: str, rows: int, now: float) -> None:
    """Operators' actions in the record table's audit: operator ``n % 10`` on target ``n``."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO {t.records}_audit (at, operator, action, target, state_before, "
                "state_after) VALUES (:at, :operator, 'resolve', :target, 'unknown (fence 1)', "
                "'failed (fence 1, attempts 1)')"
            ),
            [
                {"at": now - rows + n, "operator": f"op{n % OPERATORS}", "target": f"t:{n}"}
                for n in range(rows)
            ],
        )
    engine.dispose()


def _fill_outbox(t: Tables, url: str, rows: int, now: float) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO {t.outbox} (id, aggregatetype, type, payload, destination, "
                "headers, request_id, created_at, state, attempts) VALUES "
                "(:id, 'bench', '', :p, :d, '{}', :r, :c, :s, :a)"
            ),
            _outbox_rows(rows, now),
        )
    engine.dispose()


def prepare(family: str, args: Any, t: Tables) -> tuple[str, str]:
    """The store and outbox URLs, their tables filled (once, unless ``--fresh``)."""
    if family == "sqlite":
        store_url = f"sqlite:///{t.sqlite_file}?table={t.records}"
        db_url = f"sqlite:///{t.sqlite_file}"
    else:
        store_url, db_url = f"{POSTGRES_URL}?table={t.records}", POSTGRES_URL
    engine = create_engine(db_url)
    if args.fresh:
        with engine.begin() as conn:
            for name in (t.records, t.outbox):
                for suffix in ("", "_steps", "_keys", "_audit"):
                    conn.execute(text(f"DROP TABLE IF EXISTS {name}{suffix}"))
    open_store(store_url).close()  # the tables, at this mideng's version
    Outbox(engine, table=t.outbox).create_schema()
    with engine.connect() as conn:
        have = conn.execute(text(f"SELECT count(*) FROM {t.records}")).scalar_one()
    engine.dispose()
    if have != args.records:
        print(f"{family}: filling {args.records} records and {args.rows} outbox rows", flush=True)
        started = time.perf_counter()
        fill = fill_sqlite if family == "sqlite" else fill_postgresql
        fill(t, args, time.time())
        print(f"{family}: filled in {time.perf_counter() - started:.0f} s", flush=True)
    return store_url, db_url


def pages(middle: str) -> dict[str, str]:
    """Each page, by what it shows; ``middle``: a cursor half way down scope07's records."""
    return {
        "overview": "/",
        "records, first page": "/records",
        "records, a scope": "/records?scope=scope07",
        "records, a scope, page 5,000": f"/records?scope=scope07&after={middle}",
        "records, a scope, failed": "/records?scope=scope07&status=failed",
        "records, UNKNOWN": "/records?status=unknown",
        "records, processing by lease": "/records?status=processing",
        "record": "/record?scope=scope07&key=key-00500007",
        "lookup, request id": "/lookup?kind=request&q=req-4242",
        "outbox, first page": "/outbox",
        "outbox, dead": "/outbox?state=dead",
        "outbox, a destination, pending": "/outbox?state=pending&destination=dest3",
        "outbox row": "/outbox/row?id=00050000-0000-4000-8000-000000000000",
        "operations": "/operations",
        "audit": "/audit",
        "audit, an operator": "/audit?operator=op3",
        "audit, a target": "/audit?target=t:4242",
    }


async def time_pages(
    store_url: str, db_url: str, repeats: int, t: Tables
) -> dict[str, list[float]]:
    from mideng.dashboard.pages import cursor

    dashboard = app(store_url, db_url, outbox_table=t.outbox)
    transport = httpx.ASGITransport(app=dashboard)
    timings: dict[str, list[float]] = {}
    middle = cursor(["scope07", "key-00500007", None])
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for name, path in pages(middle).items():
            reply = await client.get(path)  # warm-up: connections, plans, templates
            assert reply.status_code == 200, (name, reply.status_code, reply.text[:300])
            spent = []
            for _ in range(repeats):
                started = time.perf_counter()
                reply = await client.get(path)
                spent.append((time.perf_counter() - started) * 1000)
            timings[name] = spent
    await dashboard.aclose()
    return timings


def main(argv: list[str]) -> None:
    options = parser("dashboard", __doc__)
    options.add_argument("--records", type=int, default=1_000_000)
    options.add_argument("--rows", type=int, default=100_000)
    options.add_argument("--repeats", type=int, default=15)
    options.add_argument("--audit", type=int, default=100_000)
    options.add_argument("--tables", default="bench_dash", help="the tables' names start so")
    options.add_argument("--fresh", action="store_true", help="fill the tables again")
    options.add_argument("--only", choices=("sqlite", "postgresql"), default=None)
    args = options.parse_args(argv)
    tables = Tables(args.tables)
    families = [args.only] if args.only else ["sqlite", "postgresql"]
    results: dict[str, dict[str, list[float]]] = {}
    for family in families:
        if family == "postgresql" and not reachable("postgresql"):
            print("postgresql: not reachable, skipped")
            continue
        store_url, db_url = prepare(family, args, tables)
        results[family] = asyncio.run(time_pages(store_url, db_url, args.repeats, tables))
    out = [
        "# Dashboard pages benchmark",
        "",
        f"Command: `{command('dashboard', argv)}`",
        "",
        f"Python {platform.python_version()}, {platform.machine()}; {args.records:,} records, "
        f"{args.rows:,} outbox rows, {args.audit:,} audit rows; ms per request, median and "
        f"slowest of {args.repeats}.",
        "",
        "| page | " + " | ".join(f"{f} median | {f} max" for f in results) + " |",
        "|---|" + "---:|---:|" * len(results),
    ]
    names = next(iter(results.values())).keys() if results else []
    for name in names:
        cells = []
        for family in results:
            spent = results[family][name]
            median = statistics.median(spent)
            mark = " ✗" if median > TARGET_MS else ""
            cells += [f"{median:.1f}{mark}", f"{max(spent):.1f}"]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    text_out = "\n".join(out)
    write(RESULTS / "dashboard.md", text_out)
    print(text_out)
