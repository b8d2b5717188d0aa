"""``mideng outbox``: the outbox's dead rows, listed and requeued.

``dead`` lists rows whose publishes failed ``--max-attempts`` times (exit 1 if any, for a
cron job that alerts); ``requeue`` puts dead rows back to pending at their place in their
key, by id or every dead row of a ``--destination``, each only while it is still dead after
the attempts read just before (mideng.outbox.dead): one another operator or a relay changed
meanwhile is reported, ``changed meanwhile: ...``, and the command exits 1. ``--dry-run``
says which rows would be requeued and changes nothing. JSON field names are stable (see
docs/cli.md).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from mideng.cli.common import emit, json_option, limit_option
from mideng.cli.migrate import reported
from mideng.cli.options import db_option
from mideng.outbox.schema import DEFAULT_TABLE
from mideng.stores.reports import when
from mideng.stores.sql.engines import engine_for

if TYPE_CHECKING:
    from mideng.outbox.dead import OutboxRow

table_option = click.option(
    "--table", default=DEFAULT_TABLE, show_default=True, help="Outbox table."
)


def described(row: OutboxRow, now: float) -> dict[str, Any]:
    """A row as JSON: the fields ``dead --json`` prints."""
    from mideng.outbox.dead import state_name

    return {
        "id": row.id,
        "destination": row.destination,
        "key": row.key,
        "seq": row.seq,
        "state": state_name(row.state),
        "attempts": row.attempts,
        "error": row.error,
        "created_at": when(row.created_at),
        "age_seconds": round(row.age(now), 3),
    }


@click.group("outbox")
def outbox() -> None:
    """The outbox's dead rows: list them, requeue them."""


@outbox.command("dead")
@db_option("Database URL: postgresql://…, mysql://…, sqlite:///… (SQLAlchemy forms too).")
@table_option
@json_option
@click.option("--destination", default=None, help="Only rows to this destination.")
@limit_option("List at most this many.")
def dead(db_url: str, table: str, as_json: bool, destination: str | None, limit: int) -> None:
    """List dead rows, oldest first; exit 1 if there is one."""
    from mideng.outbox.dead import dead_rows

    with reported():
        rows = dead_rows(engine_for(db_url), destination=destination, limit=limit, table=table)
    now = time.time()
    if as_json:
        emit({"count": len(rows), "rows": [described(row, now) for row in rows]})
    else:
        click.echo(f"{len(rows)} dead row(s)")
        for row in rows:
            error = (row.error or "-").replace("\n", " ")[:120]
            click.echo(
                f"{row.id}  {row.destination}  key={row.key or '-'}  "
                f"attempts={row.attempts}  age={row.age(now):.0f}s  {error}"
            )
    if rows:
        raise click.exceptions.Exit(1)


@outbox.command("requeue")
@db_option("Database URL: postgresql://…, mysql://…, sqlite:///… (SQLAlchemy forms too).")
@table_option
@json_option
@click.argument("ids", nargs=-1)
@click.option("--destination", default=None, help="Every dead row to this destination.")
@click.option("--dry-run", is_flag=True, help="Say which rows would be requeued; change nothing.")
def requeue_command(
    db_url: str,
    table: str,
    as_json: bool,
    ids: tuple[str, ...],
    destination: str | None,
    dry_run: bool,
) -> None:
    """Put dead rows back to pending (by ID, or every dead row of --destination); exit 1 if
    one changed meanwhile."""
    from mideng.outbox import dead as rows

    if bool(ids) == (destination is not None):
        raise click.UsageError("give row IDs or --destination, not both and not neither")
    with reported():
        answers = rows.requeue_as_read(
            engine_for(db_url), ids, destination, dry_run=dry_run, table=table
        )
    if as_json:
        emit(rows.report(answers, dry_run))
    else:
        for text in rows.lines(answers, dry_run):
            click.echo(text)
    if not rows.all_done(answers):
        raise click.exceptions.Exit(1)


__all__ = ["dead", "described", "outbox", "requeue_command"]
