"""Operator commands over one store's records: look at one, list and settle UNKNOWN ones,
evict one, purge old ones. Read commands take ``--json``; field names are stable (see
docs/cli.md)."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from mideng.cli.common import (
    Duration,
    console,
    emit,
    json_option,
    limit_option,
    opened,
    progress,
    store_option,
)
from mideng.cli.errors import Problems, one_line
from mideng.core.answers import Answer, Changed, Done
from mideng.core.keys import check_scope
from mideng.core.record import Record, Seen, Status
from mideng.core.settle import UNSET
from mideng.errors import CodecError
from mideng.guard.operator import release_record, resolve_record
from mideng.stores import reports
from mideng.stores.reports import when


def describe(record: Record) -> dict[str, Any]:
    """A record as JSON: the fields ``inspect`` and ``unresolved --json`` print."""
    result: Any = None
    if record.result is not None:
        try:
            result = json.loads(record.result) if record.codec == "json" else f"<{record.codec}>"
        except ValueError:
            result = "<unreadable>"
    return {
        "scope": record.scope,
        "key": record.key,
        "status": record.status.value,
        "fence": record.fence,
        "attempts": record.attempts,
        "owner": record.owner,
        "request_id": record.request_id,
        "fingerprint": record.fingerprint,
        "lease_until": when(record.lease_until),
        "created_at": when(record.created_at),
        "updated_at": when(record.updated_at),
        "expires_at": when(record.expires_at),
        "result": result,
        "error": None if record.error is None else json.loads(record.error),
    }


@click.command("inspect")
@store_option
@json_option
@click.argument("scope")
@click.argument("key")
def inspect_record(store_url: str, as_json: bool, scope: str, key: str) -> None:
    """Print one record as JSON (with or without --json); exit 1 when there is none."""
    with opened(store_url) as guard:
        record = guard.get(scope, key)
    if record is None:
        raise Problems(f"no record for {scope}:{key}")
    emit(describe(record))


@click.command()
@store_option
@json_option
@click.option("--scope", default=None, help="Only this scope.")
@limit_option("List at most this many.")
def unresolved(store_url: str, as_json: bool, scope: str | None, limit: int) -> None:
    """List UNKNOWN records and processing ones whose lease ran out; exit 1 if any."""
    with opened(store_url) as guard:
        # Guard.unresolved hands the scope to the store as it is: check it here, so a bad one
        # is a usage error rather than a driver's traceback.
        records = guard.unresolved(None if scope is None else check_scope(scope), limit)
    if as_json:
        emit({"count": len(records), "records": [describe(r) for r in records]})
    else:
        table = Table(title=f"{len(records)} unresolved record(s)")
        for column in ("scope", "key", "status", "fence", "request id", "updated"):
            table.add_column(column)
        for r in records:
            table.add_row(
                r.scope,
                r.key,
                r.status.value,
                str(r.fence),
                r.request_id or "-",
                when(r.updated_at),
            )
        console().print(table)
    if records:
        raise click.exceptions.Exit(1)


def if_seen(f: Any) -> Any:
    """``--if-fence N`` (and ``--if-status``): act only while the record is still at the
    fence (and status) the operator saw; otherwise print ``changed meanwhile: ...``, exit 1."""
    f = click.option(
        "--if-status",
        "if_status",
        type=click.Choice([s.value for s in (Status.UNKNOWN, Status.PROCESSING, Status.FAILED)]),
        default=Status.UNKNOWN.value,
        show_default=True,
        help="With --if-fence: the status seen.",
    )(f)
    return click.option(
        "--if-fence",
        "if_fence",
        type=click.IntRange(min=0),
        default=None,
        help="Only if the record is still at this fence (and --if-status).",
    )(f)


def _seen(if_fence: int | None, if_status: str) -> Seen | None:
    return None if if_fence is None else Seen(Status(if_status), if_fence)


def _changed(scope: str, key: str, answer: Answer[Record], as_json: bool = False) -> None:
    """Exit 1 saying what the record is now, when the action found it changed meanwhile."""
    if isinstance(answer, Done):
        return
    now = answer.now if isinstance(answer, Changed) else None
    if as_json:
        emit({"scope": scope, "key": key, "changed": True, "now": now and describe(now)})
        raise click.exceptions.Exit(1)
    state = "gone" if now is None else f"{now.status.value}, fence {now.fence}"
    raise Problems(f"changed meanwhile: {scope}:{key} is {state}; nothing was done")


@click.command()
@store_option
@click.argument("scope")
@click.argument("key")
@click.option(
    "--result",
    "result_json",
    default=None,
    help="The effect happened: the result to replay, as JSON.",
)
@click.option("--failed", is_flag=True, help="The effect did not happen: let a retry run.")
@if_seen
def resolve(
    store_url: str,
    scope: str,
    key: str,
    result_json: str | None,
    failed: bool,
    if_fence: int | None,
    if_status: str,
) -> None:
    """Settle an UNKNOWN record after asking the provider what happened."""
    if failed == (result_json is not None):
        raise click.UsageError("give exactly one of --result JSON or --failed")
    try:
        result = UNSET if result_json is None else json.loads(result_json)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's stack
        raise click.UsageError(f"--result is not JSON: {exc}") from exc
    seen = _seen(if_fence, if_status)
    with opened(store_url) as guard:
        try:
            if seen is None:
                record = guard.resolve(scope, key, result=result, failed=failed)
            else:
                answer = resolve_record(guard, scope, key, seen, result=result, failed=failed)
                _changed(scope, key, answer)
                assert isinstance(answer, Done)
                record = answer.now
        except CodecError as exc:  # NaN, 1e999: JSON to Python, but not back
            raise click.UsageError(f"--result can't be stored: {one_line(exc)}") from exc
    click.echo(f"{scope}:{key} is now {record.status.value}")


@click.command()
@store_option
@json_option
@click.argument("scope")
@click.argument("key")
@if_seen
@click.confirmation_option(prompt="Evict this record? A retry will run the body again.")
def release(
    store_url: str, as_json: bool, scope: str, key: str, if_fence: int | None, if_status: str
) -> None:
    """Evict one record whatever its state, so the next call runs again; with --if-fence,
    only a stuck one (UNKNOWN, its lease run out, a kept failure) still as seen."""
    seen = _seen(if_fence, if_status)
    with opened(store_url) as guard:
        if seen is None:
            existed = guard.forget(scope, key)
        else:
            answer = release_record(guard, scope, key, seen)
            _changed(scope, key, answer, as_json)
            existed = True
    if as_json:
        emit({"scope": scope, "key": key, "evicted": existed})
    else:
        click.echo(f"{scope}:{key} {'evicted' if existed else 'was not there'}")


@click.command()
@store_option
@json_option
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Delete at most this many.")
@click.option(
    "--older-than",
    "older_than",
    type=Duration(),
    default=None,
    help="Also delete finished records last written longer ago than this (90s, 12h, 7d), "
    "whatever their retention; processing and UNKNOWN records are never touched.",
)
def purge(store_url: str, as_json: bool, limit: int | None, older_than: float | None) -> None:
    """Delete records whose retention ran out (run it on a schedule)."""
    with opened(store_url) as guard:
        store = guard.store
        with progress(as_json, "purging") as bar:
            task = bar.add_task("purge", total=limit)
            total = reports.purge(store, limit, older_than, lambda n: bar.update(task, completed=n))
    if as_json:
        emit(reports.purged(store, total, older_than))
    else:
        click.echo(reports.purged_line(store, total, older_than))


__all__ = ["describe", "inspect_record", "purge", "release", "resolve", "unresolved"]
