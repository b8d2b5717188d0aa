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
)
from mideng.state.statements import InsertShape

# Steps and answers are built as the tuples they are (tuple.__new__), not through the
# NamedTuples' own constructors, a Python-level call each on every statement.
_new = tuple.__new__
# Rounds of statement + read-back before a row that keeps changing is reported as such.
RACES = 5
# MySQL/MariaDB's ER_DUP_ENTRY, from PyMySQL and asyncmy alike.
_DUP_ENTRY = 1062


class RowKeptChangingError(IdempotencyError):
    """The row changed between the conditional statement and its read-back, round after
    round; nothing was written by this call."""


def _duplicate_entry(exc: BaseException) -> bool:
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", exc), "args", ())
    return bool(args) and args[0] == _DUP_ENTRY


def insert_once(shape: InsertShape, values: Mapping[str, Any], dialect: Any) -> Op[Any]:
    """Inserted(row) or Existing(row), never a duplicate-key error: PostgreSQL and SQLite skip
    the duplicate (ON CONFLICT DO NOTHING); on MySQL/MariaDB the plain INSERT's duplicate
    error on this key is caught here (see statements.insert_shape). The table's Python-side
    defaults are computed once, before the first statement: a retry sends the same row."""
    names = shape.names
    params = values if names is None else dict(zip(names, values.values(), strict=True))
    row = values
    if shape.filled:
        params = dict(params)  # never the caller's own mapping
        row = fill(shape.filled, params, values, dialect)
    races = RACES  # counted down rather than a range(): no iterator to make on every call
    while races:
        races -= 1
        failure: BaseException | None = None
        try:
            res = yield _new(Stmt, (shape.insert, params))
        except Exception as exc:
            if not _duplicate_entry(exc):
                raise
            failure = exc
        else:
            if shape.returns:  # the row as stored, typed by the columns: the common case
                rows = res.rows
                if rows:
                    return Inserted(rows[0]._mapping)  # type: ignore[attr-defined]
            else:
                made = _stamped(shape, row, res)
                if made is not None:
                    return made
        key_names = shape.key_names
        if key_names is None:  # the read takes the key's columns from the insert's parameters
            found = yield _new(Stmt, (shape.read, params))
        else:
            key = zip(key_names, (values[name] for name in shape.unique), strict=True)
            found = yield _new(Stmt, (shape.read, dict(key)))
        if found.rows:
            logs.duplicate_insert(shape.table, shape.unique, values)
            return Existing(_mapping(found.rows[0]))
        if failure is not None:
            raise failure  # the duplicate was of another unique key: a real error
        # The conflicting row was deleted between the two statements: insert again.
    raise RowKeptChangingError(
        f"{shape.table} {shape.unique}: the conflicting row kept being deleted concurrently"
    )


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
    update: TableSql,
    read: TableSql,
    params: Mapping[str, Any],
    where: Mapping[str, Any],
    applied: Any,
    judge: Callable[[Any], Any],
) -> Op[Any]:
    """Send ``update``; one row changed is ``applied``. Otherwise read the row back: none is
    Missing, and ``judge(row)`` says what else the miss means, or None when the row now
    matches the update's condition (it changed in between) and the update is sent again."""
    for _ in range(RACES):
        res = yield _new(Stmt, (update, params))
        if res.rowcount:
            return applied
        found = yield _new(Stmt, (read, where))
        if not found.rows:
            return Missing()
        answer = judge(found.rows[0])
        if answer is not None:
            return answer
    raise RowKeptChangingError(f"{update.text}: the row kept changing under the statement")


def short_of(amount: Any) -> Callable[[Any], Any]:
    """A decrement's miss: the column holds less than ``amount``."""

    def judge(row: Any) -> Any:
        return Insufficient(row[0]) if row[0] < amount else None

    return judge


def moved_on(version: int) -> Callable[[Any], Any]:
    """A versioned update's miss: the row's version is another one."""

    def judge(row: Any) -> Any:
        return Conflict(row[0]) if row[0] != version else None

    return judge


APPLIED = Applied()
