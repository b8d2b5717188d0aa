"""The ordered list of migrations: the schema at version N is migrations 1..N applied in order.

Version 1 is the tables as mideng 0.1.0 made them, before versions existed, statement for
statement; on such tables it finds everything there and does nothing, so an unversioned
database is upgraded by the same list as any other. One number counts for every component: a
migration that changes nothing of a component still moves its version, so "version 2" means
the same release whichever tables it is said of.

A new migration is a new entry here: its changes per component (``changes.Change``s, each
idempotent and online where the database allows), and an Alembic revision file that names its
number (``mideng.schema.alembic``; a test fails while one is missing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mideng.errors import ConfigurationError
from mideng.schema.audit import outbox_audit, records_audit
from mideng.schema.changes import Change
from mideng.schema.outbox import tables as outbox_tables
from mideng.schema.records import operations_begun, unresolved_counted
from mideng.schema.records import tables as record_tables
from mideng.schema.tables import OUTBOX, RECORDS, TableSet

#: (family, main table) -> the changes of one component.
Part = Callable[[str, str], list[Change]]


@dataclass(frozen=True)
class Migration:
    version: int
    title: str
    parts: dict[str, Part] = field(default_factory=dict)

    def changes(self, tables: TableSet, family: str) -> list[Change]:
        """What it changes of ``tables`` on ``family`` (nothing: only the version moves)."""
        part = self.parts.get(tables.component)
        return [] if part is None else part(family, tables.name)


MIGRATIONS = (
    Migration(
        1,
        "the record, steps and outbox tables of mideng 0.1.0",
        {RECORDS: record_tables, OUTBOX: outbox_tables},
    ),
    Migration(
        2,
        "an index of operations by the time they began, on the steps table",
        {RECORDS: operations_begun},
    ),
    Migration(
        3,
        "the processing, UNKNOWN and failed records counted through an index",
        {RECORDS: unresolved_counted},
    ),
    Migration(
        4,
        "the audit tables of operators' actions, and indexes by request id",
        {RECORDS: records_audit, OUTBOX: outbox_audit},
    ),
)
#: The version this mideng makes and expects.
CURRENT = MIGRATIONS[-1].version


def migration(version: int) -> Migration:
    if not 1 <= version <= CURRENT:
        raise ConfigurationError(
            f"no schema version {version}: this mideng knows versions 1 to {CURRENT}"
        )
    return MIGRATIONS[version - 1]


def between(start: int, target: int) -> list[Migration]:
    """The migrations that take a schema at ``start`` to ``target`` (none when it is there)."""
    return [m for m in MIGRATIONS if start < m.version <= target]
