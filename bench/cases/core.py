"""@idempotent on SQLite and memory against raw sqlite3 floors doing the same work, timed.

Two floors, on the settings the SQLite store uses (WAL, synchronous=NORMAL, autocommit
statements):

- the minimal hand-written dedup: a table of (scope, key, status, result, expiry) and nothing
  else; a first call INSERTs the key as processing and UPDATEs it with the result, a duplicate
  SELECTs the row and decodes its JSON. The least any dedup on SQLite can do.
- the store's own table: the same statements on the very table the SQLite store uses (same
  columns, same DDL), so the gap to the first floor is the row's width.

A third SQLite contender is the store on a table without what schema versions 3 and 4 add to
it (the partial index of unresolved records, the row-count triggers, the partial index of
request ids): what they cost a call.

Contenders run interleaved, one batch each per round, so a change in the machine's load hits
all of them alike; each figure is the median over the rounds.
Run: .venv/bin/python -m bench core [--rounds 15 --calls 1000]
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.report import parser, table
from mideng import Guard
from mideng.context import request_id_scope
from mideng.stores.memory import MemoryStore
from mideng.stores.record_table.schema import DEFAULT_TABLE, ddl
from mideng.stores.sqlite import SQLiteStore

RESULT = {"order_id": 1001, "coupon": "C-8841", "points": 99, "status": "PAID"}
Call = Callable[[str], object]


def _open(path: Path, statements: list[str]) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in statements:
        db.execute(statement)
    return db


def minimal(path: Path) -> tuple[Call, Call]:
    db = _open(
        path,
        [
            "CREATE TABLE dedup (scope TEXT NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL, "
            "result BLOB, expiry REAL, PRIMARY KEY (scope, key))"
        ],
    )
    insert = "INSERT INTO dedup (scope, key, status, expiry) VALUES ('pay', ?, 'processing', ?)"
    update = (
        "UPDATE dedup SET status = 'done', result = ?, expiry = ? WHERE scope = 'pay' AND key = ?"
    )
    select = "SELECT status, result, expiry FROM dedup WHERE scope = 'pay' AND key = ?"

    def first(key: str) -> None:
        now = time.time()
        db.execute(insert, (key, now + 60))
        db.execute(update, (json.dumps(RESULT).encode(), now + 86400, key))

    def duplicate(key: str) -> None:
        json.loads(db.execute(select, ("dup",)).fetchone()[1])

    first("dup")
    return first, duplicate


def store_table(path: Path) -> tuple[Call, Call]:
    db = _open(path, ddl("sqlite", "r"))  # the very table the store uses
    insert = (
        "INSERT INTO r (scope, key, status, fence, owner, lease_until, created_at, "
        "updated_at, expires_at) VALUES ('pay', ?, 'processing', 1, 'o', ?, ?, ?, ?)"
    )
    update = (
        "UPDATE r SET status = 'succeeded', result = ?, codec = 'json', lease_until = NULL, "
        "updated_at = ?, expires_at = ? WHERE scope = 'pay' AND key = ?"
    )

    def first(key: str) -> None:
        now = time.time()
        db.execute(insert, (key, now + 60, now, now, now + 86460))
        db.execute(update, (json.dumps(RESULT).encode(), now, now + 86400, key))

    def duplicate(key: str) -> None:
        row = db.execute("SELECT * FROM r WHERE scope = 'pay' AND key = ?", ("dup",)).fetchone()
        json.loads(row[7])

    first("dup")
    return first, duplicate


def without_lookup_indexes(path: Path) -> SQLiteStore:
    """A SQLite store whose table lacks what versions 3 and 4 add to it (the unresolved
    records' partial index, the row-count triggers, the request ids' partial index): what
    they cost a call, against the store as it is."""
    SQLiteStore(str(path)).close()
    db = sqlite3.connect(path)
    t = DEFAULT_TABLE
    for index in (f"{t}_unresolved", f"{t}_request"):
        db.execute(f"DROP INDEX {index}")
    for trigger in (f"{t}_rows_in", f"{t}_rows_out"):
        db.execute(f"DROP TRIGGER {trigger}")
    db.close()
    return SQLiteStore(str(path))


def guarded(guard: Guard, request_id: str | None = None) -> tuple[Call, Call]:
    """The first call and the duplicate of a guarded function (each under ``request_id``,
    which the record keeps, when given)."""

    @guard.idempotent("pay", key="{trade_no}")
    def handle(trade_no: str) -> dict[str, object]:
        return RESULT

    def call(key: str) -> object:
        if request_id is None:
            return handle(key)
        with request_id_scope(request_id):
            return handle(key)

    call("dup")
    return call, lambda key: call("dup")


def main(argv: list[str]) -> None:
    options = parser("core", __doc__)
    options.add_argument("--rounds", type=int, default=15)
    options.add_argument("--calls", type=int, default=1000)
    args = options.parse_args(argv)
    # The WARNING each duplicate logs is the application's handler's cost, not ours.
    logging.getLogger("mideng").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        contenders = {
            "minimal": minimal(Path(tmp) / "min.db"),
            "raw": store_table(Path(tmp) / "raw.db"),
            "sqlite": guarded(Guard(SQLiteStore(str(Path(tmp) / "m.db")))),
            "unindexed": guarded(Guard(without_lookup_indexes(Path(tmp) / "u.db"))),
            "traced": guarded(Guard(SQLiteStore(str(Path(tmp) / "t.db"))), "req-1"),
            "memory": guarded(Guard(MemoryStore())),
        }
        plain: Call = lambda key: dict(RESULT)  # noqa: E731
        times: dict[str, list[float]] = {f"{n} {k}": [] for n in contenders for k in "fd"}
        times["plain"] = []
        keys = (f"k{i}" for i in itertools.count())
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for name, (first, duplicate) in contenders.items():
                for kind, fn in (("f", first), ("d", duplicate)):
                    batch = [next(keys) for _ in range(args.calls)]
                    gc.collect()
                    start = time.perf_counter()
                    for key in batch:
                        fn(key)
                    if round_:
                        us = (time.perf_counter() - start) / args.calls * 1e6
                        times[f"{name} {kind}"].append(us)
            start = time.perf_counter()
            for key in batch:
                plain(key)
            if round_:
                times["plain"].append((time.perf_counter() - start) / args.calls * 1e6)
    m = {name: statistics.median(v) for name, v in times.items()}
    load = os.getloadavg()
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{platform.machine()}; {args.rounds} interleaved rounds of {args.calls} calls per "
        f"contender, medians; load average {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs"
    )
    print()
    rows: list[tuple[str, float, float | None]] = []
    for kind, label in (("f", "first call"), ("d", "duplicate")):
        floor = m[f"minimal {kind}"]
        rows += [
            (f"minimal hand-written dedup, {label}", floor, 1.0),
            (
                f"raw sqlite3 on the store's table, {label}",
                m[f"raw {kind}"],
                m[f"raw {kind}"] / floor,
            ),
            (f"@idempotent on SQLite, {label}", m[f"sqlite {kind}"], m[f"sqlite {kind}"] / floor),
            (
                f"@idempotent on SQLite, each call with a request id, {label}",
                m[f"traced {kind}"],
                m[f"traced {kind}"] / floor,
            ),
            (
                f"@idempotent on SQLite without versions 3 and 4's indexes and triggers, {label}",
                m[f"unindexed {kind}"],
                m[f"unindexed {kind}"] / floor,
            ),
            (f"@idempotent on memory, {label}", m[f"memory {kind}"], m[f"memory {kind}"] / floor),
        ]
    rows.append(("undecorated call", m["plain"], None))
    print(table(rows, "minimal floor of the same kind"))
    print()
    print(
        "SQLite against the raw statements on its own table: first call "
        f"{m['sqlite f'] / m['raw f']:.2f}x, duplicate {m['sqlite d'] / m['raw d']:.2f}x"
    )
