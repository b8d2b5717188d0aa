"""SQLite's statement set: the ``sqlite`` kind of the record table's ``Statements``, plus what
only the SQLite store sends, and how a statement runs on a sqlite3 connection.

What differs from the server kinds: the clock is the client's (``:now``, bound per statement),
rows arrive typed (BLOB as bytes), and a purge walks the primary key in bounded ranges instead
of an index on ``expires_at`` (the SQLite table has no secondary index: each would cost a first
call another page written per statement, about as much as the Guard's whole Python).
"""

from __future__ import annotations

from typing import Any

from mideng.db.statements import Res, Sql, Stmt, binds
from mideng.stores.record_table.rows import REPLAYED, replayed_as
from mideng.stores.record_table.schema import COLUMNS
from mideng.stores.record_table.statements import Statements


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
            f"SELECT scope, key FROM {t} WHERE {after} ORDER BY scope, key LIMIT :batch"
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
