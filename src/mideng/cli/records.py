"""Operator commands over one store: look at a record, settle UNKNOWN ones, evict, purge."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mideng.core.keys import check_scope
from mideng.core.record import Record
from mideng.errors import IdempotencyError
from mideng.guard import Guard
from mideng.guard.default import DEFAULT_STORE
from mideng.stores.registry import open_store

store_option = click.option(
    "--store",
    "store_url",
    envvar="MIDENG_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    help="Store URL (or the MIDENG_STORE environment variable).",
)


def _guard(store_url: str) -> Guard:
    try:
        return Guard(open_store(store_url))
    except IdempotencyError as exc:
        raise click.ClickException(str(exc)) from exc


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="milliseconds")


def _describe(record: Record) -> dict[str, Any]:
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
        "lease_until": _when(record.lease_until),
        "created_at": _when(record.created_at),
        "updated_at": _when(record.updated_at),
        "expires_at": _when(record.expires_at),
        "result": result,
        "error": None if record.error is None else json.loads(record.error),
    }


@click.command("inspect")
@store_option
@click.argument("scope")
@click.argument("key")
def inspect_record(store_url: str, scope: str, key: str) -> None:
    """Print one record as JSON."""
    record = _guard_get(store_url, scope, key)
    if record is None:
        raise click.ClickException(f"no record for {scope}:{key}")
    click.echo(json.dumps(_describe(record), indent=2, ensure_ascii=False))


def _guard_get(store_url: str, scope: str, key: str) -> Record | None:
    guard = _guard(store_url)
    try:
        return guard.get(scope, key)
    except IdempotencyError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        guard.close()


@click.command()
@store_option
@click.option("--scope", default=None, help="Only this scope.")
@click.option("--limit", default=100, show_default=True)
def unresolved(store_url: str, scope: str | None, limit: int) -> None:
    """List UNKNOWN records and processing ones whose lease ran out."""
    guard = _guard(store_url)
    try:
        # Guard.unresolved hands the scope to the store as it is: check it here, so a bad one
        # is a usage error rather than a driver's traceback.
        records = guard.unresolved(None if scope is None else check_scope(scope), limit)
    except IdempotencyError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        guard.close()
    table = Table(title=f"{len(records)} unresolved record(s)")
    for column in ("scope", "key", "status", "fence", "request id", "updated"):
        table.add_column(column)
    for r in records:
        table.add_row(
            r.scope, r.key, r.status.value, str(r.fence), r.request_id or "-", _when(r.updated_at)
        )
    Console().print(table)


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
def resolve(store_url: str, scope: str, key: str, result_json: str | None, failed: bool) -> None:
    """Settle an UNKNOWN record after asking the provider what happened."""
    if failed == (result_json is not None):
        raise click.UsageError("give exactly one of --result JSON or --failed")
    guard = _guard(store_url)
    try:
        if failed:
            record = guard.resolve(scope, key, failed=True)
        else:
            assert result_json is not None
            record = guard.resolve(scope, key, result=json.loads(result_json))
    except (IdempotencyError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        guard.close()
    click.echo(f"{scope}:{key} is now {record.status.value}")


@click.command()
@store_option
@click.argument("scope")
@click.argument("key")
@click.confirmation_option(prompt="Evict this record? A retry will run the body again.")
def release(store_url: str, scope: str, key: str) -> None:
    """Evict one record whatever its state, so the next call runs again."""
    guard = _guard(store_url)
    try:
        existed = guard.forget(scope, key)
    except IdempotencyError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        guard.close()
    click.echo(f"{scope}:{key} {'evicted' if existed else 'was not there'}")


@click.command()
@store_option
@click.option("--limit", type=int, default=None, help="Delete at most this many.")
def purge(store_url: str, limit: int | None) -> None:
    """Delete records whose retention ran out (run it on a schedule)."""
    guard = _guard(store_url)
    try:
        count = guard.purge(limit)
    finally:
        guard.close()
    click.echo(
        f"purged {count} expired record(s)"
        + (" (this store expires records itself)" if guard.store.self_expiring else "")
    )


__all__ = ["inspect_record", "purge", "release", "resolve", "unresolved"]
