"""``mideng migrate``: bring mideng's tables in a database to this mideng's schema version.

It works on sets of tables (mideng.schema): a record table with its steps table (``--table``),
an outbox with its per-key table (``--outbox``). Without either, on every set the version
table knows, and on ``mideng_records`` / ``mideng_outbox`` when they were made before versions
existed (a database with none of them gets the record table). ``--plan`` prints the SQL it
would run and changes nothing; otherwise each set is migrated under its lock, so two deploys
never migrate one set at once: the second waits, then finds nothing to do.

Exit codes: 0 done (or nothing to do); 1 the database failed, a lock wait ran out, or the
tables are newer than this mideng knows; 2 a usage error (a URL, a table name, a version).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from mideng.cli.errors import Problems, named, one_line
from mideng.cli.options import db_option, seconds
from mideng.db.statements import Op
from mideng.errors import IdempotencyError
from mideng.schema.apply import LOCK_TIMEOUT, LOCK_WAIT, Applied, migrate, on_engine
from mideng.schema.plan import Plan, plan
from mideng.schema.tables import TableSet, outbox, records
from mideng.schema.versions import known, survey
from mideng.stores.sql.engines import engine_for


@contextmanager
def reported() -> Iterator[None]:
    """The migration engine's own errors as the command's one line: a URL SQLAlchemy refuses
    is a usage error (exit 2), a database that fails exit 1. mideng's errors go on to the
    ``mideng`` group, which maps every command's (cli.errors)."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        yield
    except IdempotencyError:
        raise  # the group's to map (a ConfigurationError is a ValueError too)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise click.UsageError(one_line(exc)) from exc
    except SQLAlchemyError as exc:
        raise Problems(f"the database failed: {named(getattr(exc, 'orig', None) or exc)}") from exc


def sets_of(engine: Any, tables: tuple[str, ...], outboxes: tuple[str, ...]) -> list[TableSet]:
    """The sets named, or (none named) those the database has."""
    named = [records(name) for name in tables] + [outbox(name) for name in outboxes]
    return named or on_engine(engine, known) or [records()]


def planned(engine: Any, tables: TableSet, target: int | None) -> Plan:
    def surveyed(family: str) -> Op[Plan]:
        found = yield from survey(family, tables)
        return plan(family, found, target)

    return on_engine(engine, surveyed)


def applied(
    engine: Any, tables: TableSet, target: int | None, wait: float, lock_timeout: float
) -> Applied:
    def waiting() -> None:
        click.echo(f"waiting for another migration of the {tables.what} ...", err=True)

    def migrated(family: str) -> Op[Applied]:
        return migrate(
            family, tables, target, wait=wait, lock_timeout=lock_timeout, waiting=waiting
        )

    return on_engine(engine, migrated)


@click.command("migrate")
@db_option("postgresql://…, mysql://…, sqlite:///path.db (SQLAlchemy forms too).")
@click.option(
    "--plan", "show_plan", is_flag=True, help="Print the SQL it would run; change nothing."
)
@click.option("--to", "target", type=click.IntRange(min=1), default=None, help="Stop at version N.")
@click.option("--table", "tables", multiple=True, help="A record table (repeatable).")
@click.option("--outbox", "outboxes", multiple=True, help="An outbox table (repeatable).")
@seconds("--wait", LOCK_WAIT, "Seconds to wait for another migration of the same tables.")
@seconds(
    "--lock-timeout",
    LOCK_TIMEOUT,
    "Seconds a change may wait for a table lock (writers queue behind it meanwhile).",
    zero=False,
)
def migrate_command(
    db_url: str,
    show_plan: bool,
    target: int | None,
    tables: tuple[str, ...],
    outboxes: tuple[str, ...],
    wait: float,
    lock_timeout: float,
) -> None:
    """Create or upgrade mideng's tables: a record table and its steps table, an outbox."""
    with reported():
        engine = engine_for(db_url)
        try:
            for each in sets_of(engine, tables, outboxes):
                if show_plan:
                    click.echo(planned(engine, each, target).script(), nl=False)
                    continue
                done = applied(engine, each, target, wait, lock_timeout)
                click.echo(done.plan.describe())
                for step in done.plan.migrations:
                    click.echo(f"  applied {step.version}: {step.title}")
        finally:
            engine.dispose()
