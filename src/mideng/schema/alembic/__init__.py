"""Alembic: mideng's migrations as revisions on a branch labelled ``mideng``.

A project whose schema changes go through Alembic includes the branch beside its own::

    # alembic.ini
    [alembic]
    path_separator = space
    version_locations = %(here)s/migrations/versions mideng.schema.alembic:versions
    # mideng's tables, when not the default names (comma-separated; empty for none)
    mideng.tables = mideng_records
    mideng.outboxes = mideng_outbox

    # env.py
    from mideng.schema.alembic import include_object
    context.configure(..., include_object=include_object)
    # or, with tables of other names and a filter of the project's own:
    #   include_object=excluding(tables_of(context.config), also=the_projects_filter)

``alembic upgrade heads`` then runs mideng's revisions too. Each revision is one entry of
``mideng.schema.migrations``, applied with the same changes ``mideng migrate`` runs, on
Alembic's connection and in its transaction (a concurrent index build in an
``autocommit_block``), and it adds the same version row, so a store finds the version it
expects. With ``--sql`` the revisions print the statements instead, in the forms that find
their work done when it is (catalog checks need a connection). The revisions take no lock of
mideng's: one ``alembic upgrade`` at a time is the project's deploy's to ensure.
``include_object`` keeps ``alembic revision --autogenerate`` from proposing to drop mideng's
tables, which the project's metadata does not describe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mideng.db.caller_connection import execute_for
from mideng.db.dialect import kind_of
from mideng.db.drive import drive
from mideng.db.statements import Op, Sql, Stmt
from mideng.schema.migrations import Migration, migration
from mideng.schema.plan import backward, forward
from mideng.schema.tables import DEFAULT_NAMES, OUTBOX, RECORDS, TableSet, family_of
from mideng.schema.versions import VERSION_TABLE, Found, stamp, survey
from mideng.schema.versions import ddl as version_table

BRANCH = "mideng"
#: The alembic.ini options naming mideng's tables (comma-separated; absent: the default name).
OPTIONS = {RECORDS: "mideng.tables", OUTBOX: "mideng.outboxes"}

Include = Callable[[Any, Any, str, bool, Any], bool]


def revision(version: int) -> str:
    """The Alembic revision id of migration ``version``."""
    return f"mideng_{version:04d}"


def tables_of(config: Any | None) -> list[TableSet]:
    """The sets of tables the revisions migrate, as an Alembic ``Config``'s options name them
    (the default names where it names none): for ``excluding`` in a project's env.py."""
    sets: list[TableSet] = []
    for component, option in OPTIONS.items():
        value = None if config is None else config.get_main_option(option)
        names = DEFAULT_NAMES[component] if value is None else value
        sets.extend(TableSet(component, name.strip()) for name in names.split(",") if name.strip())
    return sets


def excluding(sets: Iterable[TableSet], also: Include | None = None) -> Include:
    """An ``include_object`` that leaves out mideng's tables (with their indexes, columns and
    constraints) and the version table; ``also``: the project's own filter, asked after."""
    names = {VERSION_TABLE, *(name for tables in sets for name in tables.tables)}

    def include(obj: Any, name: Any, type_: str, reflected: bool, compare_to: Any) -> bool:
        table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", None)
        if table in names:
            return False
        return also is None or also(obj, name, type_, reflected, compare_to)

    return include


#: ``include_object`` for mideng's tables under their default names.
include_object = excluding(tables_of(None))


def upgrade(version: int) -> None:
    """Apply migration ``version`` to the configured sets: a revision's ``upgrade()``."""
    from alembic import op

    context = op.get_context()
    step = migration(version)
    for tables in tables_of(context.config):
        if context.as_sql:
            _print(context, tables, step)
        else:
            _apply(context, op.get_bind(), tables, step)


def downgrade(version: int) -> None:
    """Take migration ``version`` back: its changes undone in reverse order and its version
    row removed, a revision's ``downgrade()``. Version 1's undo drops mideng's tables."""
    from alembic import op

    context = op.get_context()
    family = family_of(kind_of(context.dialect))
    for tables in tables_of(context.config):
        for texts, outside in backward(family, tables, migration(version)):
            _execute(context, texts, outside)


def _apply(context: Any, connection: Any, tables: TableSet, step: Migration) -> None:
    """On a connection: the catalog checked first, as ``mideng migrate`` does."""
    kind = kind_of(connection.dialect)
    family = family_of(kind)
    execute = execute_for(kind)

    def run(op: Op[Any]) -> Any:
        return drive(op, execute, connection)

    found: Found = run(survey(family, tables))
    if not found.versioned:
        run(_ddl(version_table(family)))
    for change in step.changes(tables, family):
        if change.outside_transaction(found.fresh):
            with context.autocommit_block():
                run(change.apply(found.fresh))
        else:
            run(change.apply(found.fresh))
    run(stamp(family, tables, step.version, step.title))


def _print(context: Any, tables: TableSet, step: Migration) -> None:
    """With ``--sql``: the statements, in their forms for tables that may exist already."""
    for texts, outside in forward(family_of(kind_of(context.dialect)), tables, step):
        _execute(context, texts, outside)


def _execute(context: Any, texts: list[str], outside: bool) -> None:
    """``texts`` through Alembic, outside its transaction when ``outside``."""
    from alembic import op

    if not outside:
        for text in texts:
            op.execute(text)
        return
    with context.autocommit_block():
        for text in texts:
            op.execute(text)


def _ddl(text: str) -> Op[None]:
    yield Stmt(Sql(text))
