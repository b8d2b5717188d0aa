"""Completing a claim whose row the store kept (``claims.HeldClaims``), without a generator.

Most first calls end with this: the fenced update alone tells the new row (it follows from the
claim's row and the clock the update stamped), so the operation ``ops.complete`` is entered
only when the update misses, to read the row for the error. Each function is run by an
executor as ``fn(statements, cursor, ...)``; ``execute`` is that executor's statement runner.
"""

from __future__ import annotations

from typing import Any

from mideng.core.decide import completed
from mideng.core.record import Record, Ticket
from mideng.db.drive import AsyncExecute, Execute, adrive, drive
from mideng.db.statements import Stmt
from mideng.stores.batch import Completion
from mideng.stores.sql.ops import complete, complete_params, fenced_stamp
from mideng.stores.sql.statements import Statements


def complete_known(
    stmts: Statements,
    cur: Any,
    execute: Execute,
    ticket: Ticket,
    result: bytes,
    codec: str,
    ttl: float | None,
    known: Record,
    binary: bool = False,
) -> Record:
    """``binary``: a psycopg cursor, sent the statement directly (binary results, RETURNING
    updated_at: the stamp the new row follows from) without statement and result objects."""
    params = complete_params(stmts, ticket, result, codec, ttl)
    if binary:
        cur.execute(stmts.complete.pyformat, params, binary=True)
        if cur.rowcount == 1:
            return completed(known, float(cur.fetchone()[0]), result=result, codec=codec, ttl=ttl)
    else:
        res = execute(cur, Stmt(stmts.complete, params))
        if res.rowcount == 1:
            stamp = fenced_stamp(stmts, res, params)
            return completed(known, stamp, result=result, codec=codec, ttl=ttl)
    return drive(complete(stmts, Completion(ticket, result, codec, ttl)), execute, cur)


async def acomplete_known(
    stmts: Statements,
    cur: Any,
    execute: AsyncExecute,
    ticket: Ticket,
    result: bytes,
    codec: str,
    ttl: float | None,
    known: Record,
) -> Record:
    params = complete_params(stmts, ticket, result, codec, ttl)
    res = await execute(cur, Stmt(stmts.complete, params))
    if res.rowcount == 1:
        return completed(
            known, fenced_stamp(stmts, res, params), result=result, codec=codec, ttl=ttl
        )
    return await adrive(complete(stmts, Completion(ticket, result, codec, ttl)), execute, cur)
