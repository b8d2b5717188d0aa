"""The version table, ``mideng_schema``: one row per migration applied to a set of tables.

A row names the set (component and main table), the migration's number and title, the mideng
release that applied it and when. A set's version is its newest row; the release beside it is
what an older mideng names when it refuses the set ("install mideng X or later"). Rows are
only ever added by a migration, so the table is also the set's history.

``survey`` is what start-up reads: which of the set's tables exist and which versions the
table holds, in two statements, both plain reads of the catalog and of this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mideng.db.statements import Op, Sql, Stmt
from mideng.schema.tables import DEFAULT_NAMES, TableSet
from mideng.version import __version__

VERSION_TABLE = "mideng_schema"


def ddl(family: str) -> str:
    """The version table, created when missing."""
    if family == "mysql":
        return (
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (component VARCHAR(16) NOT NULL, "
            "name VARCHAR(64) NOT NULL, version INT NOT NULL, title VARCHAR(255) NOT NULL, "
            "mideng VARCHAR(64) NOT NULL, applied_at DOUBLE NOT NULL, "
            "PRIMARY KEY (component, name, version)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "
            "COLLATE=utf8mb4_bin"
        )
    text, number, double = (
        ("text", "integer", "double precision")
        if family == "postgresql"
        else ("TEXT", "INTEGER", "REAL")
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (component {text} NOT NULL, "
        f"name {text} NOT NULL, version {number} NOT NULL, title {text} NOT NULL, "
        f"mideng {text} NOT NULL, applied_at {double} NOT NULL, "
        "PRIMARY KEY (component, name, version))"
    )


def stamp_text(family: str) -> str:
    """The row a migration adds, with ``:binds``; a second insert of it changes nothing. The
    time is the database's, as every time mideng stores."""
    insert = {"postgresql": "INSERT", "mysql": "INSERT IGNORE", "sqlite": "INSERT OR IGNORE"}
    conflict = " ON CONFLICT DO NOTHING" if family == "postgresql" else ""
    return (
        f"{insert[family]} INTO {VERSION_TABLE} (component, name, version, title, mideng, "
        f"applied_at) VALUES (:component, :name, :version, :title, :mideng, {_NOW[family]})"
        f"{conflict}"
    )


def stamp(family: str, tables: TableSet, version: int, title: str) -> Op[None]:
    yield Stmt(Sql(stamp_text(family)), stamp_params(tables, version, title))


def stamp_params(tables: TableSet, version: int, title: str) -> dict[str, object]:
    return {
        "component": tables.component,
        "name": tables.name,
        "version": version,
        "title": title,
        "mideng": __version__,
    }


def unstamp_literal(tables: TableSet, version: int) -> str:
    """The statement removing a version row, with its values written in (names are plain
    identifiers, checked by TableSet)."""
    return (
        f"DELETE FROM {VERSION_TABLE} WHERE component = '{tables.component}' "
        f"AND name = '{tables.name}' AND version = {version}"
    )


def forget(tables: TableSet) -> Op[None]:
    """Drop a set's rows: its tables are gone (dropped by hand), and will be made afresh."""
    yield Stmt(_FORGET, {"component": tables.component, "name": tables.name})


@dataclass(frozen=True)
class Found:
    """What the database holds of one set of tables."""

    tables: TableSet
    #: Which of the set's tables (and the version table) exist.
    present: frozenset[str]
    #: (version, the mideng release that applied it), oldest first.
    applied: tuple[tuple[int, str], ...] = ()

    @property
    def fresh(self) -> bool:
        """The main table is missing: nothing uses the set, it is made from nothing."""
        return self.tables.name not in self.present

    @property
    def versioned(self) -> bool:
        return VERSION_TABLE in self.present

    @property
    def version(self) -> int:
        """The set's version: its newest row; 0 without one (absent, or made before versions)."""
        return self.applied[-1][0] if self.applied and not self.fresh else 0

    @property
    def applied_by(self) -> str:
        """The mideng release that applied the newest version."""
        return self.applied[-1][1] if self.applied else __version__

    @property
    def stale(self) -> bool:
        """Rows left by a set whose tables were dropped."""
        return self.fresh and bool(self.applied)


def survey(family: str, tables: TableSet) -> Op[Found]:
    present = yield from _present(family, (VERSION_TABLE, *tables.tables))
    if VERSION_TABLE not in present:
        return Found(tables, present)
    res = yield Stmt(_READ, {"component": tables.component, "name": tables.name})
    applied = tuple(sorted((int(v), _text(by)) for v, by in res.rows))
    return Found(tables, present, applied)


def known(family: str) -> Op[list[TableSet]]:
    """The sets a database has: those the version table names whose tables are there, and
    the ones under the default names made before versions existed."""
    defaults = [TableSet(component, name) for component, name in DEFAULT_NAMES.items()]
    present = yield from _present(family, (VERSION_TABLE, *(d.name for d in defaults)))
    sets = {d for d in defaults if d.name in present}
    if VERSION_TABLE in present:
        res = yield Stmt(_SETS)
        named = {TableSet(_text(component), _text(name)) for component, name in res.rows}
        there = yield from _present(family, tuple(s.name for s in named))
        sets |= {s for s in named if s.name in there}
    return sorted(sets)


def _present(family: str, names: tuple[str, ...]) -> Op[frozenset[str]]:
    """Which of the tables ``names`` exist (on the search path, in the current database)."""
    if not names:
        return frozenset()
    binds = ", ".join(f":t{n}" for n in range(len(names)))
    params = {f"t{n}": name for n, name in enumerate(names)}
    res = yield Stmt(Sql(_CATALOG[family].format(names=binds)), params)
    return frozenset(_text(row[0]) for row in res.rows)


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode()
    return str(value)


_CATALOG = {
    "postgresql": "SELECT c.relname::text FROM pg_catalog.pg_class c WHERE c.relkind IN "
    "('r', 'p') AND c.relname IN ({names}) AND pg_catalog.pg_table_is_visible(c.oid)",
    "mysql": "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() "
    "AND table_name IN ({names})",
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({names})",
}
_NOW = {
    "postgresql": "date_part('epoch', statement_timestamp())",
    "mysql": "@@timestamp",
    "sqlite": "(julianday('now') - 2440587.5) * 86400.0",
}
_READ = Sql(
    f"SELECT version, mideng FROM {VERSION_TABLE} WHERE component = :component AND name = :name"
)
_SETS = Sql(f"SELECT DISTINCT component, name FROM {VERSION_TABLE}")
_FORGET = Sql(f"DELETE FROM {VERSION_TABLE} WHERE component = :component AND name = :name")
