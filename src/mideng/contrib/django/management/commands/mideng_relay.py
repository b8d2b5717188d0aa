"""``manage.py mideng_relay``: publish the outbox's committed rows until SIGTERM or Ctrl-C
(the batches in flight finish, published and written back), or ``--once``; as ``mideng
relay`` does. The database is MIDENG's (its ``database`` alias), the broker MIDENG's
``broker``, the table MIDENG's ``outbox``; each option names another."""

from __future__ import annotations

import logging
from argparse import ArgumentParser
from typing import Any

from mideng.contrib.django.commands import MidengCommand, problem, usage
from mideng.contrib.django.settings import config, database_url
from mideng.outbox import service


class Command(MidengCommand):
    help = "Publish committed outbox rows to a broker, in order per key."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="Publish what is there, exit.")
        parser.add_argument("--db", default=None, help="Database URL (default: MIDENG's).")
        parser.add_argument("--broker", default=None, help="Broker URL (default: MIDENG's).")
        parser.add_argument("--table", default=None, help="Outbox table (default: MIDENG's).")
        parser.add_argument("--exchange", default=None, help="AMQP exchange.")
        parser.add_argument(
            "--lease", type=float, default=30.0, help="Seconds a relay holds a key."
        )
        parser.add_argument("--batch", type=int, default=50, help="Keys per batch.")
        parser.add_argument(
            "--max-attempts", type=int, default=10, help="Failed publishes before a row is dead."
        )
        parser.add_argument(
            "--poll", type=float, default=1.0, help="Seconds between looks when nothing wakes it."
        )
        parser.add_argument(
            "--progress",
            type=float,
            default=service.PROGRESS_EVERY,
            help="Seconds between progress lines while it runs (0: none).",
        )

    def run(self, **options: Any) -> None:
        settings = config()
        broker = options["broker"] or settings.broker
        if broker is None:
            raise usage("no broker: set MIDENG['broker'] or pass --broker")
        db = options["db"] or database_url(settings.database)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        try:
            code = service.serve(
                db,
                broker,
                once=options["once"],
                say=self.stdout.write,
                table=options["table"] or settings.outbox,
                exchange=options["exchange"],
                lease=options["lease"],
                batch_keys=options["batch"],
                max_attempts=options["max_attempts"],
                poll=options["poll"],
                progress=options["progress"],
                # Django's own -v/--verbosity: 2 or more adds a DEBUG line per batch.
                verbose=options.get("verbosity", 1) >= 2,
            )
        except service.Refused as exc:
            raise usage(str(exc)) from exc
        except service.Stopped as exc:
            raise problem(str(exc)) from exc
        if code:
            raise problem("not every committed row was published")
