"""``mideng schema``: print the DDL that gives a database mideng's tables at this version, and
optionally apply it (``--apply``: as ``mideng migrate`` does for the same tables)."""

from __future__ import annotations

import click

from mideng.cli.migrate import applied, reported
from mideng.schema.apply import LOCK_TIMEOUT, LOCK_WAIT
from mideng.schema.plan import fresh
from mideng.schema.tables import DEFAULT_NAMES, RECORDS, family_of, outbox, records
from mideng.stores.sql.engines import engine_for


def _kind(url: str) -> str:
    from sqlalchemy.engine import make_url

    backend = make_url(url).get_backend_name()
    return family_of("postgresql" if backend == "postgres" else backend)


@click.command()
@click.option(
    "--url",
    required=True,
    envvar="MIDENG_STORE",
    help="postgresql://…, mysql://… or sqlite:///path.db (or MIDENG_STORE).",
)
@click.option(
    "--table",
    default=DEFAULT_NAMES[RECORDS],
    show_default=True,
    help="The record table (its steps table comes with it).",
)
@click.option("--outbox", "outbox_table", default=None, help="Also an outbox table.")
@click.option(
    "--apply",
    "apply_",
    is_flag=True,
    help="Also create the tables, or upgrade them (as mideng migrate does).",
)
@click.option(
    "--steps",
    is_flag=True,
    hidden=True,
    help="Kept for old scripts: the steps table is part of the record table's schema.",
)
def schema(url: str, table: str, outbox_table: str | None, apply_: bool, steps: bool) -> None:
    """Print the DDL of mideng's tables at this version, for review or a migration tool."""
    with reported():
        kind = _kind(url)
        sets = [records(table)] + ([outbox(outbox_table)] if outbox_table else [])
        for tables in sets:
            click.echo(fresh(tables, kind).script(), nl=False)
        if not apply_:
            return
        engine = engine_for(url)
        try:
            for tables in sets:
                click.echo(
                    applied(engine, tables, None, LOCK_WAIT, LOCK_TIMEOUT).plan.describe(), err=True
                )
        finally:
            engine.dispose()
