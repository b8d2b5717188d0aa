"""insert_once, decrement, update_versioned and update_fenced, with their async twins.

Each builds the operation (mideng.state.ops) for the shape of its arguments — compiled once
per table, dialect and column names (mideng.state.statements) — and hands it to the runner of
its loop (mideng.state.run). The sync and async functions differ only in which runner they
call. The shapes are built by module-level functions, on a miss only: a call makes no
function objects but the one it hands the runner, and insert_once none (it hands the runner
its plan and values, which ``_insert`` turns into the operation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from mideng.db.django_models import is_model
from mideng.db.statements import Op
from mideng.errors import ConfigurationError
from mideng.state.compiled import speech
from mideng.state.defaults import fill
from mideng.state.models import as_written, on_column, on_insert, on_table, refused_async
from mideng.state.ops import APPLIED, conditional, moved_on, short_of, superseded
from mideng.state.ops import insert_once as insert_once_op
from mideng.state.results import (
    Applied,
    Conflict,
    Existing,
    Inserted,
    Insufficient,
    Missing,
    Superseded,
)
from mideng.state.run import Make, arun, run
from mideng.state.statements import (
    INSERTS,
    InsertPlan,
    InsertShape,
    UpdateOf,
    UpdateShape,
    cached,
    core_table,
    insert_plan,
    keep,
    own_column,
    update_shape,
    values_of,
    version_bump,
)

InsertAnswer = Inserted | Existing
DecrementAnswer = Applied | Insufficient | Missing
VersionedAnswer = Applied | Conflict | Missing
FencedAnswer = Applied | Superseded | Missing


def checked_where(table: Any, where: Mapping[str, Any]) -> tuple[str, ...]:
    """The where's column names; a None value would compare NULL = NULL, which matches no row
    and would read as Missing, so it is refused instead."""
    if not isinstance(where, Mapping):
        raise ConfigurationError(
            f"where={where!r} on {table.name}: a mapping of column names to values (a primary "
            "key value alone is taken with a Django model)"
        )
    names = tuple(where)
    if not names or None in where.values():
        values_of(table, where, "pick the row by")
        raise ConfigurationError(f"where={dict(where)!r} on {table.name}: a None never matches")
    return names


# -- insert_once ---------------------------------------------------------------------------
def _planned(table: Any, values: Mapping[str, Any], unique: Any) -> InsertPlan:
    """The call's plan, found with one lookup when a call of this shape came before (anything
    else, from a first call to what is not a Table, goes to statements.insert_plan, which
    checks it), and its key checked for NULLs: a NULL never equals another, so it would never
    be a duplicate."""
    key = (unique, *values)
    try:
        plan: InsertPlan = table.info[INSERTS][key]
    except (AttributeError, KeyError, TypeError):
        plan = insert_plan(table, values, unique)
    for name in plan.unique:
        if values[name] is None:
            raise ConfigurationError(
                f"insert_once into {table.name}: unique column {name!r} needs a value (a NULL "
                "never equals another, so it would never be a duplicate)"
            )
    return plan


def _shape(plan: InsertPlan, dialect: Any) -> InsertShape:
    served, shape = plan.last
    if shape is None or served() is not dialect:
        shape = plan.shape(dialect)
    return shape


def _insert(dialect: Any, plan: InsertPlan, values: Mapping[str, Any]) -> Op[InsertAnswer]:
    return insert_once_op(_shape(plan, dialect), values, dialect)


def insert_once(conn: Any, table: Any, values: Mapping[str, Any], *, unique: Any) -> InsertAnswer:
    """Insert ``values`` into ``table`` unless a row with the same ``unique`` key exists:
    ``Inserted(row)``, or ``Existing(row)`` with the stored row (and a WARNING log line with
    the key). One statement when the row is new; a duplicate never raises and never aborts
    the caller's transaction. A clash on another unique key is still an error. ``table``
    may be a Django model, with a Django connection (mideng.state.models)."""
    if is_model(table):
        on = on_insert(conn, table, values, unique)
        answer = run(on.connection, _insert, _planned(on.table, on.values, on.unique), on.values)
        return as_written(answer, on)
    return run(conn, _insert, _planned(table, values, unique), values)


async def ainsert_once(
    conn: Any, table: Any, values: Mapping[str, Any], *, unique: Any
) -> InsertAnswer:
    if is_model(table):
        raise refused_async(table)
    return await arun(conn, _insert, _planned(table, values, unique), values)


# -- decrement -----------------------------------------------------------------------------
def _decrement(
    table: Any, where: Mapping[str, Any], column: str, amount: Any
) -> Make[DecrementAnswer]:
    core_table(table)
    if type(amount) is not int:
        amount = _amount(table, column, amount)
    if amount <= 0:
        raise ConfigurationError(
            f"decrement of {table.name}.{column} by {amount!r}: the amount must be a positive "
            "number (a zero or negative one would skip the check that keeps it from going "
            "below zero)"
        )
    names = checked_where(table, where)

    def make(dialect: Any) -> Op[DecrementAnswer]:
        spoken = speech(dialect)
        cache_key = ("decrement", spoken.key, names, column)
        shape = cached(table, cache_key) or keep(
            table,
            cache_key,
            _decrement_shape(UpdateOf(table, spoken.kind, dialect, names, ()), column),
        )
        params = dict(zip(shape.where_names, where.values(), strict=True))
        params["n"] = amount
        if shape.filled:
            fill(shape.filled, params, {}, dialect)
        return conditional(shape.update, shape.read, params, params, APPLIED, short_of(amount))

    return make


def _amount(table: Any, column: str, amount: Any) -> Any:
    """A decrement's amount that is not a plain int, checked before anything is sent: a NaN
    compares false with everything (the statement would miss and the read-back could not say
    why), and an integer column would have the database round a fraction (taking nothing, or
    a whole unit, and answering Applied) or reject an infinity, aborting the caller's
    PostgreSQL transaction. A whole number is taken from an integer column as an int, which
    every driver binds."""
    from sqlalchemy import Integer

    col = table.c.get(column)
    whole = col is not None and isinstance(col.type, Integer)
    if isinstance(amount, bool) or not isinstance(amount, (int, Decimal, float)):
        not_a_number, finite = True, False
    elif isinstance(amount, Decimal):
        not_a_number, finite = amount.is_nan(), amount.is_finite()  # comparing a NaN Decimal raises
    elif isinstance(amount, float):
        not_a_number, finite = math.isnan(amount), math.isfinite(amount)
    else:
        not_a_number, finite = False, True
    if not_a_number or (whole and not (finite and amount == int(amount))):
        raise ConfigurationError(
            f"decrement of {table.name}.{column} by {amount!r}: the amount must be a positive "
            f"number{', a whole one for an integer column' if whole else ''}"
        )
    return int(amount) if whole else amount


def _decrement_shape(of: UpdateOf, column: str) -> UpdateShape:
    from sqlalchemy import bindparam

    col = own_column(of.table, column, f"column {column!r} to decrement")
    n = bindparam("n", type_=col.type)
    return update_shape(of, sets={col: col - n}, conds=[col >= n], binds=[n], picked=[col])


def decrement(conn: Any, table: Any, where: Any, column: str, amount: Any) -> DecrementAnswer:
    """``UPDATE table SET column = column - amount WHERE <where> AND column >= amount``:
    ``Applied()``, ``Insufficient(current)`` (nothing taken) or ``Missing()``. Never a
    read-then-write: two callers can never both take the last unit. ``table`` may be a
    Django model, ``where`` then a primary key value too (mideng.state.models)."""
    if is_model(table):
        model = table
        conn, table, where, _ = on_table(conn, model, where, None)
        column = on_column(model, column, "to decrement")
    return run(conn, _decrement(table, where, column, amount))


async def adecrement(
    conn: Any, table: Any, where: Any, column: str, amount: Any
) -> DecrementAnswer:
    if is_model(table):
        raise refused_async(table)
    return await arun(conn, _decrement(table, where, column, amount))


# -- update_versioned and update_fenced: an update guarded by a column of the row's own --------
def _in_table_terms(
    conn: Any, table: Any, where: Any, values: Mapping[str, Any], column: str, role: str
) -> tuple[Any, Any, Any, Mapping[str, Any], str]:
    """A guarded update's arguments, a Django model's put in its table's terms (Django's
    connection, the model's ``Table``, column names for field names); a ``Table``'s as
    they are. ``role``: what ``column`` is, for the error when the model has no such field."""
    if not is_model(table):
        return conn, table, where, values, column
    conn, found, where, given = on_table(conn, table, where, values)
    return conn, found, where, given or {}, on_column(table, column, role)


def _guarded_update(
    table: Any,
    where: Mapping[str, Any],
    values: Mapping[str, Any],
    column: str,
    role: str,
    shape_of: Callable[[UpdateOf, str], UpdateShape],
    bound: tuple[str, int],
    applied: Any,
    judge: Callable[[Any], Any],
) -> Make[Any]:
    """The operation of an update that also sets ``column`` itself (``role`` says how, for
    the error when ``values`` names it), on the condition ``shape_of`` adds, with the one
    bind ``bound`` (its name and value): ``applied`` when a row changed, else what ``judge``
    makes of the row read back."""
    names = checked_where(table, where)
    given = values_of(table, values, "update")
    if column in values:
        raise ConfigurationError(f"{table.name}.{column} is {role}")

    def make(dialect: Any) -> Op[Any]:
        spoken = speech(dialect)
        cache_key = (shape_of, spoken.key, names, given, column)
        shape = cached(table, cache_key) or keep(
            table, cache_key, shape_of(UpdateOf(table, spoken.kind, dialect, names, given), column)
        )
        params = dict(zip(shape.where_names, where.values(), strict=True))
        params.update(zip(shape.value_names, values.values(), strict=True))
        params[bound[0]] = bound[1]
        if shape.filled:
            fill(shape.filled, params, values, dialect)
        return conditional(shape.update, shape.read, params, params, applied, judge)

    return make


def _versioned(
    table: Any, where: Mapping[str, Any], values: Mapping[str, Any], version: int, column: str
) -> Make[VersionedAnswer]:
    core_table(table)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigurationError(f"version={version!r}: the version read before, an int")
    role = "the version column: update_versioned increments it"
    return _guarded_update(
        table,
        where,
        values,
        column,
        role,
        _versioned_shape,
        ("ver", version),
        Applied(version + 1),
        moved_on(version),
    )


def _versioned_shape(of: UpdateOf, column: str) -> UpdateShape:
    col = own_column(of.table, column, f"version column {column!r}")
    bump, check, read_version = version_bump(col)
    return update_shape(of, sets={col: bump}, conds=[check], binds=[read_version], picked=[col])


def update_versioned(
    conn: Any,
    table: Any,
    where: Any,
    values: Mapping[str, Any],
    *,
    version: int,
    column: str = "version",
) -> VersionedAnswer:
    """``UPDATE table SET <values>, version = version + 1 WHERE <where> AND version =
    :version``: ``Applied(new_version)``, ``Conflict(current_version)`` (someone else wrote
    since the caller read ``version``; nothing written) or ``Missing()``. ``table`` may be
    a Django model, ``where`` then a primary key value too (mideng.state.models)."""
    conn, table, where, values, column = _in_table_terms(
        conn, table, where, values, column, "the version column"
    )
    return run(conn, _versioned(table, where, values, version, column))


async def aupdate_versioned(
    conn: Any,
    table: Any,
    where: Any,
    values: Mapping[str, Any],
    *,
    version: int,
    column: str = "version",
) -> VersionedAnswer:
    if is_model(table):
        raise refused_async(table)
    return await arun(conn, _versioned(table, where, values, version, column))


def _fenced(
    table: Any, where: Mapping[str, Any], values: Mapping[str, Any], fence: int, column: str
) -> Make[FencedAnswer]:
    core_table(table)
    if isinstance(fence, bool) or not isinstance(fence, int) or fence < 1:
        raise ConfigurationError(f"fence={fence!r}: the claim's fence, an int >= 1")
    role = "the fence column: update_fenced writes the fence there"
    return _guarded_update(
        table,
        where,
        values,
        column,
        role,
        _fenced_shape,
        ("fence", fence),
        APPLIED,
        superseded(fence),
    )


def _fenced_shape(of: UpdateOf, column: str) -> UpdateShape:
    from sqlalchemy import bindparam, or_

    col = own_column(of.table, column, f"fence column {column!r}")
    fence = bindparam("fence", type_=col.type)
    # <=, not <: the holder may write its row more than once; only an older claim is refused.
    not_newer = or_(col.is_(None), col <= fence)
    return update_shape(of, sets={col: fence}, conds=[not_newer], binds=[fence], picked=[col])


def update_fenced(
    conn: Any,
    table: Any,
    where: Any,
    values: Mapping[str, Any],
    *,
    fence: int,
    column: str = "fence",
) -> FencedAnswer:
    """``UPDATE table SET <values>, fence = :fence WHERE <where> AND (fence IS NULL OR fence
    <= :fence)``: the fencing token check, made by the table itself. ``Applied()``,
    ``Superseded(current_fence)`` (a newer claim wrote the row: the caller's claim was taken
    over, and its late write changed nothing) or ``Missing()``. ``fence`` is the claim's
    (a scheduled job's ``context.fence``, a guarded call's ticket). ``table`` may be a Django
    model, ``where`` then a primary key value too (mideng.state.models)."""
    conn, table, where, values, column = _in_table_terms(
        conn, table, where, values, column, "the fence column"
    )
    return run(conn, _fenced(table, where, values, fence, column))


async def aupdate_fenced(
    conn: Any,
    table: Any,
    where: Any,
    values: Mapping[str, Any],
    *,
    fence: int,
    column: str = "fence",
) -> FencedAnswer:
    if is_model(table):
        raise refused_async(table)
    return await arun(conn, _fenced(table, where, values, fence, column))
