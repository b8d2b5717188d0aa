"""The SQLite store's read-first claim reads a finished replay's row without the columns such a
row implies (``rows.REPLAYED``: succeeded, no lease, no error), and any other row whole: the
claim's record is the row as ``get`` reads it, whichever statement read it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from mideng.core.record import ClaimRequest, Outcome, Record, Status
from mideng.stores.sqlite import SQLiteStore

T = "mideng_records"


def _store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(str(tmp_path / "m.db"), read_first=True)


def _row(db: sqlite3.Connection, key: str, **fields: object) -> None:
    now = time.time()
    values: dict[str, object] = {
        "scope": "pay",
        "key": key,
        "status": "succeeded",
        "fence": 3,
        "owner": "o-1",
        "fingerprint": "fp",
        "result": b'{"ok": 1}',
        "codec": "json",
        "attempts": 2,
        "request_id": "rid",
        "created_at": now - 5,
        "updated_at": now - 1,
        "expires_at": now + 600,
        **fields,
    }
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    db.execute(f"INSERT INTO {T} ({names}) VALUES ({marks})", tuple(values.values()))


def _claim(store: SQLiteStore, key: str) -> tuple[Record, Outcome, list[str]]:
    sent: list[str] = []
    conn = store._conn()
    conn.set_trace_callback(sent.append)
    try:
        claim = store.claim(ClaimRequest("pay", key, "o-new", 30.0, 600.0, "fp"))
    finally:
        conn.set_trace_callback(None)
    return claim.record, claim.outcome, sent


def test_a_finished_replay_is_one_read_of_the_columns_it_does_not_imply(tmp_path: Path) -> None:
    store = _store(tmp_path)
    db = sqlite3.connect(store.path, isolation_level=None)
    _row(db, "done")
    record, outcome, sent = _claim(store, "done")
    assert outcome is Outcome.REPLAY
    assert len(sent) == 1
    assert "CASE WHEN status = 'succeeded'" in sent[0]
    assert record == store.get("pay", "done")
    assert type(record) is Record
    assert record.status is Status.SUCCEEDED
    assert (record.lease_until, record.error) == (None, None)
    db.close()
    store.close()


def test_any_other_row_is_read_whole_by_a_second_statement(tmp_path: Path) -> None:
    store = _store(tmp_path)
    db = sqlite3.connect(store.path, isolation_level=None)
    now = time.time()
    rows: dict[str, tuple[dict[str, object], Outcome]] = {
        "running": (
            {"status": "processing", "lease_until": now + 60, "result": None, "codec": None},
            Outcome.IN_PROGRESS,
        ),
        "failed": (
            {"status": "failed", "error": b'{"e": 1}', "result": None, "codec": None},
            Outcome.REPLAY,
        ),
        "unknown": ({"status": "unknown", "expires_at": None}, Outcome.UNRESOLVED),
        # Rows no mideng statement writes: a lease or an error on a succeeded row is not
        # assumed away, it is read.
        "stray-lease": ({"lease_until": now + 60}, Outcome.REPLAY),
        "stray-error": ({"error": b"x"}, Outcome.REPLAY),
    }
    for key, (fields, _) in rows.items():
        _row(db, key, **fields)
    for key, (_, expected) in rows.items():
        record, outcome, sent = _claim(store, key)
        assert outcome is expected, key
        assert len(sent) == 2, key
        assert record == store.get("pay", key), key
    stray = store.get("pay", "stray-error")
    assert stray is not None
    assert stray.error == b"x"
    db.close()
    store.close()


def test_a_key_with_no_row_is_one_read_then_the_claims_insert(tmp_path: Path) -> None:
    store = _store(tmp_path)
    record, outcome, sent = _claim(store, "new")
    assert outcome is Outcome.ACQUIRED
    assert record.fence == 1
    assert len(sent) == 2
    assert "CASE WHEN status = 'succeeded'" in sent[0]
    assert sent[1].startswith("INSERT")  # no whole-row read: there was no row
    assert store.get("pay", "new") == record
    store.close()
