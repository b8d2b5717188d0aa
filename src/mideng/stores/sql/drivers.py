"""One statement on each DB-API driver the SQL store runs on: psycopg 3 and PyMySQL (sync),
psycopg's async connection and asyncmy. The executors (``execute``) hand these to mideng.db's
loop, which runs an operation's statements with them."""

from __future__ import annotations

import functools
from typing import Any

from mideng.db.statements import Res, Stmt


def execute_psycopg(cur: Any, stmt: Stmt) -> Res:
    """Run one statement on a psycopg cursor (one statement per text; no lastrowid)."""
    sql = stmt.sql
    # Binary results: numbers and bytea arrive without text parsing (the values are the same).
    cur.execute(sql.pyformat, stmt.params, binary=True)
    return Res(cur.rowcount, cur.fetchall() if sql.rows else ())


def execute_dbapi(cur: Any, stmt: Stmt) -> Res:
    """Run one statement on a PyMySQL (or any DB-API) cursor."""
    cur.execute(stmt.sql.pyformat, stmt.params)
    count = cur.rowcount
    lastrowid = getattr(cur, "lastrowid", None) or 0  # psycopg has none; MySQL stamps
    for _ in range(stmt.sql.sets - 1):
        cur.nextset()
    return Res(count, cur.fetchall() if stmt.sql.rows else (), lastrowid)


async def aexecute_psycopg(cur: Any, stmt: Stmt) -> Res:
    await cur.execute(stmt.sql.pyformat, stmt.params, binary=True)  # as execute_psycopg
    return Res(cur.rowcount, await cur.fetchall() if stmt.sql.rows else ())


async def aexecute_asyncmy(cur: Any, stmt: Stmt) -> Res:
    await cur.execute(stmt.sql.pyformat, stmt.params)
    count, lastrowid = cur.rowcount, cur.lastrowid or 0
    for _ in range(stmt.sql.sets - 1):
        await cur.nextset()
    return Res(count, await cur.fetchall() if stmt.sql.rows else (), lastrowid)


@functools.cache
def quiet_cursor() -> type:
    """asyncmy's cursor, minus the warnings it fetches.

    When the server counts a warning, asyncmy's cursor sends SHOW WARNINGS and logs each one at
    WARNING. The claim's INSERT IGNORE warns on every taken key (that is how it says so), so
    every duplicate claim paid a second round trip and a log line; PyMySQL, on the sync side,
    reads the warning count and goes on. ``_show_warnings`` is the hook asyncmy's own result
    handling calls for that (the store's statements admit no other warning; see the insert
    in ``statements``).
    """
    from asyncmy.cursors import Cursor

    class QuietCursor(Cursor):
        async def _show_warnings(self, conn: Any) -> None:
            return None

    return QuietCursor
