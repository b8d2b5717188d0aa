"""The business tables' statements: built from the caller's SQLAlchemy ``Table``, compiled once
per dialect, kept.

A primitive's statement depends on the table, the dialect and the *names* it is given (which
columns pick the row, which are set), never on the values. So each shape is built once per
connected dialect's speech (mideng.state.compiled: dialects that compile alike share it) and
kept as ``TableSql``s: the dialect's own text where SQLAlchemy has nothing to do per
execution, and a ``text()`` typed by the columns otherwise (bind and result processing stay
the table's; SQLAlchemy only has to look it up, not compile it). A call then builds its
parameters and sends that one statement.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from mideng.db.dialect import is_mysql
from mideng.errors import ConfigurationError
from mideng.state.compiled import TableSql, speech
from mideng.state.defaults import Filled, insert_defaults, update_defaults

try:
    from sqlalchemy import Table
except ImportError as missing:  # pragma: no cover - the extras install it
    raise ImportError(
        "mideng.state needs SQLAlchemy 2: pip install 'mideng[postgresql]' or 'mideng[mysql]'"
    ) from missing


def core_table(table: Any) -> Any:
    """The one check that the primitives were handed a Core ``Table``."""
    if not isinstance(table, Table):
        hint = " (a mapped class's Table is its __table__)" if hasattr(table, "__table__") else ""
        raise ConfigurationError(f"expected a SQLAlchemy Table, got {table!r}{hint}")
    return table


def returns_rows(kind: str) -> bool:
    """INSERT … RETURNING: PostgreSQL, SQLite (3.35+), MariaDB 10.5+; MySQL 8 has none."""
    return kind != "mysql"


# -- the table's keys --------------------------------------------------------------------------
def unique_keys(table: Any) -> list[frozenset[str]]:
    """Every column set the table declares unique: primary key, unique constraints and
    indexes, ``unique=True`` columns."""
    from sqlalchemy import Index, PrimaryKeyConstraint, UniqueConstraint

    keys = [frozenset(c.key for c in table.primary_key.columns)] if table.primary_key else []
    for constraint in table.constraints:
        if isinstance(constraint, (UniqueConstraint, PrimaryKeyConstraint)):
            keys.append(frozenset(c.key for c in constraint.columns))
    keys += [
        frozenset(c.key for c in i.columns)
        for i in table.indexes
        if isinstance(i, Index) and i.unique
    ]
    keys += [frozenset([c.key]) for c in table.columns if c.unique]
    return [k for k in keys if k]


def columns(table: Any, names: Iterable[str], what: str) -> list[Any]:
    found = []
    for name in names:
        if name not in table.c:
            raise ConfigurationError(f"{table.name} has no column {name!r} ({what})")
        found.append(table.c[name])
    return found


def picking_one_row(table: Any, names: Sequence[str]) -> list[Any]:
    """The columns of ``where``, which must include a unique key: a primitive changes one row,
    and a ``where`` that could match several would change them all."""
    cols = columns(table, names, "in where")
    given = frozenset(names)
    if not any(key <= given for key in unique_keys(table)):
        raise ConfigurationError(
            f"where={sorted(given)} does not pick one row of {table.name}: name its primary key "
            "or a unique key (declared on the Table)"
        )
    return cols


class Bound(NamedTuple):
    """Conditions or assignments on columns, and the typed binds they use."""

    parts: list[Any]
    binds: list[Any]
    names: tuple[str, ...]  # bind names, in the order of the columns given


def equal(cols: Sequence[Any], prefix: str) -> Bound:
    from sqlalchemy import bindparam

    names = tuple(f"{prefix}{i}" for i in range(len(cols)))
    binds = [bindparam(n, type_=c.type) for n, c in zip(names, cols, strict=True)]
    return Bound([c == b for c, b in zip(cols, binds, strict=True)], binds, names)


def keyed(cols: Sequence[Any]) -> Bound:
    """Like ``equal``, each bind named by its column's key (see ``_PLAIN``)."""
    from sqlalchemy import bindparam

    binds = [bindparam(c.key, type_=c.type) for c in cols]
    return Bound(
        [c == b for c, b in zip(cols, binds, strict=True)], binds, tuple(b.key for b in binds)
    )


# A key that is a bind name as it stands, in SQLAlchemy's text() and in every driver's style.
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read(table: Any, kind: str, dialect: Any, where: Bound, picked: Sequence[Any]) -> TableSql:
    """The read-back after a miss. On MySQL/MariaDB a locking read: a plain SELECT there reads
    the transaction's snapshot, which may predate the commit that made the statement miss
    (REPEATABLE READ); a locking read sees the row as it is. PostgreSQL's READ COMMITTED and
    SQLite's single writer already read the latest row."""
    from sqlalchemy import select

    query = select(*picked).where(*where.parts)
    if is_mysql(kind):
        query = query.with_for_update(read=True)
    return TableSql(query, dialect, where.binds, picked)


