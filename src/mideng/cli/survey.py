"""``mideng stats`` and ``mideng scan``: what a store holds, counted where it is stored.

``stats`` answers "is anything wrong": records by scope and status, stuck and UNKNOWN ones,
the oldest processing record. ``scan`` answers "how is the keyspace shaped": keys per scope,
how their remaining retention spreads, keys that never expire, the biggest records. Both read
one survey of the store (SQL aggregates, a SCAN of every Redis master); both log an ERROR per
stuck record and exit 1 when there is one (``stats`` also for UNKNOWN records).
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from mideng.cli.common import (
    MAX_ROWS,
    Duration,
    console,
    emit,
    json_option,
    logged,
    opened,
    progress,
    store_option,
    stored_text,
)
from mideng.observability.observers import store_label
from mideng.stores import reports
from mideng.stores.survey import ESTIMATED_STATUSES, EXPIRY_LABELS, STATUSES, Survey

prefix_option = click.option(
    "--prefix",
    default=None,
    callback=stored_text,
    help="Only scopes starting with this (e.g. payments.).",
)
grace_option = click.option(
    "--grace",
    type=Duration(),
    default="60s",
    show_default=True,
    help="A processing record is stuck once its lease ran out longer ago than this.",
)


def _survey(
    store_url: str,
    as_json: bool,
    prefix: str | None,
    grace: float,
    biggest: int,
    *,
    spread: bool = True,
    exact: bool = False,
) -> Any:
    with opened(store_url) as guard, logged():
        with progress(as_json, "counting") as bar:
            task = bar.add_task("survey", total=None)
            found = reports.surveyed(
                guard.store,
                prefix,
                grace,
                biggest,
                lambda n: bar.update(task, completed=n),
                spread=spread,
                exact=exact,
            )
        return guard.store, found


@click.command()
@store_option
@json_option
@prefix_option
@grace_option
@click.option(
    "--exact",
    is_flag=True,
    help="Count every record (a big SQL table's succeeded records are otherwise estimated).",
)
def stats(store_url: str, as_json: bool, prefix: str | None, grace: float, exact: bool) -> None:
    """Records by scope and status, stuck and UNKNOWN ones; exit 1 if there are any."""
    store, found = _survey(store_url, as_json, prefix, grace, 0, spread=False, exact=exact)
    label, age = store_label(store), found.oldest_processing_age
    if as_json:
        emit(reports.stats(store, found, prefix, grace))
    else:
        about = "~" if found.estimated else ""
        table = Table(title=f"{about}{found.total} record(s) in {label}")
        table.add_column("scope")
        for status in STATUSES:
            table.add_column(status, justify="right")
        for scope, statuses in sorted(found.by_scope.items()):
            table.add_row(scope, *(_count(found, status, statuses) for status in STATUSES))
        if found.unscoped:
            table.add_row("(all scopes)", *(_count(found, s, found.unscoped) for s in STATUSES))
        out = console()
        out.print(table)
        note = reports.estimate_note(found)
        if note is not None:
            out.print(note)
        out.print(f"stuck (lease ran out > {grace:g} s ago): {found.stuck_count}")
        out.print(f"unknown: {found.unknown}")
        out.print("oldest processing: " + ("-" if age is None else f"{age:.0f} s"))
    if reports.stats_failed(found):
        raise click.exceptions.Exit(1)


def _count(found: Survey, status: str, statuses: dict[str, int]) -> str:
    """A cell of the stats table: ``~`` before an estimate, ``-`` where the count is
    elsewhere (an estimate not split by scope)."""
    if status in found.unscoped and statuses is not found.unscoped:
        return "-"
    n = statuses.get(status, 0)
    return f"~{n}" if found.estimated and status in ESTIMATED_STATUSES else str(n)


@click.command()
@store_option
@json_option
@prefix_option
@grace_option
@click.option(
    "--biggest",
    type=click.IntRange(0, MAX_ROWS),
    default=10,
    show_default=True,
    help="List this many.",
)
def scan(store_url: str, as_json: bool, prefix: str | None, grace: float, biggest: int) -> None:
    """Keys per scope, retention spread, keys without expiry, biggest records (SCAN on Redis,
    every master of a cluster); exit 1 if a record is stuck."""
    store, found = _survey(store_url, as_json, prefix, grace, biggest)
    label, keys = store_label(store), reports.keys_by_scope(found)
    if as_json:
        emit(reports.scan(store, found, prefix))
    else:
        out = console()
        per_scope = Table(title=f"{found.total} key(s) in {label}, {found.nodes} node(s)")
        for column in ("scope", "keys", "without expiry"):
            per_scope.add_column(column, justify="left" if column == "scope" else "right")
        for scope, n in keys.items():
            per_scope.add_row(scope, str(n), str(found.no_expiry_by_scope.get(scope, 0)))
        out.print(per_scope)
        spread = Table(title="remaining retention")
        for name in EXPIRY_LABELS:
            spread.add_column("<= " + name if name[0].isdigit() else name, justify="right")
        spread.add_row(*(str(found.expiry[name]) for name in EXPIRY_LABELS))
        out.print(spread)
        if found.biggest:
            big = Table(title="biggest records")
            for column in ("scope", "key", "bytes"):
                big.add_column(column, justify="right" if column == "bytes" else "left")
            for b in found.biggest:
                big.add_row(b.scope, b.key, str(b.bytes))
            out.print(big)
        out.print(f"stuck (lease ran out > {grace:g} s ago): {found.stuck_count}")
    if found.stuck_count:
        raise click.exceptions.Exit(1)


__all__ = ["scan", "stats"]
