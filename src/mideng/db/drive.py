"""The one driver of operations: a sync loop and the same loop awaited.

``drive(op, execute, conn)`` sends each statement the operation yields to ``execute(conn,
stmt)`` and the result back into the operation, until it returns. ``execute`` is what differs
between connections (a psycopg or PyMySQL cursor, asyncmy, a caller's SQLAlchemy connection);
the operation and this loop are the same for all of them. An exception from ``execute`` is
thrown into the operation at the ``yield`` that sent the statement: an operation that expects
one (a duplicate key it turns into an answer) handles it there, written once for both loops;
any other propagates out of the loop unchanged, and whoever owns the connection decides what
it means (retry, map to StoreUnavailableError, roll back).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mideng.db.statements import Op, Res, Stmt, T

Execute = Callable[[Any, Stmt], Res]
AsyncExecute = Callable[[Any, Stmt], Awaitable[Res]]


def drive(op: Op[T], execute: Execute, conn: Any) -> T:
    stmt = next(op)
    while True:
        try:
            try:
                res = execute(conn, stmt)
            except Exception as exc:
                stmt = op.throw(exc)
            else:
                stmt = op.send(res)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def adrive(op: Op[T], execute: AsyncExecute, conn: Any) -> T:
    stmt = next(op)
    while True:
        try:
            try:
                res = await execute(conn, stmt)
            except Exception as exc:
                stmt = op.throw(exc)
            else:
                stmt = op.send(res)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