# -- the shapes: one compiled statement pair per (table, kind, names), built on first use ----
# Kept in the Table's own ``info`` dict, so they live exactly as long as the Table does: an
# application that builds Tables on the fly does not pile up statements for dropped ones.
SHAPES = "mideng.state"


def cached(table: Any, key: tuple[Any, ...]) -> Any:
    """The shape kept under ``key``, or None: the caller builds it and ``keep``s it."""
    shapes = table.info.get(SHAPES)
    return None if shapes is None else shapes.get(key)


def keep(table: Any, key: tuple[Any, ...], shape: Any) -> Any:
    table.info.setdefault(SHAPES, {})[key] = shape
    return shape


class InsertShape(NamedTuple):
    table: str  # its name, for the log line and errors
    insert: TableSql
    read: TableSql  # the existing row, by the unique key
    # The insert's binds, one per value given, in order, and the read's, one per unique
    # column; None when they are the columns' own keys: the call's values are then the
    # parameters of both statements as given, with nothing to copy or rename.
    names: tuple[str, ...] | None
    key_names: tuple[str, ...] | None
    unique: tuple[str, ...]
    returns: bool
    autoincrement: str | None
    filled: tuple[Filled, ...]  # Python-side defaults of the columns not given, bound per call


def checked_insert(table: Any, given: tuple[str, ...], unique: tuple[str, ...]) -> list[Any]:
    """The columns of an insert of ``given`` by the key ``unique``, refused unless each is a
    column, the key is among them and the table declares it unique."""
    cols = columns(table, given, "to insert")
    if not unique or not set(unique) <= set(given):
        raise ConfigurationError(
            f"insert_once into {table.name}: unique={unique!r} must name columns given in values"
        )
    if frozenset(unique) not in unique_keys(table):
        raise ConfigurationError(
            f"{sorted(unique)} is not a unique key of {table.name}: declare it on the Table "
            "(UniqueConstraint, unique Index or primary key) as it is in the database"
        )
    return cols


def insert_shape(
    table: Any, kind: str, dialect: Any, given: tuple[str, ...], unique: tuple[str, ...]
) -> InsertShape:
    from sqlalchemy import insert

    cols = checked_insert(table, given, unique)
    defaults = insert_defaults(table, given, dialect)
    # Binds named by the columns' keys where those are plain names that no default's bind
    # takes: a call then hands its values to SQLAlchemy as they are.
    taken = {f.bind for f in defaults.filled}
    own = all(_PLAIN.match(name) and name not in taken for name in given)
    values = keyed(cols) if own else equal(cols, "v")
    target = [table.c[name] for name in unique]
    if kind == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt: Any = pg_insert(table).on_conflict_do_nothing(index_elements=target)
    elif kind == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(table).on_conflict_do_nothing(index_elements=target)
    else:
        # MySQL/MariaDB: a plain INSERT, whose duplicate-key error (1062) the operation turns
        # into Existing after reading the row by this key. Not INSERT IGNORE: IGNORE also
        # turns a NULL into a NOT NULL column, a too-long string or an out-of-range number
        # into a warning and stores a default, a truncation or a clipped value instead. Not
        # ON DUPLICATE KEY UPDATE c = c: it swallows a duplicate of ANY unique key (a clashing
        # primary key would pass as "existing"), and under the CLIENT_FOUND_ROWS flag
        # SQLAlchemy's drivers set, its row count is 1 for an insert and a duplicate alike. A
        # failed statement on InnoDB rolls back only itself: the caller's transaction and
        # everything it wrote before go on, so no savepoint is needed either.
        stmt = insert(table)
    stmt = stmt.values({**dict(zip(cols, values.binds, strict=True)), **defaults.values})
    returns = returns_rows(kind)
    picked = list(table.c)
    if returns:
        stmt = stmt.returning(*picked)
    key = keyed(target) if own else equal(target, "w")
    column = table.autoincrement_column
    return InsertShape(
        table.name,
        TableSql(
            stmt,
            dialect,
            [*values.binds, *defaults.binds],
            picked if returns else (),
            stamp=not returns,
        ),
        read(table, kind, dialect, key, picked),
        None if own else values.names,
        None if own else key.names,
        unique,
        returns,
        None if column is None else column.key,
        defaults.filled,
    )


# insert_once's plans, in the Table's ``info`` beside the shapes: by the key as the call gives it
# (a column name or a tuple of them) followed by the names of the values, so that a call finds
# its plan with one lookup of a tuple it builds from its own arguments.
INSERTS = "mideng.state.insert"


def _nothing() -> None:
    return None


class InsertPlan:
    """An insert_once of these column names by this key, checked against the table once, and
    its shapes, one per speech (mideng.state.compiled), each built on its first call.

    ``last``: the dialect served last (a weak reference) and its shape, replaced as one tuple
    so that no thread pairs one dialect with another's shape; a call on that dialect again,
    the common case, takes the shape from it without asking for the dialect's speech."""

    __slots__ = ("given", "last", "shapes", "table", "unique")

    def __init__(self, table: Any, given: tuple[str, ...], unique: tuple[str, ...]) -> None:
        self.table = table
        self.given = given
        self.unique = unique
        self.shapes: dict[int, InsertShape] = {}
        self.last: tuple[Callable[[], Any], InsertShape | None] = (_nothing, None)

    def shape(self, dialect: Any) -> InsertShape:
        spoken = speech(dialect)
        found = self.shapes.get(spoken.key)
        if found is None:
            built = insert_shape(self.table, spoken.kind, dialect, self.given, self.unique)
            found = self.shapes.setdefault(spoken.key, built)
        self.last = (weakref.ref(dialect), found)
        return found


