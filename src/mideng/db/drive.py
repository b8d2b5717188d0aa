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
from typing import Any, NamedTuple

from mideng.db.statements import Op, Res, Stmt, T

Execute = Callable[[Any, Stmt], Res]
AsyncExecute = Callable[[Any, Stmt], Awaitable[Res]]


class _Returned(NamedTuple):
    """What an operation returned: it has no statement left."""

    value: Any


def _resumed(op: Op[Any], answer: Res | Exception) -> Stmt | _Returned:
    """The operation, handed a statement's answer at its ``yield`` (the result, or the
    exception ``execute`` raised, thrown in there): its next statement, or what it returned.
    An exception it does not handle propagates from here unchanged."""
    try:
        return op.throw(answer) if isinstance(answer, Exception) else op.send(answer)
    except StopIteration as stop:
        return _Returned(stop.value)


def drive(op: Op[T], execute: Execute, conn: Any) -> T:
    step: Stmt | _Returned = next(op)
    while not isinstance(step, _Returned):
        try:
            answer: Res | Exception = execute(conn, step)
        except Exception as exc:
            answer = exc
        step = _resumed(op, answer)
    return step.value  # type: ignore[no-any-return]


async def adrive(op: Op[T], execute: AsyncExecute, conn: Any) -> T:
    step: Stmt | _Returned = next(op)
    while not isinstance(step, _Returned):
        try:
            answer: Res | Exception = await execute(conn, step)
        except Exception as exc:
            answer = exc
        step = _resumed(op, answer)
    return step.value  # type: ignore[no-any-return]
