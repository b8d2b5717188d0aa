"""``mideng relay``: publish the outbox's committed rows until stopped, or once."""

from __future__ import annotations

import logging

import click

from mideng.cli.options import db_option


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
@click.option(
    "--progress",
    default=60.0,
    show_default=True,
    help="Seconds between progress lines of a long-running relay (0: none).",
)
@click.option(
    "-v", "--verbose", is_flag=True, help="A DEBUG line per batch: rows, outcomes, time taken."
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
    progress: float,
    verbose: bool,
) -> None:
    """Publish committed outbox rows to a broker, in order per key. SIGTERM or Ctrl-C finishes
    the batches in flight (published and written back), then exits. A long-running relay logs
    its start, what it published every --progress seconds, and its stop."""
    from mideng.outbox import service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        code = service.serve(
            db_url,
            broker_url,
            once=once,
            say=click.echo,
            table=table,
            exchange=exchange,
            lease=lease,
            batch_keys=batch_keys,
            max_attempts=max_attempts,
            poll=poll,
            progress=progress,
            verbose=verbose,
        )
    except service.Refused as exc:
        raise click.UsageError(str(exc)) from exc
    except service.Stopped as exc:
        raise click.ClickException(str(exc)) from exc
    raise SystemExit(code)