def insert_plan(table: Any, values: Mapping[str, Any], unique: Any) -> InsertPlan:
    """The plan of an insert of ``values`` by ``unique``: checked and kept on its first call,
    under the key as given (when it is hashable: a list is not) and as a tuple of names."""
    core_table(table)
    given = values_of(table, values, "insert")
    names = (unique,) if isinstance(unique, str) else tuple(unique)
    plans = table.info.setdefault(INSERTS, {})
    plan: InsertPlan | None = plans.get((names, *given))
    if plan is None:
        checked_insert(table, given, names)
        plan = plans.setdefault((names, *given), InsertPlan(table, given, names))
    with contextlib.suppress(TypeError):  # an unhashable key (a list) is found by its tuple
        as_given = (unique, *given)
        plans[as_given] = plan
    return plan


class UpdateShape(NamedTuple):
    update: TableSql | None  # None: no row can meet its condition (see read_shape)
    read: TableSql  # the picked columns of the row, by ``where``
    where_names: tuple[str, ...]
    value_names: tuple[str, ...]
    filled: tuple[Filled, ...]  # Python-side onupdate values of the columns not set, per call


class UpdateOf(NamedTuple):
    """What a primitive's UPDATE is built for: the table, the connection's dialect and the
    statement kind of its speech (mideng.state.compiled), the columns of ``where`` that pick
    the row and the columns the caller sets (``given``)."""

    table: Any
    kind: str
    dialect: Any
    where: tuple[str, ...]
    given: tuple[str, ...]


def update_shape(
    of: UpdateOf,
    *,
    sets: Mapping[Any, Any],
    conds: Sequence[Any],
    binds: Sequence[Any],
    picked: Sequence[Any],
) -> UpdateShape:
    """``UPDATE table SET <given> = :v…, <sets> WHERE <where> = :w… AND <conds>``, and the
    read of ``picked`` by ``where``."""
    from sqlalchemy import update

    table, dialect = of.table, of.dialect
    key = equal(picking_one_row(table, of.where), "w")
    values = _set(table, of.given, sets)
    assigned = {table.c[name]: b for name, b in zip(of.given, values.binds, strict=True)}
    defaults = update_defaults(table, [*assigned, *sets], dialect)
    stmt = update(table).where(*key.parts, *conds).values({**assigned, **sets, **defaults.values})
    return UpdateShape(
        TableSql(stmt, dialect, [*key.binds, *values.binds, *binds, *defaults.binds]),
        read(table, of.kind, dialect, key, picked),
        key.names,
        values.names,
        defaults.filled,
    )


def read_shape(of: UpdateOf, *, sets: Iterable[Any], picked: Sequence[Any]) -> UpdateShape:
    """The shape of an update whose condition no row can meet (an advance to a state no
    transition leads to): no UPDATE, which could only change nothing, but the read of
    ``picked`` by ``where``, which answers alone. ``where``, ``given`` and the columns the
    primitive ``sets`` are checked and named as update_shape checks and names them, so a
    call is refused or bound alike whichever shape it gets."""
    key = equal(picking_one_row(of.table, of.where), "w")
    values = _set(of.table, of.given, sets)
    return UpdateShape(
        None, read(of.table, of.kind, of.dialect, key, picked), key.names, values.names, ()
    )


def own_column(table: Any, column: str, missing: str) -> Any:
    """The column a primitive itself sets, or a ConfigurationError: ``missing`` says which
    column the table lacks."""
    if column not in table.c:
        raise ConfigurationError(f"{table.name} has no {missing}")
    return table.c[column]


def version_bump(col: Any) -> tuple[Any, Any, Any]:
    """A version column's optimistic check: set ``col + 1`` where ``col = :ver``, the version
    the caller read. The new value, the condition and its bind."""
    from sqlalchemy import bindparam, literal_column

    read_version = bindparam("ver", type_=col.type)
    return col + literal_column("1"), col == read_version, read_version


def _set(table: Any, given: tuple[str, ...], sets: Iterable[Any]) -> Bound:
    """The binds of the columns ``given`` to set, none of them a column the primitive
    ``sets`` itself."""
    values = equal(columns(table, given, "to set"), "v") if given else Bound([], [], ())
    clash = [c.key for c in sets if c.key in given]
    if clash:
        raise ConfigurationError(f"{table.name}: {clash} are set by the primitive itself")
    return values


def values_of(table: Any, values: Mapping[str, Any], what: str) -> tuple[str, ...]:
    if not values:
        raise ConfigurationError(f"no columns to {what} in {table.name}")
    return tuple(values)
