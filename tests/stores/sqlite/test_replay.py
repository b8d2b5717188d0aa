"""The SQLite store's read-first claim reads a finished replay's row without the columns such a
row implies (``rows.REPLAYED``: succeeded, no lease, no error; in a scope whose codec it has
learnt, that codec too), and any other row whole: the claim's record is the row as ``get``
reads it, whichever statement read it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from mideng.core.record import ClaimRequest, Outcome, Record, Status
from mideng.stores.sqlite.store import REPLAY_SCOPES, SQLiteStore

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


def _claim(store: SQLiteStore, key: str, scope: str = "pay") -> tuple[Record, Outcome, list[str]]:
    sent: list[str] = []
    conn = store._conn()
    conn.set_trace_callback(sent.append)
    try:
        claim = store.claim(ClaimRequest(scope, key, "o-new", 30.0, 600.0, "fp"))
    finally:
        conn.set_trace_callback(None)
    # The row count's trigger (schema version 3) is traced as its statement's text again.
    sent = [text for n, text in enumerate(sent) if n == 0 or text != sent[n - 1]]
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


def test_a_scope_replays_by_its_own_statement_once_its_codec_is_known(tmp_path: Path) -> None:
    store = _store(tmp_path)
    db = sqlite3.connect(store.path, isolation_level=None)
    for key in ("a", "b", "c"):
        _row(db, key)
    _row(db, "other", codec="pickle", result=b"raw")
    first, _, sent = _claim(store, "a")
    assert "AND codec = " not in sent[0]  # the generic read, which learns the codec
    again, outcome, sent = _claim(store, "b")
    assert outcome is Outcome.REPLAY
    assert len(sent) == 1
    assert "AND codec = 'json' THEN" in sent[0]
    assert (first, again) == (store.get("pay", "a"), store.get("pay", "b"))
    assert again.codec == "json"
    # Another codec in the same scope is not answered as json: read whole, then learnt again.
    other, outcome, sent = _claim(store, "other")
    assert outcome is Outcome.REPLAY
    assert len(sent) == 2
    assert other == store.get("pay", "other")
    assert other.codec == "pickle"
    assert other.result == b"raw"
    last, _, sent = _claim(store, "c")
    assert "AND codec = " not in sent[0]
    assert last == store.get("pay", "c")
    db.close()
    store.close()


def test_scope_and_codec_are_written_as_literals_or_not_at_all(tmp_path: Path) -> None:
    store = _store(tmp_path)
    db = sqlite3.connect(store.path, isolation_level=None)
    odd = ["it's", "a'' OR 1=1 --", "\u00fc-scope"]
    for scope in odd:
        _row(db, "k1", scope=scope, codec="it's")
        _row(db, "k2", scope=scope, codec="it's")
    _row(db, "k3", scope="it's", codec="it's", fingerprint="other")
    for scope in odd:
        for key in ("k1", "k2"):
            record, outcome, sent = _claim(store, key, scope)
            assert outcome is Outcome.REPLAY
            assert len(sent) == 1
            assert record == store.get(scope, key)
            learnt = "AND codec = 'it''s' THEN" in sent[0]
            assert learnt == (key == "k2" and scope.isascii())
    # The quoted scope's own statement finds its rows only (a fingerprint mismatch included).
    assert _claim(store, "k3", "it's")[1] is Outcome.MISMATCH
    assert _claim(store, "k1", "a'")[1] is Outcome.ACQUIRED
    db.close()
    store.close()


def test_scopes_past_the_learnt_ones_replay_by_the_generic_read(tmp_path: Path) -> None:
    store = _store(tmp_path)
    db = sqlite3.connect(store.path, isolation_level=None)
    scopes = [f"s{i}" for i in range(REPLAY_SCOPES + 8)]
    for scope in scopes:
        _row(db, "k", scope=scope)
    for _ in range(2):
        for scope in scopes:
            record, outcome, sent = _claim(store, "k", scope)
            assert outcome is Outcome.REPLAY
            assert len(sent) == 1
            assert record == store.get(scope, "k")
    db.close()
    store.close()
