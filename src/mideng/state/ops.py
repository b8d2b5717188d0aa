"""The primitives as mideng.db operations: one conditional statement, and a read only on a miss.

Each operation is a generator of statements (mideng.db.statements): the sync and the async
loop run the same one on the caller's connection, so every decision below — what a 0-row
answer means, what a duplicate key means — is written once. A read-back that finds the row in
a state the conditional statement should have matched means the row changed between the two
statements; the statement is sent again, a few times at most.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mideng.db.statements import Op, Res, Stmt
from mideng.errors import IdempotencyError
from mideng.observability import logs
from mideng.state.compiled import TableSql
from mideng.state.defaults import fill
from mideng.state.results import (
    Applied,
    Conflict,
    Existing,
    Inserted,
    Insufficient,
    Missing,
    Superseded,
)
from mideng.state.statements import InsertShape

# Rounds of statement + read-back before a row that keeps changing is reported as such.
RACES = 5
# MySQL/MariaDB's ER_DUP_ENTRY, from PyMySQL and asyncmy alike.
_DUP_ENTRY = 1062


class RowKeptChangingError(IdempotencyError):
    """The row changed between the conditional statement and its read-back, round after
    round; nothing was written by this call."""


def duplicate_entry(exc: BaseException) -> bool:
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", exc), "args", ())
    return bool(args) and args[0] == _DUP_ENTRY


def insert_params(
    shape: InsertShape, values: Mapping[str, Any], dialect: Any
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The insert's parameters, and the row it writes as far as the call knows it. The table's
    Python-side defaults are computed here, once, before the first statement: a retry sends
    the same row."""
    names = shape.names
    params = values if names is None else dict(zip(names, values.values(), strict=True))
    if not shape.filled:
        return params, values
    params = dict(params)  # never the caller's own mapping
    return params, fill(shape.filled, params, values, dialect)


def first_answer(shape: InsertShape, row: Mapping[str, Any], res: Res) -> Inserted | None:
    """Inserted, when the insert wrote the row; None when a row with the key was there."""
    if shape.returns:  # the row as stored, typed by the columns: the common case
        rows = res.rows
        if rows:
            return Inserted(rows[0]._mapping)  # type: ignore[attr-defined]
        return None
    return _stamped(shape, row, res)


def insert_once(
    shape: InsertShape, values: Mapping[str, Any], dialect: Any
) -> Op[Inserted | Existing]:
    """Inserted(row) or Existing(row), never a duplicate-key error: PostgreSQL and SQLite skip
    the duplicate (ON CONFLICT DO NOTHING); on MySQL/MariaDB the plain INSERT's duplicate
    error on this key is caught here (see statements.insert_shape)."""
    params, row = insert_params(shape, values, dialect)
    try:
        sent = yield Stmt(shape.insert, params)
    except Exception as exc:
        if not duplicate_entry(exc):
            raise
        return (yield from after_insert(shape, values, params, row, exc))
    made = first_answer(shape, row, sent)
    if made is not None:
        return made
    return (yield from after_insert(shape, values, params, row, None))


def after_insert(
    shape: InsertShape,
    values: Mapping[str, Any],
    params: Mapping[str, Any],
    row: Mapping[str, Any],
    failure: BaseException | None,
) -> Op[Inserted | Existing]:
    """An insert_once whose insert wrote nothing (``failure``: MySQL's duplicate-key error it
    raised): the existing row, read by the key."""
    races = RACES  # counted down rather than a range(): no iterator to make
    unexplained = False
    while True:
        key_names = shape.key_names
        if key_names is None:  # the read takes the key's columns from the insert's parameters
            found = yield Stmt(shape.read, params)
        else:
            key = zip(key_names, (values[name] for name in shape.unique), strict=True)
            found = yield Stmt(shape.read, dict(key))
        if found.rows:
            logs.duplicate_insert(shape.table, shape.unique, values)
            return Existing(_mapping(found.rows[0]))
        if failure is not None:
            # MySQL's duplicate-key error does not say which key (its text names an index,
            # not columns): no row under this one means another key clashed, or this row
            # was deleted since. Once, that is taken for the deletion and the insert sent
            # again; twice in a row, it is the other key, a real error.
            if unexplained:
                raise failure
            unexplained = True
        # The conflicting row was deleted between the two statements: insert again.
        races -= 1
        if not races:
            raise RowKeptChangingError(
                f"{shape.table} {shape.unique}: the conflicting row kept being deleted concurrently"
            )
        failure = None
        try:
            sent = yield Stmt(shape.insert, params)
        except Exception as exc:
            if not duplicate_entry(exc):
                raise
            failure = exc
        else:
            made = first_answer(shape, row, sent)
            if made is not None:
                return made


def _mapping(row: Any) -> Mapping[str, Any]:
    return row._mapping  # type: ignore[no-any-return]  # a SQLAlchemy Row, by column name


def _stamped(shape: InsertShape, values: Mapping[str, Any], res: Res) -> Inserted | None:
    """An insert with no RETURNING (MySQL 8): the values sent, and the id the server made."""
    if res.rowcount != 1:
        return None
    row = dict(values)
    if shape.autoincrement is not None and shape.autoincrement not in row and res.lastrowid:
        row[shape.autoincrement] = res.lastrowid
    return Inserted(row)


def conditional(
    update: TableSql | None,
    read: TableSql,
    params: Mapping[str, Any],
    where: Mapping[str, Any],
    applied: Any,
    judge: Callable[[Any], Any],
) -> Op[Any]:
    """Send ``update``; one row changed is ``applied``. Otherwise read the row back: none is
    Missing, and ``judge(row)`` says what else the miss means, or None when the row now
    matches the update's condition (it changed in between) and the update is sent again.
    ``update`` None: no row can meet its condition, so it would miss every time; the read is
    sent alone."""
    for _ in range(RACES):
        if update is not None:
            res = yield Stmt(update, params)
            if res.rowcount:
                return applied
        found = yield Stmt(read, where)
        if not found.rows:
            return Missing()
        answer = judge(found.rows[0])
        if answer is not None:
            return answer
    sent = update or read
    raise RowKeptChangingError(f"{sent.text}: the row kept changing under the statement")


def short_of(amount: Any) -> Callable[[Any], Any]:
    """A decrement's miss: the column holds less than ``amount``, or NULL (no amount at all,
    which compares with nothing)."""

    def judge(row: Any) -> Any:
        current = row[0]
        return Insufficient(current) if current is None or current < amount else None

    return judge


def moved_on(version: int) -> Callable[[Any], Any]:
    """A versioned update's miss: the row's version is another one."""

    def judge(row: Any) -> Any:
        return Conflict(row[0]) if row[0] != version else None

    return judge


def superseded(fence: int) -> Callable[[Any], Any]:
    """A fenced update's miss: the row was written under a newer fence."""

    def judge(row: Any) -> Any:
        return Superseded(row[0]) if row[0] is not None and row[0] > fence else None

    return judge


APPLIED = Applied()
