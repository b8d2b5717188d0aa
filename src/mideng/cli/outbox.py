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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from mideng.cli.common import emit, json_option, limit_option
from mideng.cli.migrate import engine_for, reported
from mideng.cli.options import db_option
from mideng.core.answers import Answer, Changed, Done
from mideng.outbox.schema import DEFAULT_TABLE
from mideng.stores.reports import when

if TYPE_CHECKING:
    from mideng.outbox.dead import OutboxRow

#: A row's ``state`` as the commands print it.
STATES = {0: "pending", 1: "sent", 2: "dead"}

table_option = click.option(
    "--table", default=DEFAULT_TABLE, show_default=True, help="Outbox table."
)


def described(row: OutboxRow, now: float) -> dict[str, Any]:
    """A row as JSON: the fields ``dead --json`` prints."""
    return {
        "id": row.id,
        "destination": row.destination,
        "key": row.key,
        "seq": row.seq,
        "state": STATES.get(row.state, str(row.state)),
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
    from mideng.outbox.dead import dead_rows, requeue, rows_by_id

    if bool(ids) == (destination is not None):
        raise click.UsageError("give row IDs or --destination, not both and not neither")
    with reported():
        engine = engine_for(db_url)
        seen = (
            rows_by_id(engine, list(ids), table=table)
            if ids
            else dead_rows(engine, destination=destination, limit=1_000_000, table=table)
        )
        # What was read is what the requeue is conditional on: a row not dead when read is
        # asked for as seen dead (attempts -1 matches nothing), so it answers Changed.
        asked = _asked(ids, seen)
        answers = requeue(engine, asked, dry_run=dry_run, table=table)
    _show(answers, dry_run, as_json)


def _asked(ids: Sequence[str], seen: Sequence[OutboxRow]) -> list[Any]:
    from mideng.outbox.dead import SeenRow
    from mideng.outbox.schema import DEAD

    by_id = {row.id: row for row in seen}
    order = list(ids) if ids else [row.id for row in seen]
    return [
        SeenRow(row_id, by_id[row_id].attempts)
        if row_id in by_id and by_id[row_id].state == DEAD
        else SeenRow(row_id, -1)
        for row_id in order
    ]


def _outcome(answer: Answer[OutboxRow], dry_run: bool) -> str:
    if isinstance(answer, Done):
        return "would_requeue" if dry_run else "requeued"
    return "changed" if isinstance(answer, Changed) else "gone"


def _show(answers: dict[str, Answer[OutboxRow]], dry_run: bool, as_json: bool) -> None:
    outcomes = {row_id: _outcome(answer, dry_run) for row_id, answer in answers.items()}
    done = sum(1 for outcome in outcomes.values() if outcome in ("requeued", "would_requeue"))
    if as_json:
        emit(
            {
                "dry_run": dry_run,
                "requeued": 0 if dry_run else done,
                "rows": [
                    {
                        "id": row_id,
                        "outcome": outcomes[row_id],
                        "state": None
                        if not isinstance(answer, (Done, Changed))
                        else STATES.get(answer.now.state, str(answer.now.state)),
                        "attempts": answer.now.attempts
                        if isinstance(answer, (Done, Changed))
                        else None,
                    }
                    for row_id, answer in answers.items()
                ],
            }
        )
    else:
        for row_id, answer in answers.items():
            click.echo(_line(row_id, answer, dry_run))
        click.echo(f"{'would requeue' if dry_run else 'requeued'} {done} row(s)")
    if done < len(answers):
        raise click.exceptions.Exit(1)


def _line(row_id: str, answer: Answer[OutboxRow], dry_run: bool) -> str:
    if isinstance(answer, Done):
        return f"{'would requeue' if dry_run else 'requeued'} {row_id}"
    if isinstance(answer, Changed):
        now = answer.now
        state = STATES.get(now.state, str(now.state))
        return f"changed meanwhile: {row_id} is {state}, attempts {now.attempts}"
    return f"changed meanwhile: {row_id} is gone"


__all__ = ["dead", "described", "outbox", "requeue_command"]
