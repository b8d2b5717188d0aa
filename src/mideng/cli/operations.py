"""``mideng operations``: unfinished multi-step operations and stale tasks, for operators and cron.

``pending`` lists unfinished operations; ``reconcile`` runs every one whose holder is gone
again through the functions your service registers (``--guard myservice.payments:guard``
imports the module that decorates them, and uses that Guard); ``stale`` lists processing
records whose holder stopped renewing or that have run longer than ``--older-than``. Each
prints a table, or JSON with ``--json``; ``stale --fail-on-any`` exits 1 when there is one,
for a cron job that alerts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mideng.cli.common import Duration, emit, imported, limit_option
from mideng.guard.default import DEFAULT_STORE
from mideng.guard.guard import Guard
from mideng.operations import reports
from mideng.operations.reconcile import MIN_AGE, needs_attention
from mideng.stores.registry import open_store


def _guard(store_url: str, guard_path: str | None) -> contextlib.closing[Guard]:
    """The Guard to ask, closed when the block ends: the service's (``--guard``), which knows
    its registered operations, or one on ``--store``."""
    guard = (
        Guard(open_store(store_url))
        if guard_path is None
        else imported(guard_path, "--guard", Guard, "shop.payments:guard")
    )
    return contextlib.closing(guard)


@dataclasses.dataclass(frozen=True)
class _Asked:
    """What every operations command is asked: whose Guard (``--store`` or ``--guard``),
    which scope, how many, and whether to print JSON."""

    store_url: str
    guard_path: str | None
    scope: str | None
    limit: int
    as_json: bool

    def guard(self) -> contextlib.closing[Guard]:
        return _guard(self.store_url, self.guard_path)

    def show(self, title: str, report: dict[str, Any], listed: str) -> None:
        """The command's report: its JSON document, or a table of its ``listed`` rows."""
        if self.as_json:
            emit(report)
            return
        rows: list[dict[str, Any]] = report[listed]
        table = Table(title=title)
        for column in rows[0] if rows else ():
            table.add_column(column)
        for row in rows:
            table.add_row(*(_cell(value) for value in row.values()))
        Console().print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return ", ".join(value) if isinstance(value, list) else str(value)


def _asking(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the options every operations command takes, handed to it as one
    ``_Asked``; its own options come after them."""

    @functools.wraps(command)
    def asked(
        store_url: str,
        guard_path: str | None,
        scope: str | None,
        limit: int,
        as_json: bool,
        **own: Any,
    ) -> None:
        command(_Asked(store_url, guard_path, scope, limit, as_json), **own)

    for option in reversed(
        [
            click.option(
                "--store",
                "store_url",
                envvar="MIDENG_STORE",
                default=DEFAULT_STORE,
                show_default=True,
                help="Store URL (or MIDENG_STORE); ignored with --guard, which has its own.",
            ),
            click.option(
                "--guard",
                "guard_path",
                default=None,
                help="module:attribute of your service's Guard, whose operations are registered "
                "when the module is imported.",
            ),
            click.option("--scope", default=None, help="Only this scope."),
            limit_option("List at most this many."),
            click.option("--json", "as_json", is_flag=True, help="Print one JSON document."),
        ]
    ):
        asked = option(asked)
    return asked


@click.group()
def operations() -> None:
    """Unfinished multi-step operations and stale tasks."""


@operations.command()
@_asking
def pending(asked: _Asked) -> None:
    """List unfinished operations: state, steps done and left, attempts, since."""
    with asked.guard() as guard:
        found = guard.pending(asked.scope, asked.limit)
    asked.show(f"{len(found)} unfinished operation(s)", reports.pending(found), "operations")


@operations.command()
@_asking
@click.option(
    "--plan",
    is_flag=True,
    help="Only say what it would do (would_run, would_clear); change nothing.",
)
@click.option(
    "--min-age",
    type=Duration(),
    default=MIN_AGE,
    show_default=True,
    help="Leave operations begun less than this long ago to their callers' retries: "
    "seconds, or 90s, 30m, 12h.",
)
def reconcile(asked: _Asked, plan: bool, min_age: float) -> None:
    """Finish every unfinished operation whose holder is gone (run it from cron)."""
    with asked.guard() as guard:
        report = guard.reconcile(asked.scope, asked.limit, plan=plan, min_age=min_age)
    asked.show(f"{len(report)} operation(s) seen", reports.reconciled(report, plan), "operations")
    if needs_attention(report):
        raise SystemExit(1)


@operations.command()
@_asking
@click.option(
    "--older-than",
    type=Duration(),
    default=None,
    help="How long a task may run: seconds, or 90s, 30m, 12h, 7d.",
)
@click.option("--fail-on-any", is_flag=True, help="Exit 1 when a stale task is found.")
def stale(asked: _Asked, older_than: float | None, fail_on_any: bool) -> None:
    """List processing records whose holder stopped renewing or that run too long."""
    with asked.guard() as guard:
        found = guard.stale(older_than, asked.scope, limit=asked.limit)
    asked.show(f"{len(found)} stale task(s)", reports.stale(found), "tasks")
    if fail_on_any and found:
        raise SystemExit(1)


__all__ = ["operations"]
