"""The SQLite store's purge walks the primary key, and a purge with a limit resumes where the
last one stopped, so ``mideng purge`` (``purge(1000)`` again and again) looks at each key
once, however many calls it takes: time linear in the table, not in the square of what it
deletes."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mideng.core.record import ClaimRequest, Outcome
from mideng.db.drive import drive
from mideng.db.statements import Res, Stmt
from mideng.stores.record_table.ops import Sweep
from mideng.stores.record_table.survey import purge_older
from mideng.stores.sqlite import SQLiteStore
from mideng.stores.sqlite.ops import purge
from mideng.stores.sqlite.statements import execute_sqlite

ROWS = 6000
BATCH = 100


class Looked:
    """Runs the purge's statements and counts the keys its sweep read."""

    def __init__(self, store: SQLiteStore) -> None:
        self.conn = sqlite3.connect(store.path, isolation_level=None)
        self.sweep_keys = store.statements.sweep_keys
        self.keys = 0

    def execute(self, conn: Any, stmt: Stmt) -> Res:
        res = execute_sqlite(conn, stmt)
        if stmt.sql is self.sweep_keys:
            self.keys += len(res.rows)
        return res


def fill(path: str, rows: Iterator[tuple[str, str, float]]) -> None:
    db = sqlite3.connect(path)
    db.executemany(
        "INSERT INTO mideng_records (scope, key, status, fence, owner, created_at, "
        "updated_at, expires_at) VALUES (?, ?, 'succeeded', 1, 'o', 0, 0, ?)",
        rows,
    )
    db.commit()
    db.close()


def left(path: str) -> tuple[int, int]:
    """(expired rows, live rows) in the table."""
    db = sqlite3.connect(path)
    now = time.time()
    expired = db.execute(
        "SELECT count(*) FROM mideng_records WHERE expires_at <= ?", (now,)
    ).fetchone()[0]
    live = db.execute(
        "SELECT count(*) FROM mideng_records WHERE expires_at > ?", (now,)
    ).fetchone()[0]
    db.close()
    return expired, live


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(str(tmp_path / "purge.db"))
    yield opened
    opened.close()


