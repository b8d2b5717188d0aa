"""``mideng relay``: publish the outbox's committed rows until stopped, or once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from typing import TYPE_CHECKING

import click

from mideng.cli.errors import named
from mideng.cli.options import db_option
from mideng.errors import IdempotencyError

if TYPE_CHECKING:
    from mideng.outbox import Left


@click.command("relay")
@db_option(
    "Database URL: postgresql://…, mysql://…, sqlite:///… (SQLAlchemy forms too).",
    envvar="MIDENG_RELAY_DB",
)
@click.option(
    "--broker",
    "broker_url",
    required=True,
    envvar="MIDENG_RELAY_BROKER",
    help="amqp://…, nats://…, redis://… or kafka://host:port.",
)
@click.option("--once", is_flag=True, help="Publish everything committed, then exit.")
@click.option("--exchange", default=None, help="AMQP exchange (default: the default exchange).")
@click.option("--table", default="mideng_outbox", show_default=True, help="Outbox table.")
@click.option("--lease", default=30.0, show_default=True, help="Seconds a relay holds a key.")
@click.option(
    "--batch",
    "batch_keys",
    default=50,
    show_default=True,
    help="Keys per batch (two batches in flight on PostgreSQL and MySQL).",
)
@click.option(
    "--max-attempts", default=10, show_default=True, help="Failed publishes before a row is dead."
)
@click.option(
    "--poll",
    default=1.0,
    show_default=True,
    help="Seconds between looks when nothing wakes the relay.",
)
def relay(
    db_url: str,
    broker_url: str,
    once: bool,
    exchange: str | None,
    table: str,
    lease: float,
    batch_keys: int,
    max_attempts: int,
    poll: float,
) -> None:
    """Publish committed outbox rows to a broker, in order per key. SIGTERM or Ctrl-C finishes
    the batches in flight (published and written back), then exits."""
    from mideng.outbox import Relay

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        worker = Relay(
            db_url,
            broker_url,
            table=table,
            exchange=exchange,
            lease=lease,
            batch_keys=batch_keys,
            max_attempts=max_attempts,
            poll=poll,
        )
    except IdempotencyError as exc:
        raise click.UsageError(str(exc)) from exc

    async def main() -> int:
        try:
            await worker.start()
        except BaseException as exc:
            # What start opened (the database's pool, a client half connected) is closed
            # before the error is reported, as ``async with`` would not: it never entered.
            with contextlib.suppress(Exception):
                await worker.close()
            if isinstance(exc, (ValueError, TypeError)):
                # A client refusing a part of its URL (an option it does not take).
                raise click.UsageError(f"a URL was refused: {named(exc)}") from exc
            if isinstance(exc, Exception) and not isinstance(exc, IdempotencyError):
                raise click.ClickException(f"the relay could not start: {named(exc)}") from exc
            raise
        async with worker:
            if once:
                total = await worker.run_once()
                click.echo(f"published {total.sent}, failed {total.failed}, dead {total.dead}")
                left = await worker.left()
                if left.due or left.waiting:
                    click.echo(_left_line(left, time.time()))
                # Rows it could not publish, failing now or before (waiting for their retry),
                # or held by another relay, live or dead: not everything committed went out.
                return 0 if total.failed == 0 and not left.waiting else 1
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(signum, stop.set)
            await worker.run(stop)
            return 0

    try:
        code = asyncio.run(main())
    except click.ClickException:
        raise
    except IdempotencyError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:
        # ``--once`` meeting a database or broker that went away mid-run: the same one line
        # and exit 1 as at start (a long-running relay logs such errors and goes on).
        raise click.ClickException(f"the relay stopped: {named(exc)}") from exc
    raise SystemExit(code)


def _left_line(left: Left, now: float) -> str:
    """What ``--once`` left pending, and why, as one line."""
    why = (
        (left.retrying, "waiting for a retry after a failed publish"),
        (
            left.leased,
            "leased to a relay (another one, or one stopped or killed, until the lease lapses)",
        ),
        (left.stuck, "below their key's mark (no relay publishes them again)"),
        (left.due, "due now (committed after the last claim)"),
    )
    line = "left pending: " + ", ".join(f"{count} {reason}" for count, reason in why if count)
    if left.next_at is not None:
        line += f"; the first due again in {max(left.next_at - now, 0.0):.1f} s"
    return line
