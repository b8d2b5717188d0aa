"""Django: mideng's migrations as Django migration operations, from the same list.

A Django app that keeps mideng's tables (mideng's own app, or a project's) has one migration
per entry of ``mideng.schema.migrations``, each a few lines::

    from django.db import migrations
    from mideng.schema import django as mideng_schema

    class Migration(migrations.Migration):
        atomic = mideng_schema.atomic(2)       # False: PostgreSQL builds the index concurrently
        dependencies = [("mideng", "0001_tables")]
        operations = [mideng_schema.operation(2)]

``operation`` runs ``statements(version, connection.vendor)`` through the schema editor: the
version table, the migration's changes in their forms for tables that may already exist (so a
database that had mideng's tables before the app finds them there), and the version row a
store checks at start-up. Django records what it applied; mideng's lock is not taken, as with
any Django migration. ``tables`` / ``outboxes``: the sets' names, when not the defaults;
``using``: the one database alias it runs on (others are passed over), when not every one
``migrate`` is run on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mideng.schema.migrations import Migration, migration
from mideng.schema.plan import Texts, backward, forward
from mideng.schema.tables import DEFAULT_NAMES, OUTBOX, RECORDS, TableSet, family_of

#: ``forward`` or ``backward``: a migration's statements on a set, either way.
Way = Callable[[str, TableSet, Migration], Texts]

_DEFAULT_TABLES = (DEFAULT_NAMES[RECORDS],)
_DEFAULT_OUTBOXES = (DEFAULT_NAMES[OUTBOX],)


def sets(tables: Sequence[str], outboxes: Sequence[str]) -> list[TableSet]:
    return [TableSet(RECORDS, name) for name in tables] + [
        TableSet(OUTBOX, name) for name in outboxes
    ]


def statements(
    version: int,
    vendor: str,
    *,
    tables: Sequence[str] = _DEFAULT_TABLES,
    outboxes: Sequence[str] = _DEFAULT_OUTBOXES,
) -> list[str]:
    """Migration ``version``'s SQL for a Django connection's ``vendor`` (``postgresql``,
    ``mysql``, ``sqlite``), in order."""
    return _texts(forward, version, vendor, sets(tables, outboxes))


def undo(
    version: int,
    vendor: str,
    *,
    tables: Sequence[str] = _DEFAULT_TABLES,
    outboxes: Sequence[str] = _DEFAULT_OUTBOXES,
) -> list[str]:
    """What takes migration ``version`` back, in order."""
    return _texts(backward, version, vendor, sets(tables, outboxes))


def _texts(way: Way, version: int, vendor: str, each: list[TableSet]) -> list[str]:
    family, step = family_of(vendor), migration(version)
    return [text for tables in each for texts, _ in way(family, tables, step) for text in texts]


def atomic(version: int) -> bool:
    """Whether a Django migration of ``version`` may run in one transaction: not when it
    builds an index on PostgreSQL, which is concurrent, outside any transaction."""
    step = migration(version)
    return not any(
        outside
        for each in sets(_DEFAULT_TABLES, _DEFAULT_OUTBOXES)
        for _, outside in forward("postgresql", each, step)
    )


def operation(
    version: int,
    *,
    tables: Sequence[str] = _DEFAULT_TABLES,
    outboxes: Sequence[str] = _DEFAULT_OUTBOXES,
    using: str | None = None,
) -> Any:
    """The Django operation applying migration ``version`` (a ``RunPython``; its reverse
    takes the migration back, version 1's dropping mideng's tables)."""
    from django.db import migrations

    def run(texts: Callable[..., list[str]], schema_editor: Any) -> None:
        connection = schema_editor.connection
        if using is not None and connection.alias != using:
            return  # mideng's tables live in another of the project's databases
        for text in texts(version, connection.vendor, tables=tables, outboxes=outboxes):
            schema_editor.execute(text, params=None)

    def forwards(apps: Any, schema_editor: Any) -> None:
        run(statements, schema_editor)

    def backwards(apps: Any, schema_editor: Any) -> None:
        run(undo, schema_editor)

    return migrations.RunPython(forwards, backwards)