def test_repeated_purges_look_at_each_key_once(store: SQLiteStore) -> None:
    now = time.time()
    # One row in three expired, spread over the whole key range.
    fill(
        store.path, (("s", f"k{i:06d}", now - 5 if i % 3 == 0 else now + 3600) for i in range(ROWS))
    )
    looked, sweep = Looked(store), Sweep[tuple[str, str]]()
    calls = purged = 0
    while True:
        done = drive(purge(store.statements, BATCH, BATCH, sweep), looked.execute, looked.conn)
        calls, purged = calls + 1, purged + done
        if done < BATCH:
            break
    assert purged == ROWS // 3
    assert left(store.path) == (0, ROWS - ROWS // 3)
    # Restarting at the first key each call would read ~calls * ROWS / 2 keys (here ~60 times
    # the table); resuming reads each once.
    assert calls == ROWS // 3 // BATCH + 1
    assert looked.keys == ROWS, looked.keys


def test_a_limited_purge_goes_on_where_the_last_stopped_and_an_unlimited_one_does_all(
    store: SQLiteStore,
) -> None:
    now = time.time()
    fill(store.path, (("s", f"k{i:06d}", now - 5) for i in range(0, 2000, 2)))
    assert store.purge(300) == 300  # stops mid-table, at k000598
    # Rows that expire behind the resume point, and ahead of it.
    fill(store.path, (("s", f"k{i:06d}", now - 5) for i in range(1, 2000, 2)))
    assert store.purge(5000) == 700 + 701  # after k000598 to the end
    assert left(store.path) == (299, 0)  # k000001 to k000597
    assert store.purge(5000) == 299  # the end was reached: this one began at the start
    fill(store.path, (("s", f"k{i:06d}", now - 5) for i in range(0, 2000, 2)))
    assert store.purge(300) == 300
    assert store.purge() == 700  # no limit: from the start, whatever the last one did
    assert store.purge() == 0


def test_a_row_renewed_between_the_sweeps_read_and_its_delete_is_kept(store: SQLiteStore) -> None:
    now = time.time()
    fill(store.path, (("s", f"k{i:03d}", now - 5) for i in range(10)))
    conn = sqlite3.connect(store.path, isolation_level=None)

    def renewing(conn: Any, stmt: Stmt) -> Res:
        res = execute_sqlite(conn, stmt)
        if stmt.sql is store.statements.sweep_keys:
            # A claim takes k004 over and renews it after the sweep read it.
            conn.execute("UPDATE mideng_records SET expires_at = ? WHERE key = 'k004'", (now + 60,))
        return res

    assert drive(purge(store.statements, None, BATCH, Sweep()), renewing, conn) == 9
    assert left(store.path) == (0, 1)
    conn.close()


def test_a_purge_whose_statement_fails_once_is_finished_by_the_next(store: SQLiteStore) -> None:
    now = time.time()
    fill(store.path, (("s", f"k{i:05d}", now - 5 if i % 2 else now + 3600) for i in range(1000)))
    conn, sweep, statements = (
        sqlite3.connect(store.path, isolation_level=None),
        Sweep[tuple[str, str]](),
        [0],
    )

    def failing_once(conn: Any, stmt: Stmt) -> Res:
        statements[0] += 1
        if statements[0] == 5:  # the third range's key read: the database went away
            raise sqlite3.OperationalError("disk I/O error")
        return execute_sqlite(conn, stmt)

    with pytest.raises(sqlite3.OperationalError):
        drive(purge(store.statements, 100_000, BATCH, sweep), failing_once, conn)
    assert left(store.path) == (400, 500)  # two ranges of a hundred keys were purged
    resumes_after = sweep.after
    assert resumes_after == ("s", "k00199")  # the next limited purge goes on from there
    assert drive(purge(store.statements, 100_000, BATCH, sweep), execute_sqlite, conn) == 400
    assert left(store.path) == (0, 500)
    assert sweep.after is None
    conn.close()


def fill_finished(path: str) -> None:
    """ROWS finished rows: one in three last written long ago (i % 3 == 1), all live."""
    now = time.time()
    db = sqlite3.connect(path)
    db.executemany(
        "INSERT INTO mideng_records (scope, key, status, fence, owner, created_at, "
        "updated_at, expires_at) VALUES ('s', ?, 'succeeded', 1, 'o', 0, ?, ?)",
        ((f"k{i:06d}", 0 if i % 3 == 1 else now, now + 3600) for i in range(ROWS)),
    )
    db.commit()
    db.close()


class Stepped:
    """Runs statements on its own connection, counting the virtual machine's instructions
    (sqlite3's progress handler, called every instruction): the work a statement does,
    rows it visits included, without a clock."""

    def __init__(self, store: SQLiteStore) -> None:
        self.conn = sqlite3.connect(store.path, isolation_level=None)
        self.steps = 0

        def step() -> int:
            self.steps += 1
            return 0

        self.conn.set_progress_handler(step, 1)


def repeated(run: Callable[[int], int], batch: int) -> tuple[int, int]:
    """A limited purge run again and again until it comes back short: (deleted, calls)."""
    calls = deleted = 0
    while True:
        done = run(batch)
        calls, deleted = calls + 1, deleted + done
        if done < batch:
            return deleted, calls


# Small batches: many calls, where a purge that starts over each call reads the most again.
SMALL = 20


def test_a_repeated_purge_older_reads_each_key_once(store: SQLiteStore) -> None:
    fill_finished(store.path)
    stepped, sweep = Stepped(store), Sweep[tuple[str, str]]()

    def once(batch: int) -> int:
        op = purge_older(store.statements, 60.0, batch, sweep, batch)
        return drive(op, execute_sqlite, stepped.conn)

    deleted, calls = repeated(once, SMALL)
    assert (deleted, calls) == (ROWS // 3, ROWS // 3 // SMALL + 1)
    assert store.purge_older(60.0) == 0
    # Measured: ~46 instructions a row of the table. A DELETE … LIMIT that scanned
    # from the first key every call (as purge_older did) took 220 here, growing with calls.
    assert stepped.steps <= 100 * ROWS, stepped.steps


def test_a_repeated_purge_does_work_linear_in_the_table(store: SQLiteStore) -> None:
    now = time.time()
    expiring = ((f"k{i:06d}", now - 5 if i % 3 == 0 else now + 3600) for i in range(ROWS))
    fill(store.path, (("s", key, at) for key, at in expiring))
    stepped, sweep = Stepped(store), Sweep[tuple[str, str]]()

    def once(batch: int) -> int:
        return drive(purge(store.statements, batch, batch, sweep), execute_sqlite, stepped.conn)

    assert repeated(once, SMALL) == (ROWS // 3, ROWS // 3 // SMALL + 1)
    # Measured: ~40 instructions a row of the table, each key read once.
    assert stepped.steps <= 100 * ROWS, stepped.steps


def test_a_claim_goes_through_between_a_purges_batches(store: SQLiteStore) -> None:
    """SQLite has one writer at a time, so a claim waits for the batch being written; each
    batch is its own statement, so it waits for no more than that one."""
    now = time.time()
    fill(store.path, (("s", f"k{i:06d}", now - 5) for i in range(ROWS)))
    conn = sqlite3.connect(store.path, isolation_level=None)
    claimed: list[Outcome] = []
    other = SQLiteStore(store.path, timeout=5.0)

    def claiming(conn: Any, stmt: Stmt) -> Res:
        res = execute_sqlite(conn, stmt)
        if stmt.sql is store.statements.sweep and not claimed:
            # Mid-purge: a new key, and an expired one a later batch would have deleted.
            for key in ("new", f"k{ROWS - 1:06d}"):
                claimed.append(other.claim(ClaimRequest("s", key, "o", 30, 3600)).outcome)
        return res

    try:
        assert drive(purge(store.statements, None, BATCH, Sweep()), claiming, conn) == ROWS - 1
    finally:
        other.close()
        conn.close()
    assert claimed == [Outcome.ACQUIRED, Outcome.ACQUIRED]
