"""SQLite on the shared runtime: its statements where they differ from the server kinds', its
own few operations, and the loop's executor on a sqlite3 connection.

The record operations are ``ops``' own generators on the ``sqlite`` statement set, every one an
autocommit statement (an insert that yields to a racer, a fenced update, a compare-and-set on
the row as read): SQLite makes each atomic across threads and processes by itself, so no
``BEGIN IMMEDIATE`` is needed for them. Only a read-decide-write that no single statement can
express (``transact``: the debounce window's stamps) takes the write lock for its span.

What differs from the server kinds: the clock is the client's (``:now``, bound per statement),
rows arrive typed (BLOB as bytes), and a purge walks the primary key in bounded ranges instead
of an index on ``expires_at`` (the SQLite table has no secondary index: each would cost a first
call another page written per statement, about as much as the Guard's whole Python).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mideng.core.record import Record
from mideng.db.statements import Op, Res, Sql, Stmt, binds
from mideng.stores.base import KEEP, Step, T
from mideng.stores.sql.rows import REPLAYED, record, replayed_as
from mideng.stores.sql.schema import COLUMNS
from mideng.stores.sql.statements import Statements


def qmark(sql: Sql) -> str:
    """The text with ``?`` for each ``:name`` bind: sqlite3 then binds a tuple by position,
    without a name lookup per parameter."""
    text = sql.text
    for name in binds(text):
        text = text.replace(f":{name}", "?", 1)
    return text


class SQLiteStatements(Statements):
    """The ``sqlite`` statement set of ``Statements``, plus what only the SQLite store runs.

    ``select_q`` / ``insert_q`` / ``complete_q``: the claim's read (without the clock column),
    the claim's insert and the completion with positional binds, for the store's own first-call
    and duplicate paths (their parameter orders are asserted below); ``replay_q``: the read a
    claim that reads first sends first (``rows.REPLAYED``), ``select_q`` after it only for a
    row that is not a finished replay."""

    def __init__(self, table: str) -> None:
        super().__init__("sqlite", table)
        t, pk, cols = self.table, self.pk, self.cols
        # Fixed: BEGIN alone is deferred, and a deferred read that then writes can fail with
        # SQLITE_BUSY at once (no busy wait) when another connection wrote in between.
        self.begin = Sql("BEGIN IMMEDIATE")
        self.row = Sql(f"SELECT {cols} FROM {t} WHERE {pk}")
        self.all_rows = Sql(f"SELECT {cols} FROM {t}")
        self.put = Sql(
            f"INSERT OR REPLACE INTO {t} ({cols}) VALUES ({', '.join(':' + c for c in COLUMNS)})"
        )
        # A purge sweeps the primary key: the next ``:size`` keys after the last one seen, then
        # the expired rows among them (the delete re-checks the expiry, so a row renewed since
        # the read is kept).
        after = "(scope, key) > (:scope, :key)"
        self.sweep_keys = Sql(
            f"SELECT scope, key FROM {t} WHERE {after} ORDER BY scope, key LIMIT :size"
        )
        self.sweep = Sql(
            f"DELETE FROM {t} WHERE {after} AND (scope, key) <= (:last_scope, :last_key) "
            f"AND expires_at <= :now"
        )
        assert self.insert is not None
        # The store's own read leaves out the clock column of ``select``: the clock is the
        # client's, the same value it would bind only to read back (each column costs sqlite3
        # about 1,500 instructions, a twenty-fifth of the whole read).
        self.select_q = qmark(Sql(self.select.text.replace(", :now FROM", " FROM", 1)))
        self.replay_q = qmark(Sql(f"SELECT {REPLAYED} FROM {t} WHERE {pk}"))
        self.insert_q, self.complete_q = qmark(self.insert), qmark(self.complete)
        assert binds(self.select.text) == ["now", "scope", "key"]
        assert self.select_q.count("?") == 2  # scope, key
        assert self.replay_q.count("?") == 2
        assert binds(self.insert.text) == [
            *("scope", "key", "owner", "fingerprint", "now", "lease", "request_id"),
            *("now", "now", "now", "lease", "expiry_ttl"),
        ]
        assert binds(self.complete.text) == [
            *("now", "result", "codec", "now", "ttl", "scope", "key", "owner", "fence", "now")
        ]

    def replay_in(self, scope: object, codec: object) -> str | None:
        """``replay_q`` for one scope whose replays have been ``codec``: both written into
        the text as literals (``rows.replayed_as``), so the key is its only bind and the codec
        column is not read. sqlite3 copies each bound text into a buffer of its own (about
        800 instructions) and reads each column for about 1,500; the statement's own text is
        compiled once per connection, in sqlite3's statement cache. None for a scope or codec
        that is not plain ASCII text."""
        if not (_literal_safe(scope) and _literal_safe(codec)):
            return None
        assert isinstance(scope, str)
        assert isinstance(codec, str)
        where = f"scope = {_literal(scope)} AND key = ?"
        return f"SELECT {replayed_as(_literal(codec))} FROM {self.table} WHERE {where}"


def _literal_safe(text: object) -> bool:
    return isinstance(text, str) and text.isascii() and "\x00" not in text


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def execute_sqlite(conn: Any, stmt: Stmt) -> Res:
    """Run one statement on a sqlite3 connection (``:name`` binds from a mapping).

    Rows with RETURNING are read to the end: an autocommit statement commits only then."""
    sql = stmt.sql
    cur = conn.execute(sql.text, stmt.params or ())
    return Res(cur.rowcount, cur.fetchall() if sql.rows else ())


def _row_params(r: Record) -> dict[str, Any]:
    return {
        "scope": r.scope,
        "key": r.key,
        "status": r.status.value,
        "fence": r.fence,
        "owner": r.owner,
        "fingerprint": r.fingerprint,
        "lease_until": r.lease_until,
        "result": r.result,
        "codec": r.codec,
        "error": r.error,
        "attempts": r.attempts,
        "request_id": r.request_id,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "expires_at": r.expires_at,
    }


def transact(s: SQLiteStatements, scope: str, key: str, step: Step[T]) -> Op[T]:
    """Read (scope, key), let ``step(record, now)`` decide, write what it returns; all under the
    write lock. Whoever drives it rolls back when anything raises."""
    yield Stmt(s.begin)
    res = yield Stmt(s.row, {"scope": scope, "key": key})
    current = record(res.rows[0]) if res.rows else None
    answer, new = step(current, time.time())
    if new is None:
        if current is not None:
            yield Stmt(s.forget, {"scope": scope, "key": key})
    elif new is not KEEP:
        yield Stmt(s.put, _row_params(new))
    yield Stmt(s.commit)
    return answer


def records(s: SQLiteStatements) -> Op[list[Record]]:
    res = yield Stmt(s.all_rows)
    return [record(row) for row in res.rows]


def purge(s: SQLiteStatements, limit: int | None, batch: int) -> Op[int]:
    """Delete expired rows, ``batch`` keys at a time (each range its own short statement)."""
    total, scope, key = 0, "", ""
    while limit is None or total < limit:
        size = batch if limit is None else min(batch, limit - total)
        found = yield Stmt(s.sweep_keys, {"scope": scope, "key": key, "size": size})
        rows: Sequence[Sequence[Any]] = found.rows
        if not rows:
            break
        last_scope, last_key = rows[-1][0], rows[-1][1]
        res = yield Stmt(
            s.sweep,
            {
                "scope": scope,
                "key": key,
                "last_scope": last_scope,
                "last_key": last_key,
                "now": time.time(),
            },
        )
        total += max(res.rowcount, 0)
        if len(rows) < size:
            break
        scope, key = last_scope, last_key
    return total
