"""What a migration of one set of tables would run, worked out from what the database holds.

A plan is pure: ``mideng migrate --plan`` prints one without touching the tables, ``mideng
schema`` prints the one a fresh database gets, and ``migrate`` applies the one it works out
again under the lock. It refuses what no migration of this mideng can do: a set at a version
newer than it knows (naming the release to install), and going back to an older version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mideng.errors import ConfigurationError, SchemaVersionError
from mideng.schema.changes import Change
from mideng.schema.migrations import CURRENT, Migration, between, migration
from mideng.schema.tables import TableSet, family_of
from mideng.schema.versions import Found, stamp_params, stamp_text, unstamp_literal
from mideng.schema.versions import ddl as version_table
from mideng.version import __version__


def refuse_newer(found: Found) -> None:
    """A set at a version this mideng does not know: an older release must not write it."""
    if found.version > CURRENT:
        raise SchemaVersionError(
            f"the {found.tables.what} is at schema version {found.version}, newer than this "
            f"mideng ({__version__}) knows (up to {CURRENT}): install mideng "
            f"{found.applied_by} or later"
        )


@dataclass(frozen=True)
class Plan:
    """The migrations that take one set from what was found to ``target``."""

    family: str
    found: Found
    target: int
    migrations: tuple[Migration, ...]

    @property
    def empty(self) -> bool:
        return not self.migrations

    @property
    def fresh(self) -> bool:
        return self.found.fresh

    def changes(self, step: Migration) -> list[Change]:
        return step.changes(self.found.tables, self.family)

    def statements(self) -> list[str]:
        """Everything it runs, as text (catalog checks aside)."""
        texts = [] if self.found.versioned or self.empty else [version_table(self.family)]
        for step in self.migrations:
            for change in self.changes(step):
                texts.extend(change.statements(self.fresh))
            texts.append(self.stamp(step))
        return texts

    def stamp(self, step: Migration) -> str:
        return stamp_literal(self.family, self.found.tables, step)

    def describe(self) -> str:
        """Where the set is and where it goes, in one line."""
        tables, found = self.found.tables, self.found
        if found.fresh:
            where = "absent"
        elif found.version == 0:
            where = "made before schema versions (taken as version 0)"
        else:
            where = f"at version {found.version}"
        if self.empty:
            return f"{tables.what}: {where}, nothing to do"
        return f"{tables.what}: {where}, to version {self.target}"

    def script(self) -> str:
        """The plan as SQL a person can read or pipe into psql / mysql / sqlite3."""
        lines = [f"-- {self.describe()} ({self.family})"]
        if not self.found.versioned and not self.empty:
            lines.append(f"{version_table(self.family)};")
        for step in self.migrations:
            lines.append(f"-- {step.version}: {step.title}")
            for change in self.changes(step):
                note = change.note(self.fresh)
                if note:
                    lines.append(f"-- not online: {note}")
                if change.outside_transaction(self.fresh):
                    lines.append("-- outside a transaction:")
                lines.extend(f"{text};" for text in change.statements(self.fresh))
            lines.append(f"{self.stamp(step)};")
        return "\n".join(lines) + "\n"


def plan(family: str, found: Found, target: int | None = None) -> Plan:
    """The plan for ``found``, to ``target`` (default: this mideng's version)."""
    refuse_newer(found)
    goal = CURRENT if target is None else migration(target).version
    if goal < found.version:
        raise ConfigurationError(
            f"the {found.tables.what} is at schema version {found.version}; migrations only go "
            f"forward (asked for {goal})"
        )
    return Plan(family, found, goal, tuple(between(found.version, goal)))


_BIND = re.compile(r":(\w+)")


def stamp_literal(family: str, tables: TableSet, step: Migration) -> str:
    """The version row a migration adds, with its values written in."""
    params = stamp_params(tables, step.version, step.title)
    return _BIND.sub(lambda bind: _literal(params[bind[1]]), stamp_text(family))


#: Statements to run in order, and whether they must run outside a transaction.
Texts = list[tuple[list[str], bool]]


def forward(family: str, tables: TableSet, step: Migration) -> Texts:
    """Migration ``step`` on ``tables`` as text, with no catalog at hand (a Django migration,
    Alembic's ``--sql``): the version table, each change in its form for tables that may
    exist already, the version row."""
    texts: Texts = [([version_table(family)], False)]
    for change in step.changes(tables, family):
        texts.append((change.statements(False), change.outside_transaction(False)))
    texts.append(([stamp_literal(family, tables, step)], False))
    return texts


def backward(family: str, tables: TableSet, step: Migration) -> Texts:
    """What takes ``step`` back from ``tables``: its changes undone in reverse order (an
    index dropped as it was built), its version row deleted."""
    texts: Texts = [
        (change.undo(), change.outside_transaction(False))
        for change in reversed(step.changes(tables, family))
    ]
    texts.append(([unstamp_literal(tables, step.version)], False))
    return texts


def fresh(tables: TableSet, kind: str) -> Plan:
    """What a database without ``tables`` gets: every migration, from nothing."""
    return plan(family_of(kind), Found(tables, frozenset()))


def _literal(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)
