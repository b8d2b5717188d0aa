"""``mideng schema``: print (and optionally apply) the record table's DDL for a database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import click

from mideng.stores.registry import open_store
from mideng.stores.sql.schema import DEFAULT_TABLE, script
from mideng.stores.sql.steps import ddl as steps_ddl

if TYPE_CHECKING:
    from mideng.stores.sql import SQLStore
    from mideng.stores.sqlite import SQLiteStore


def _family(url: str) -> str:
    if url.split("://", 1)[0].lower() == "sqlite":
        return "sqlite"
    from mideng.stores.sql.connect import family_of

    return family_of(url)


def _created(url: str, family: str, table: str) -> SQLiteStore | SQLStore:
    """The store on ``url``, its record table created: SQLite creates it on open, the SQL
    store too unless the URL says ``create_schema=0``, which ``--apply`` overrides."""
    options: dict[str, Any] = {} if family == "sqlite" else {"create_schema": True}
    return cast("SQLiteStore | SQLStore", open_store(url, table=table, **options))


@click.command()
@click.option(
    "--url",
    required=True,
    envvar="MIDENG_STORE",
    help="postgresql://…, mysql://… or sqlite:///path.db (or MIDENG_STORE).",
)
@click.option("--table", default=DEFAULT_TABLE, show_default=True, help="Name of the record table.")
@click.option(
    "--apply", "apply_", is_flag=True, help="Also create the table and indexes (idempotent)."
)
@click.option(
    "--steps",
    is_flag=True,
    help="Also the steps table of multi-step operations (created at first use otherwise).",
)
def schema(url: str, table: str, apply_: bool, steps: bool) -> None:
    """Print the DDL of the record table, for review or a migration tool."""
    family = _family(url)
    click.echo(script(family, table), nl=False)
    if steps:
        click.echo("".join(f"{statement};\n" for statement in steps_ddl(family, table)), nl=False)
    if not apply_:
        return
    store = _created(url, family, table)
    try:
        if steps:
            store.create_steps_schema()
    finally:
        store.close()
    click.echo(f"-- applied to {table}", err=True)
