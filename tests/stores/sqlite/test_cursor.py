"""The SQLite store's claim cursor (one per connection, reused by every claim and kept
completion): a statement that fails on it must not leave its read open, or every later
statement on the connection would read the snapshot it started."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mideng import Guard
from mideng.errors import StoreUnavailableError
from mideng.stores.sqlite import SQLiteStore


def test_a_row_the_claim_cannot_read_leaves_no_snapshot_behind(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    store = SQLiteStore(path, read_first=True)
    guard = Guard(store, heartbeat=False)
    assert guard.run("pay", "ok", lambda: 1) == 1
    other = sqlite3.connect(path, isolation_level=None)
    # An owner that is not UTF-8: sqlite3 stops on that row, the claim's statement still on it.
    other.execute(
        "INSERT INTO mideng_records (scope, key, status, fence, owner, created_at, updated_at) "
        "VALUES ('pay', 'bad', 'succeeded', 1, CAST(x'ff' AS TEXT), 1.0, 1.0)"
    )
    with pytest.raises(StoreUnavailableError):
        guard.run("pay", "bad", lambda: 2)
    # Another connection's write is seen at once by the store's next statements.
    other.execute("DELETE FROM mideng_records WHERE scope = 'pay' AND key = 'ok'")
    assert store.get("pay", "ok") is None
    assert guard.run("pay", "ok", lambda: 3) == 3  # a fresh claim: the row was gone
    other.close()
    store.close()
