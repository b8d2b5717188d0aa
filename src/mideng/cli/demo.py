"""``mideng demo``: the payment story through every layer, with and without mideng.

A payment platform times out on the order service's callback and retries it: three callbacks
at once and a late one reach a real HTTP server on a loopback port. The order goes UNPAID ->
PAID with its event in the outbox, the relay publishes it, the stock consumer takes the stock
and the notifier's OperationConsumer runs the notification (SMS, coupon, points), whose worker
is SIGKILLed between the SMS and the coupon, so the message comes again and the operation is
taken over; the nightly settlement starts on two instances. The same shop without mideng runs
beside it. The play is ``mideng.demo.story``; this prints it.

By default it needs no server: the embedded SQLite store and the in-process broker
(``memory://``); the killed worker is a child process. ``--store`` and ``--broker`` run it on
real servers.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import astuple, fields
from pathlib import Path

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from mideng.demo.shop import Ledger
from mideng.demo.story import CALLBACKS, StoryFailed, expected, run
from mideng.errors import ConfigurationError
from mideng.observability import logs

DEFAULT_BROKER = "memory://demo"
#: The ledger's rows as the demo prints them.
LABELS = {
    "status": "order status",
    "coupons": "coupons issued",
    "points": "points added",
    "stock": "stock left (of 10)",
    "sms": "SMS sent",
    "settlements": "settlements booked",
}


def ledger_table(guarded: Ledger, plain: Ledger) -> Table:
    table = Table(title="Ledger: one payment of 99.00, one unit of SKU-1")
    for column in ("", "one payment means", "with mideng", "without mideng"):
        table.add_column(column, justify="right" if column else "left", no_wrap=True)
    right = expected()
    for field, want, got, plain_got in zip(
        fields(Ledger), astuple(right), astuple(guarded), astuple(plain), strict=True
    ):
        table.add_row(LABELS[field.name], str(want), str(got), str(plain_got))
    return table


@click.command()
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Store URL (default: an embedded SQLite file). A SQL store's database holds the "
    "shop's tables too.",
)
@click.option(
    "--broker",
    "broker_url",
    default=DEFAULT_BROKER,
    show_default=True,
    help="Broker URL: memory:// (in this process), amqp://, nats://, redis://, kafka://.",
)
@click.option("--log/--no-log", default=False, help="Show mideng's log lines as they happen.")
def demo(store_url: str | None, broker_url: str, log: bool) -> None:
    """Play the payment story through every layer: HTTP, outbox, broker, consumer,
    multi-step operation, scheduled job; with mideng and without."""
    # The layer table wants 130 columns; a narrower terminal or a pipe would wrap every cell.
    console = Console(width=max(Console().width, 130))
    shown = RichHandler(console=console, show_path=False, show_time=False)
    shown.setFormatter(logging.Formatter("%(message)s"))
    shown.setLevel(logging.WARNING if log else logging.CRITICAL + 1)
    console.print(
        "[bold]A payment callback times out; the platform retries.[/bold] "
        f"{CALLBACKS} callbacks for one payment arrive at once, then one more retry."
    )
    began = time.monotonic()
    with logs.shown_by(shown), tempfile.TemporaryDirectory(prefix="mideng-demo-") as tmp:
        try:
            story = run(Path(tmp), store_url, broker_url, lambda line: console.print(f"  {line}"))
        except ConfigurationError as exc:
            raise click.UsageError(str(exc)) from None
        except StoryFailed as exc:
            raise click.ClickException(str(exc)) from None
    assert story.guarded is not None
    assert story.plain is not None
    layers = Table(title="Layer by layer: what arrived, what ran, what was deduplicated")
    for column in ("layer", "arrived", "ran (mideng)", "deduplicated (mideng)", "without mideng"):
        layers.add_column(column)
    for layer in story.layers:
        layers.add_row(*astuple(layer))
    console.print(layers)
    console.print(ledger_table(story.guarded, story.plain))
    exact = story.guarded == expected()
    verdict = "exact" if exact else "NOT exact"
    console.print(
        f"With mideng the ledger is {verdict}: {story.guarded.coupons} coupon, "
        f"{story.guarded.points} points, {story.guarded.stock} left in stock, "
        f"{story.guarded.sms} SMS. Without it: {story.plain.coupons} coupons, "
        f"{story.plain.points} points, {story.plain.stock} left in stock, "
        f"{story.plain.sms} SMS. ({time.monotonic() - began:.1f} s)"
    )
    if not exact:
        raise click.ClickException("the ledger with mideng is not the one of one payment")
