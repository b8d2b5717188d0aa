"""The pieces a migration is made of, each safe to run again and each as online as its
database allows.

A migration runs on tables that may be in use: a deploy upgrades the schema while the previous
release still claims records. So a change that finds its work done does nothing (not even take
a lock), and a change to an existing table takes the database's online path: PostgreSQL builds
an index ``CONCURRENTLY`` (outside a transaction; writers go on), MySQL/MariaDB with
``ALGORITHM=INPLACE, LOCK=NONE`` (writers go on; a metadata lock for a moment at the start and
the end). ``fresh``: the tables were absent when the migration began, so nobody uses them yet
and the plain statement, inside the migration's transaction, is the quicker one.

Each change gives its statements as text (what a plan prints, what a Django migration runs)
and as an operation (what ``mideng migrate`` runs, checking the catalog first where the text
alone could not be run twice).
"""

from __future__ import annotations

from dataclasses import dataclass

from mideng.db.statements import Op, Sql, Stmt


class Change:
    """One idempotent piece of a migration, for one family."""

    def statements(self, fresh: bool) -> list[str]:
        """The DDL, as text."""
        raise NotImplementedError

    def apply(self, fresh: bool) -> Op[None]:
        """The DDL as an operation; by default each statement of ``statements``."""
        for text in self.statements(fresh):
            yield Stmt(Sql(text))

    def outside_transaction(self, fresh: bool) -> bool:
        """Whether it must run outside any transaction (PostgreSQL's concurrent index)."""
        return False

    def note(self, fresh: bool) -> str | None:
        """What it makes others wait for, where it is not online; None when it is."""
        return None

    def undo(self) -> list[str]:
        """What takes it back (an Alembic downgrade)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Create(Change):
    """A table created when missing (``IF NOT EXISTS``): on an existing one it does nothing.
    ``table``: its name, for the undo."""

    text: str
    table: str

    def statements(self, fresh: bool) -> list[str]:
        return [self.text]

    def undo(self) -> list[str]:
        return [f"DROP TABLE IF EXISTS {self.table}"]


@dataclass(frozen=True)
class Index(Change):
    """A secondary index: ``columns`` as the family writes them, ``where`` a partial index's
    predicate (PostgreSQL and SQLite)."""

    family: str
    table: str
    name: str
    columns: str
    where: str | None = None
    unique: bool = False

    def statements(self, fresh: bool) -> list[str]:
        kind = "UNIQUE INDEX" if self.unique else "INDEX"
        where = f" WHERE {self.where}" if self.where else ""
        if self.family == "mysql":
            online = "" if fresh else ", ALGORITHM=INPLACE, LOCK=NONE"
            return [f"ALTER TABLE {self.table} ADD {kind} {self.name} ({self.columns}){online}"]
        concurrently = " CONCURRENTLY" if self.outside_transaction(fresh) else ""
        return [
            f"CREATE {kind}{concurrently} IF NOT EXISTS {self.name} ON {self.table} "
            f"({self.columns}){where}"
        ]

    def apply(self, fresh: bool) -> Op[None]:
        if self.family == "mysql":
            # MySQL 8 has no ADD INDEX IF NOT EXISTS: the catalog says whether it is there.
            res = yield Stmt(_MYSQL_INDEX, {"table": self.table, "name": self.name})
            if res.rows:
                return
        elif self.outside_transaction(fresh):
            res = yield Stmt(_POSTGRESQL_INDEX, {"name": self.name})
            if res.rows and res.rows[0][0]:
                return
            if res.rows:
                # A concurrent build that failed or was cancelled leaves an invalid index,
                # which IF NOT EXISTS would take for a built one: drop it and build again.
                yield Stmt(Sql(f"DROP INDEX CONCURRENTLY IF EXISTS {self.name}"))
        yield from super().apply(fresh)

    def outside_transaction(self, fresh: bool) -> bool:
        return self.family == "postgresql" and not fresh

    def note(self, fresh: bool) -> str | None:
        if self.family == "sqlite" and not fresh:
            return "if it is missing, writers wait while it is built (SQLite has one writer)"
        return None

    def undo(self) -> list[str]:
        if self.family == "mysql":
            return [f"ALTER TABLE {self.table} DROP INDEX {self.name}"]
        concurrently = " CONCURRENTLY" if self.family == "postgresql" else ""
        return [f"DROP INDEX{concurrently} IF EXISTS {self.name}"]


@dataclass(frozen=True)
class RowCount(Change):
    """A SQLite table's rows counted as they are written: a one-row table ``name`` kept by an
    insert and a delete trigger. Each statement is safe to run again: the rows are counted
    afresh after the triggers exist (a table dropped by hand and made again starts from its
    own count), so a row written meanwhile is in it once (SQLite has one writer: the count
    and a write never interleave)."""

    table: str
    name: str

    def statements(self, fresh: bool) -> list[str]:
        t, n = self.table, self.name
        return [
            f"CREATE TABLE IF NOT EXISTS {n} (one INTEGER PRIMARY KEY CHECK (one = 1), "
            "n INTEGER NOT NULL)",
            f"CREATE TRIGGER IF NOT EXISTS {n}_in AFTER INSERT ON {t} "
            f"BEGIN UPDATE {n} SET n = n + 1; END",
            f"CREATE TRIGGER IF NOT EXISTS {n}_out AFTER DELETE ON {t} "
            f"BEGIN UPDATE {n} SET n = n - 1; END",
            f"INSERT INTO {n} (one, n) VALUES (1, (SELECT count(*) FROM {t})) "
            "ON CONFLICT (one) DO UPDATE SET n = excluded.n",
        ]

    def note(self, fresh: bool) -> str | None:
        if fresh:
            return None
        return "writers wait while the table's rows are counted once (SQLite has one writer)"

    def undo(self) -> list[str]:
        n = self.name
        return [
            f"DROP TRIGGER IF EXISTS {n}_in",
            f"DROP TRIGGER IF EXISTS {n}_out",
            f"DROP TABLE IF EXISTS {n}",
        ]


@dataclass(frozen=True)
class Trigger(Change):
    """A PostgreSQL trigger with its function: made only when the trigger is missing, in one
    transaction, since dropping and making a trigger locks its table against writers."""

    table: str
    name: str
    texts: tuple[str, ...]

    def statements(self, fresh: bool) -> list[str]:
        return list(self.texts)

    def apply(self, fresh: bool) -> Op[None]:
        if not fresh:
            res = yield Stmt(_POSTGRESQL_TRIGGER, {"name": self.name, "table": self.table})
            if res.rows:
                return
        yield from super().apply(fresh)

    def note(self, fresh: bool) -> str | None:
        if fresh:
            return None
        return f"if the trigger is missing, writers to {self.table} wait a moment"

    def undo(self) -> list[str]:
        return [
            f"DROP TRIGGER IF EXISTS {self.name} ON {self.table}",
            f"DROP FUNCTION IF EXISTS {self.name}()",
        ]


_MYSQL_INDEX = Sql(
    "SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() "
    "AND table_name = :table AND index_name = :name LIMIT 1"
)
_POSTGRESQL_INDEX = Sql(
    "SELECT i.indisvalid FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c "
    "ON c.oid = i.indexrelid WHERE c.relname = :name AND pg_catalog.pg_table_is_visible(c.oid)"
)
_POSTGRESQL_TRIGGER = Sql(
    "SELECT 1 FROM pg_catalog.pg_trigger WHERE tgname = :name "
    "AND tgrelid = to_regclass(CAST(:table AS text))"
)
