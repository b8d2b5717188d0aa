"""Decorator cost on the embedded stores against the raw sqlite3 floor doing the same work.

The floor for a first call is what any hand-written dedup on SQLite must do: INSERT the
record, then UPDATE it with the result (two autocommit statements, WAL, synchronous=NORMAL,
the settings the SQLite store uses). The floor for a duplicate is one SELECT of the stored row
plus decoding its JSON result. Run: .venv/bin/python bench/bench_core.py
"""

from __future__ import annotations

import json
import logging
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import per_call_us, table
from mideng import Guard
from mideng.stores.memory import MemoryStore
from mideng.stores.sql.schema import ddl
from mideng.stores.sqlite import SQLiteStore

RESULT = {"order_id": 1001, "coupon": "C-8841", "points": 99, "status": "PAID"}
N = 2000


def raw_sqlite(path: Path) -> tuple[float, float]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in ddl("sqlite", "r"):  # the very table the store uses: same row, same indexes
        db.execute(statement)
    insert = (
        "INSERT INTO r (scope, key, status, fence, owner, lease_until, created_at, "
        "updated_at, expires_at) VALUES ('pay', ?, 'processing', 1, 'o', ?, ?, ?, ?)"
    )

    def first(i: int) -> None:
        now = time.time()
        db.execute(insert, (f"k{i}", now + 60, now, now, now + 86460))
        db.execute(
            "UPDATE r SET status = 'succeeded', result = ?, codec = 'json', "
            "lease_until = NULL, updated_at = ?, expires_at = ? "
            "WHERE scope = 'pay' AND key = ?",
            (json.dumps(RESULT).encode(), now, now + 86400, f"k{i}"),
        )

    first(-1)

    def duplicate(i: int) -> None:
        row = db.execute("SELECT * FROM r WHERE scope = 'pay' AND key = 'k-1'").fetchone()
        json.loads(row[7])

    return per_call_us(first, N), per_call_us(duplicate, N)


def guarded(guard: Guard) -> tuple[float, float]:
    @guard.idempotent("pay", key="{trade_no}")
    def handle(trade_no: str) -> dict[str, object]:
        return RESULT

    handle("dup")
    return (per_call_us(lambda i: handle(f"k{i}"), N), per_call_us(lambda i: handle("dup"), N))


def main() -> None:
    # The WARNING each duplicate logs is the application's handler's cost, not ours.
    logging.getLogger("mideng").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        raw_first, raw_dup = raw_sqlite(Path(tmp) / "raw.db")
        sqlite_first, sqlite_dup = guarded(Guard(SQLiteStore(str(Path(tmp) / "m.db"))))
    mem_first, mem_dup = guarded(Guard(MemoryStore()))
    plain = per_call_us(lambda i: dict(RESULT), N)
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{platform.machine()}; medians of 5 batches of {N} calls"
    )
    print(
        table(
            [
                ("raw sqlite3 first call (INSERT + UPDATE)", raw_first, 1.0),
                ("@idempotent on SQLite, first call", sqlite_first, sqlite_first / raw_first),
                ("@idempotent on memory, first call", mem_first, mem_first / raw_first),
                ("raw sqlite3 duplicate (SELECT + decode)", raw_dup, 1.0),
                ("@idempotent on SQLite, duplicate", sqlite_dup, sqlite_dup / raw_dup),
                ("@idempotent on memory, duplicate", mem_dup, mem_dup / raw_dup),
                ("undecorated call", plain, None),
            ],
            "raw sqlite3 floor of the same kind",
        )
    )


if __name__ == "__main__":
    main()
